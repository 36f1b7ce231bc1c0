"""The API doors of the attack benchmark (issue 34): one hostile address against `twin serve`
while a polite client streams from another, the twin at 1x.

    python -m twin.cli.attack --doors api --minutes 1

It starts `python -m twin serve` (one HTTP process, the engine in its own) with an instructor token.
Addresses are loopback ones of their own (127.0.0.2 the polite client, 127.0.0.3 the attacker,
127.0.0.4 the observer): the server budgets by address. The polite client opens a streaming request
every POLITE_EVERY_S (a fresh ~1,000-token prompt, 32 tokens out) and times its first token. The
attacker, in a process of its own at a lower CPU priority (as if on another computer), runs every
door at once for the given minutes: ghost streams (streaming requests with a large max_tokens whose
sockets close at once), idle TCP connections and half-sent heads (slowloris), streams it never
reads, prompts of the whole context (a dozen in flight) and over it, and instructor-token guesses
through POST /twin/fault. Printed: the polite client's TTFT p50/p95 (target p95 < 500 ms) and the
503s it saw (target 0), the twin's pace, how long after the attacker leaves the engine holds only
the polite load again (target < 5 s), guesses checked against the gate's stated limit, what each
door was answered, the server's RSS, any answer carrying a path or traceback, and how long the
server takes to stop on SIGTERM with unread streams open.
A benchmark, not a test: it prints figures (docs/performance/web.md quotes them).
"""
from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import psutil

from twin.cli.loadtest import ROOT, free_port, pct

TOKEN = "attack-api-" + "k" * 24
MODEL = "cloudmatrix-infer-paper"
POLITE, ATTACKER, OBSERVER = "127.0.0.2", "127.0.0.3", "127.0.0.4"
POLITE_EVERY_S = 0.25      # the polite client's pace: a new stream every 0.25 s (4 a second, ~1 s each)
ATTACKER_NICE = 10
INTERNAL = (str(ROOT), "Traceback", "/usr/lib/python", "site-packages")


def _conn(port: int, addr: str, timeout: float = 60.0) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(addr, 0))


def _request(port: int, addr: str, path: str, body: dict | None = None, headers: dict | None = None,
             timeout: float = 60.0) -> tuple[int, bytes]:
    c = _conn(port, addr, timeout)
    try:
        c.request("POST" if body is not None else "GET", path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def _raw(port: int, addr: str, body: dict, rcvbuf: int | None = None) -> socket.socket:
    """A POST /v1/completions on a bare socket (its response not read)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((addr, 0))
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: twin\r\ncontent-type: application/json\r\n"
              b"content-length: %d\r\n\r\n" % len(data) + data)
    return s


def start_server(port: int, log) -> subprocess.Popen:
    env = {**os.environ, "TWIN_INSTRUCTOR_TOKEN": TOKEN}
    return subprocess.Popen([sys.executable, "-m", "twin", "serve", "--port", str(port), "--seed", "1"], cwd=ROOT,
                            env=env, stdout=log, stderr=log, start_new_session=True)


def status(port: int) -> dict:
    return json.loads(_request(port, OBSERVER, "/twin/status", timeout=10)[1])


def engine_load(port: int) -> float:
    """Requests the engine holds (running + waiting), read at scrape time."""
    text = _request(port, OBSERVER, "/metrics", timeout=10)[1].decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))


# ---- the polite client ---------------------------------------------------------------------------
def polite(port: int, stop, out, inflight) -> None:
    """A stream every POLITE_EVERY_S from its own address; (start, TTFT s or None, status, the
    twin's own TTFT s or None) each."""
    results, lock = [], threading.Lock()

    def one(k: int) -> None:
        t0 = time.monotonic()
        with inflight.get_lock():
            inflight.value += 1
        try:
            c = _conn(port, POLITE, 60)
            c.request("POST", "/v1/completions", json.dumps({
                "model": MODEL, "prompt": f"{k} {secrets.token_hex(8)} " + "polite words " * 300, "max_tokens": 32,
                "stream": True, "twin_timing": True}), {"Content-Type": "application/json"})
            r = c.getresponse()
            ttft = own = None
            if r.status == 200:
                for line in r:
                    if ttft is None and line.startswith(b"data: {") and b'"text":"' in line:
                        ttft = time.monotonic() - t0
                    if b'"twin_timing"' in line:
                        tt = json.loads(line[6:])["twin_timing"]
                        own = tt["chunk_times_s"][0] - tt["arrival_s"]
                    if line.startswith(b"data: [DONE]"):
                        break
            else:
                r.read()
            c.close()
            row = (t0, ttft, r.status, own)
        except OSError as exc:
            row = (t0, None, type(exc).__name__, None)
        finally:
            with inflight.get_lock():
                inflight.value -= 1
        with lock:
            results.append(row)
    threads, k, nxt = [], 0, time.monotonic()
    while not stop.is_set():
        t = threading.Thread(target=one, args=(k,), daemon=True)
        t.start()
        threads.append(t)
        k += 1
        nxt += POLITE_EVERY_S
        time.sleep(max(nxt - time.monotonic(), 0))
    for t in threads:
        t.join(90)
    out.put(results)


# ---- the attacker --------------------------------------------------------------------------------
class Doors:
    """The attacker's moves against the API; each tallies what the server answered."""

    def __init__(self, port: int, max_model_len: int, end: float):
        self.port, self.limit, self.end = port, max_model_len, end
        self.answers: Counter = Counter()
        self.checked = 0                     # token guesses the server compared (answered 401 or 200)
        self.leaks: list[str] = []
        self._lock = threading.Lock()

    def tally(self, door: str, what) -> None:
        with self._lock:
            self.answers[f"{door} {what}"] += 1

    def seen(self, body: bytes) -> None:
        text = body.decode("utf-8", "replace")
        for marker in INTERNAL:
            if marker in text:
                with self._lock:
                    self.leaks.append(f"{marker!r}: {text[:160]}")

    def ghosts(self) -> None:
        """Streaming requests with a large max_tokens, each socket closed at once (2,000 a round)."""
        while time.monotonic() < self.end:
            for i in range(2000):
                try:
                    _raw(self.port, ATTACKER, {"model": MODEL, "prompt": f"ghost {i}", "max_tokens": 20000,
                                               "stream": True}).close()
                    self.tally("ghost", "sent")
                except OSError as exc:
                    self.tally("ghost", type(exc).__name__)
                if i % 100 == 99:
                    time.sleep(0.1)
                if time.monotonic() >= self.end:
                    return

    def idle(self, n: int = 1000, slow: int = 8) -> None:
        """n connections that send nothing and `slow` that send half a head, a line every 2 s; each
        cut or refused one is opened again."""
        held: list = []
        while time.monotonic() < self.end:
            alive = []
            for s, kind in held:
                try:
                    if kind == "slow":
                        s.send(b"x-slow: 1\r\n")
                    s.setblocking(False)
                    data = s.recv(4096)
                    if data == b"" or data.startswith(b"HTTP/1.1 429"):
                        self.tally(f"{kind} connection", "refused 429" if data else "cut")
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.tally(f"{kind} connection", "cut")
                    s.close()
                    continue
                alive.append((s, kind))
            held = alive
            kinds = [k for _, k in held]
            for kind, want in (("idle", n), ("slow", slow)):
                for _ in range(want - kinds.count(kind)):
                    try:
                        s = socket.socket()
                        s.bind((ATTACKER, 0))
                        s.connect(("127.0.0.1", self.port))
                        if kind == "slow":
                            s.send(b"POST /v1/completions HTTP/1.1\r\nhost: twin\r\n")
                        held.append((s, kind))
                        self.tally(f"{kind} connection", "opened")
                    except OSError as exc:
                        self.tally(f"{kind} connection", type(exc).__name__)
            time.sleep(2.0)
        for s, _ in held:
            s.close()

    def unread(self, n: int = 300) -> None:
        """n streams it never reads (a 4 KB receive buffer), held open; cut ones are opened again."""
        held: list = []
        while time.monotonic() < self.end:
            alive = []
            for s in held:
                try:
                    s.setblocking(False)
                    if s.recv(1, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                    alive.append(s)
                except BlockingIOError:
                    alive.append(s)
                except OSError:
                    self.tally("unread stream", "cut")
                    s.close()
            held = alive
            for i in range(n - len(held)):
                try:
                    held.append(_raw(self.port, ATTACKER, {"model": MODEL, "prompt": f"slow reader {i}",
                                                           "max_tokens": 20000, "stream": True}, rcvbuf=4096))
                    self.tally("unread stream", "opened")
                except OSError as exc:
                    self.tally("unread stream", type(exc).__name__)
            time.sleep(1.0)
        for s in held:
            s.close()

    def oversized(self, n: int = 12) -> None:
        """A dozen prompts of the whole context in flight; prompts over it, and a 2 MB body."""
        def whole(i: int) -> None:
            while time.monotonic() < self.end:
                text = f"{i} {secrets.token_hex(8)} " + "y" * (4 * (self.limit - 8))   # fresh: no cache hit
                try:
                    code, body = _request(self.port, ATTACKER, "/v1/completions",
                                          {"model": MODEL, "prompt": text, "max_tokens": 1}, timeout=300)
                    self.seen(body)
                    self.tally("whole-context prompt", code)
                except OSError as exc:
                    self.tally("whole-context prompt", type(exc).__name__)
        threads = [threading.Thread(target=whole, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        while time.monotonic() < self.end:
            for door, text in (("over-context prompt", "z" * (4 * self.limit)), ("2 MB prompt", "z" * (2 << 20))):
                try:
                    code, body = _request(self.port, ATTACKER, "/v1/completions",
                                          {"model": MODEL, "prompt": text, "max_tokens": 10})
                    self.seen(body)
                    self.tally(door, code)
                except OSError as exc:
                    self.tally(door, type(exc).__name__)
            time.sleep(1.0)
        for t in threads:
            t.join(300)

    def guesses(self) -> None:
        """Instructor-token guesses through POST /twin/fault, as fast as answers come; nested JSON."""
        i = 0
        while time.monotonic() < self.end:
            try:
                code, body = _request(self.port, ATTACKER, "/twin/fault",
                                      {"kind": "subplane", "target": "sp1", "duration_s": 1},
                                      {"Authorization": f"Bearer guess-{i}"})
                self.seen(body)
                self.tally("token guess", code)
                self.checked += code in (200, 401)
                i += 1
                if i % 50 == 0:             # and a body nested 20,000 deep
                    c = _conn(self.port, ATTACKER)
                    c.request("POST", "/v1/completions", b"[" * 20000, {"Content-Type": "application/json"})
                    r = c.getresponse()
                    self.seen(r.read())
                    c.close()
                    self.tally("nested JSON", r.status)
            except OSError as exc:
                self.tally("token guess", type(exc).__name__)
                time.sleep(0.1)


MOVES = ("ghosts", "idle", "unread", "oversized", "guesses")


def attacker(port: int, max_model_len: int, seconds: float, out, moves: tuple = MOVES) -> None:
    """The doors in `moves` at once, for `seconds` (none: nobody attacks, the baseline)."""
    os.nice(ATTACKER_NICE)
    doors = Doors(port, max_model_len, time.monotonic() + seconds)
    if not moves:
        time.sleep(seconds)
    threads = [threading.Thread(target=getattr(doors, m), daemon=True) for m in moves]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 320)
    out.put({"answers": dict(doors.answers), "checked": doors.checked, "leaks": doors.leaks})


def _cpu(server: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user + system) of the HTTP process and of the engine process (its child)."""
    kids = server.children()
    return sum(server.cpu_times()[:2]), sum(sum(k.cpu_times()[:2]) for k in kids)


def _stop_time(port: int, proc: subprocess.Popen, unread: int = 50) -> tuple[float, int]:
    """Seconds the server takes to exit on SIGTERM with `unread` streams open that nobody reads."""
    held = [_raw(port, ATTACKER, {"model": MODEL, "prompt": f"held {i}", "max_tokens": 20000, "stream": True},
                 rcvbuf=4096) for i in range(unread)]
    time.sleep(2.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    took = time.monotonic() - t0
    for s in held:
        s.close()
    return took, proc.returncode


def main(minutes: float, baseline: bool = False, moves: tuple = MOVES, warmup: float = 10.0, after: float = 15.0) -> int:
    from twin.live.gate import UNLOCK_PER_MIN
    port = free_port()
    log = open(os.environ.get("TWIN_ATTACK_LOG", os.devnull), "w")
    proc = start_server(port, log)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                st = status(port)
                if st["engine_ready"]:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        limit = st["max_model_len"]
        server = psutil.Process(proc.pid)
        rss = lambda: sum(p.memory_info().rss for p in [server, *server.children(recursive=True)]) / 2**20  # noqa: E731
        ctx = multiprocessing.get_context("spawn")
        stop, pq, aq = ctx.Event(), ctx.Queue(), ctx.Queue()
        inflight = ctx.Value("i", 0)
        pol = ctx.Process(target=polite, args=(port, stop, pq, inflight), daemon=True)
        pol.start()
        time.sleep(warmup)
        rss0 = rss()
        cpu0 = _cpu(server)
        pace0 = (time.monotonic(), status(port)["sim_time"])
        t_attack = time.monotonic()
        hostile = ctx.Process(target=attacker, args=(port, limit, minutes * 60, aq, () if baseline else moves),
                              daemon=True)
        hostile.start()
        peak = rss0
        while hostile.is_alive() and aq.empty():
            peak = max(peak, rss())
            time.sleep(1.0)
        got = aq.get(timeout=400)
        hostile.join(30)
        left = time.monotonic()
        cpu = [(b - a) / (left - t_attack) for a, b in zip(cpu0, _cpu(server))]
        st = status(port)
        pace = (st["sim_time"] - pace0[1]) / (left - pace0[0])
        back = None
        while time.monotonic() - left < after:
            if back is None and engine_load(port) <= inflight.value + 1:
                back = time.monotonic() - left
            time.sleep(0.2)
        rss_after = rss()
        stop.set()
        results = pq.get(timeout=120)
        pol.join(30)
        during = [r for r in results if t_attack <= r[0] <= left]
        ttft = [r[1] * 1e3 for r in during if r[1] is not None]
        own = [r[3] * 1e3 for r in during if r[3] is not None]
        codes = Counter(r[2] for r in during)
        took, rc = _stop_time(port, proc)
        allowed = UNLOCK_PER_MIN * (minutes + 1)
        print(f"\nAPI doors ({'baseline: nobody attacks' if baseline else ', '.join(moves)}): {minutes:g} min from {ATTACKER} "
              f"(client at nice {ATTACKER_NICE}); a polite client "
              f"streams from {POLITE}, a new request every {POLITE_EVERY_S:g} s; max_model_len {limit}")
        print(f"polite TTFT during the attack: p50 {pct(ttft, 50):.0f} ms, p95 {pct(ttft, 95):.0f} ms, max "
              f"{max(ttft, default=0):.0f} ms over {len(ttft)} streams (target p95 < 500 ms); the twin's own TTFT "
              f"(its prefill queue, sim time): p50 {pct(own, 50):.0f} ms, p95 {pct(own, 95):.0f} ms")
        print(f"polite answers: {dict(codes)}; 503s {codes.get(503, 0)} (target 0)")
        print(f"shared twin pace during the attack: {pace:.3f}x real time (target >= 0.95x)")
        print("engine back to the polite load after the attacker left: "
              + (f"{back:.1f} s" if back is not None else f"not within {after:g} s") + " (target < 5 s)")
        print(f"token guesses checked: {got['checked']} (the gate's stated limit: {UNLOCK_PER_MIN}/min per address, "
              f"{allowed:.0f} over the attack) -> beyond the limit: {max(got['checked'] - allowed, 0):.0f}")
        print("answers by door: " + ", ".join(f"{k} {v}" for k, v in sorted(got["answers"].items())))
        print(f"server CPU during the attack: HTTP process {cpu[0]:.2f} s a second, engine process {cpu[1]:.2f} s "
              f"a second; machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"server RSS (HTTP + engine processes): start {rss0:.0f} MB, peak {peak:.0f} MB, {after:g} s after "
              f"{rss_after:.0f} MB")
        print(f"answers carrying an absolute path or traceback: {len(got['leaks'])}"
              + "".join(f"\n  {x}" for x in got["leaks"][:5]))
        print(f"SIGTERM with 50 unread streams open: the server exited in {took:.1f} s (exit code {rc})")
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
