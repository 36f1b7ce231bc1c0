"""Slow clients against the room server: half-sent requests (slowloris) and idle connections.

    python -m twin.cli.attack_slow                      # starts the room server (make room) on a free port
    python -m twin.cli.attack_slow --url http://127.0.0.1:8050 --connections 1000 --seconds 30

From one address (127.0.0.66: loopback, but not the viewers' address and no trusted proxy), a
process of its own opens `--connections` connections and keeps that many open: in the first phase
each sends the start of a request and then one more header byte every few seconds, never finishing
it; in the second each sends nothing. Whatever the server closes or refuses is opened again (200 a
second at most, after the first `--connections` at once). Meanwhile three
honest viewers poll the shared twin once a second. A third phase asks, on one connection as fast
as it is answered, for pages and paths that are no page. Printed per phase: the shared twin's
pace, the viewers' poll round trip (p50, p95, max) and errors, and what the server did with the
attacker's connections (held open, answered 429, closed) or requests (by status). Called by `python -m twin.cli.attack` after the room attack; a benchmark,
not a test.
"""
from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import socket
import threading
import time
from collections import Counter

from twin.cli.loadtest import Viewer, free_port, pct, start_server, stop_server, tick_callbacks

SOURCE = "127.0.0.66"      # the attacker's address: loopback, distinct from the viewers' 127.0.0.1
TRICKLE_S = 5.0            # a half-sent request gets one more header byte this often (below any idle timeout)
STEP_S = 0.5               # the attacker's loop: check, reopen, trickle
REOPEN_PER_S = 200         # after the first `n` at once, connections reopened a second at most: each refused one
                           # leaves a loopback port in TIME_WAIT for 60 s, and 28k ports would run out in a phase
PHASES = ("none", "half-open", "idle", "pages")      # "none": the same viewers with nobody attacking
PAGE_PATHS = ("/", "/nope", "/wp-login.php", "/topology")   # what the page flood asks for, in turn
ATTACKER_NICE = 10         # as in twin.cli.attack: the attacker's client is another computer in a room


def _open(host: str, port: int, phase: str) -> socket.socket | None:
    s = socket.socket()
    s.settimeout(2.0)
    try:
        s.bind((SOURCE, 0))
        s.connect((host, port))
        if phase == "half-open":
            s.sendall(b"GET /_dash-layout HTTP/1.1\r\nHost: room\r\nX-Slow: ")
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        return None


def _state(s: socket.socket) -> str:
    """'open', '429' (the server refused it) or 'closed', without blocking."""
    try:
        data = s.recv(64)
    except BlockingIOError:
        return "open"
    except OSError:
        return "closed"
    return "429" if data.startswith(b"HTTP/1.1 429") else "closed"


def page_flood(host: str, port: int, seconds: float) -> dict:
    """Page loads and unknown paths, one after the other on one kept-alive connection, for `seconds`."""
    seen: Counter = Counter()
    end, conn, i = time.monotonic() + seconds, None, 0
    while time.monotonic() < end:
        try:
            conn = conn or http.client.HTTPConnection(host, port, timeout=10, source_address=(SOURCE, 0))
            conn.request("GET", PAGE_PATHS[i % len(PAGE_PATHS)])
            r = conn.getresponse()
            r.read()
            seen[f"page {r.status}"] += 1
        except (OSError, http.client.HTTPException):
            seen["page error"] += 1
            conn = None
        i += 1
    return {"seen": dict(seen), "most_open": 1}


def slow_client(host: str, port: int, n: int, phase: str, seconds: float, out) -> None:
    """Keep `n` connections of the phase's kind open for `seconds` (in a process of its own); the
    "pages" phase asks for pages and unknown paths as fast as one connection can instead."""
    os.nice(ATTACKER_NICE)
    if phase == "pages":
        out.put(page_flood(host, port, seconds))
        return
    if phase == "none":
        time.sleep(seconds)
        out.put({"seen": {}, "most_open": 0})
        return
    seen: Counter = Counter()
    socks: list[socket.socket] = []
    end, next_trickle, most_open = time.monotonic() + seconds, time.monotonic() + TRICKLE_S, 0
    while time.monotonic() < end:
        keep = []
        for s in socks:
            st = _state(s)
            if st == "open":
                keep.append(s)
            else:
                seen[st] += 1
                s.close()
        socks = keep
        most_open = max(most_open, len(socks))
        room = n - len(socks) if not seen["opened"] else min(n - len(socks), int(REOPEN_PER_S * STEP_S))
        for _ in range(room):
            s = _open(host, port, phase)
            seen["opened"] += 1
            if s is None:
                seen["connect failed"] += 1
                break
            socks.append(s)
        if phase == "half-open" and time.monotonic() >= next_trickle:
            for s in socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass
            next_trickle += TRICKLE_S
        time.sleep(STEP_S)
    for s in socks:
        s.close()
    out.put({"seen": dict(seen), "most_open": most_open})


def run_phases(base: str, connections: int, seconds: float, phases=PHASES) -> list[dict]:
    """Each phase with three honest viewers polling; one result dict per phase."""
    host, port = base.split("//", 1)[1].rsplit(":", 1)
    cbs = tick_callbacks(base)
    ctx = multiprocessing.get_context("spawn")
    results = []
    for phase in phases:
        stop = threading.Event()
        viewers = [Viewer(base, page, cbs, stop, 1.0) for page in ("overview", "traffic", "topology")]
        out = ctx.Queue()
        attacker = ctx.Process(target=slow_client, args=(host, int(port), connections, phase, seconds, out), daemon=True)
        attacker.start()
        time.sleep(min(5.0, seconds / 4))          # the connections are open before the viewers start
        for v in viewers:
            v.start()
        got = out.get(timeout=seconds + 120)
        attacker.join(10)
        stop.set()
        for v in viewers:
            v.join(timeout=15)
        rtt = [x for v in viewers for x in v.rtt]
        samples = sorted((w, sim) for v in viewers for w, sim, _st in v.status)
        pace = ((samples[-1][1] - samples[0][1]) / max(samples[-1][0] - samples[0][0], 1e-9)
                if len(samples) > 2 else float("nan"))
        results.append({"phase": phase, "rtt": rtt, "pace": pace, "errors": sum(v.errors for v in viewers), **got})
    return results


def report(results: list[dict], connections: int, seconds: float) -> None:
    print(f"\nslow clients: {connections} connections kept open from one address ({SOURCE}) for {seconds:g} s "
          f"per phase; 3 honest viewers polling every 1 s")
    for r in results:
        rtt, seen = r["rtt"], r["seen"]
        polls = (f"  {r['phase']:<9}: shared twin {r['pace']:.3f}x; viewers' polls p50 {pct(rtt, 50):.1f} ms, "
                 f"p95 {pct(rtt, 95):.1f} ms, max {max(rtt, default=0):.0f} ms, {len(rtt)} polls, errors "
                 f"{r['errors']} (target p95 < 200 ms, no errors); attacker: ")
        if r["phase"] == "none":
            print(polls + "none")
            continue
        if r["phase"] == "pages":
            print(polls + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + f" in {seconds:g} s "
                  f"(asking for {', '.join(PAGE_PATHS)} in turn)")
            continue
        print(polls + f"at most {r['most_open']} open at once, {seen.get('opened', 0)} opened, "
              f"{seen.get('429', 0)} answered 429, {seen.get('closed', 0)} closed by the server, "
              f"{seen.get('connect failed', 0)} connects failed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server (default: start the room server on a free port)")
    ap.add_argument("--connections", type=int, default=1000, choices=range(1, 10_001), metavar="1..10000")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    a = ap.parse_args(argv)
    phases = tuple(p for p in a.phases.split(",") if p)
    if not phases or set(phases) - set(PHASES):
        ap.error(f"--phases: allowed {', '.join(PHASES)}")
    proc = None
    if a.url:
        base = a.url.rstrip("/")
    else:
        port = free_port()
        proc = start_server(port, 8)
        base = f"http://127.0.0.1:{port}"
    try:
        report(run_phases(base, a.connections, a.seconds, phases), a.connections, a.seconds)
    finally:
        if proc is not None:
            stop_server(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
