"""Room-attack benchmark: one hostile viewer against a room, while the shared twin runs at 1x.

    python -m twin.cli.attack --doors api        # the OpenAI API's doors only (twin.cli.attack_api)
    python -m twin.cli.attack --minutes 3        # the room server (make room, 8 threads) on a free port

It starts the app locally with an instructor token and a trusted proxy (loopback), so each
simulated browser can come from an address of its own through `X-Forwarded-For`. The instructor
unlocks once; three honest viewers poll the shared twin; two honest viewers each run a sandbox at
max speed. Then, for the given minutes, the attacker (one address, a fresh browser secret whenever
that helps, in a process of its own at a lower CPU priority, as if on another computer) replays
everything the audit of issue 22 found: upload bombs, racing "Open sandbox"
clicks (it runs what it gets at max speed: four sandboxes at max), instructor-token guesses through Unlock and through every control button, the two largest
sweeps the Explorer allows, a Cloud comparison, and resets of its sandbox onto its uploads. It
prints the shared twin's pace, poll latency, the web process's peak RSS and its RSS two minutes
after the attack stops, guesses checked beyond the stated limit, slots the attacker held, the
instructor's refusals, refusals by kind, and any response carrying an absolute path or traceback.
Then the room server's slow clients (twin.cli.attack_slow): 1,000 half-sent requests, then 1,000
idle connections, from one address, with the viewers' poll round trip beside the figures above.
A benchmark, not a test: it prints figures (the README quotes them).
"""
from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import os
import secrets
import subprocess
import threading
import time
from collections import Counter

import psutil
import requests

from twin.cli import attack_slow
from twin.cli.loadtest import ROOT, Callback, Viewer, free_port, pct, start_server, stop_server, tick_callbacks

TOKEN = "attack-bench-" + "k" * 24
HONEST_SANDBOXES = 2   # the attacker may take the other two (its address's cap): four run at max
INTERNAL = (str(ROOT), "Traceback", "/usr/lib/python", "site-packages")


def start_room(port: int, threads: int) -> subprocess.Popen:
    """The room server with the instructor lock on and loopback as the trusted proxy (its log to
    TWIN_ATTACK_LOG, if set)."""
    log = open(os.environ.get("TWIN_ATTACK_LOG", os.devnull), "w")
    return start_server(port, threads, {"TWIN_INSTRUCTOR_TOKEN": TOKEN, "TWIN_TRUSTED_PROXIES": "127.0.0.1"}, log)


class Browser:
    """One simulated browser: its own secret, its stores, and the address it comes from."""

    def __init__(self, app: "App", addr: str, secret: str | None = None):
        self.app, self.addr = app, addr
        self.secret = secret or secrets.token_urlsafe(24)
        self.values: dict = {"ctl-twin.data": "shared", "ctl-secret.data": self.secret, "ctl-viewer.data": "v1",
                             "ctl-seed.value": 0, "ctl-scenario.value": "default"}
        self.s = requests.Session()
        self.s.headers["X-Forwarded-For"] = addr

    def call(self, output: str, changed: str, **values) -> dict:
        """Fire the callback whose output starts with `output`, as the renderer would."""
        cb = self.app.callback(output)
        vals = {**self.values, **values}
        body = cb.body(vals, changed)
        body["inputs"] = [_pattern(i, vals, changed) if i["id"].startswith("{") else i for i in body["inputs"]]
        body["state"] = [_pattern(i, vals, changed) if i["id"].startswith("{") else i for i in body["state"]]
        url = f"{self.app.base}/_dash-update-component"
        try:
            r = self.s.post(url, json=body, timeout=120)
        except requests.ConnectionError:     # a kept-alive connection the server closed as we reused it
            r = self.s.post(url, json=body, timeout=120)
        self.app.seen(r)
        if r.status_code == 204:
            return {}
        return r.json().get("response", {}) if r.ok else {"_status": r.status_code}

    def message(self, resp: dict, where: str = "ctl-msg") -> str:
        return str(resp.get(where, {}).get("children", ""))


def _pattern(i: dict, values: dict, changed: str) -> list:
    """A pattern-matching (ALL) input as the list the renderer sends: the speed and load buttons."""
    kind = json.loads(i["id"])["type"]
    names = {"ctl-speed-btn": ["1", "10", "100", "max"], "ctl-load-btn": ["50", "90", "120"]}.get(kind, [])
    out = []
    for v in names:
        cid = json.dumps({"index": v, "type": kind}, separators=(",", ":"))
        out.append({"id": {"index": v, "type": kind}, "property": i["property"],
                    "value": int(f"{cid}.{i['property']}" == changed)})
    return out


def applied(msg: str) -> bool:
    """A control's answer says it was applied (not "Not applied: ...")."""
    return "applied to the shared twin" in msg and not msg.startswith("Not applied")


def button(kind: str, index: str) -> str:
    return json.dumps({"index": index, "type": kind}, separators=(",", ":")) + ".n_clicks"


class App:
    def __init__(self, base: str):
        self.base = base
        self.deps = requests.get(f"{base}/_dash-dependencies", timeout=10).json()
        self.leaks: list[str] = []
        self.responses = 0
        self._lock = threading.Lock()

    def callback(self, output: str) -> Callback:
        """The callback whose first output is `output` (not an allow_duplicate copy of it)."""
        return Callback(next(d for d in self.deps if d["output"].strip(".").split("...")[0] == output.strip(".")))

    def seen(self, r: requests.Response) -> None:
        text = r.text
        with self._lock:
            self.responses += 1
            for marker in INTERNAL:
                if marker in text:
                    self.leaks.append(f"{marker!r} in a {r.status_code} response: {text[:160]}")


def bomb(rows: int) -> str:
    """An Azure CSV of `rows` rows, each asking for 2^31-1 prompt tokens, as a data URL."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
        f"2023-11-16 18:15:{i % 60:02d}.0000000,2147483647,2147483647" for i in range(rows)]
    return "data:text/csv;base64," + base64.b64encode("\n".join(lines).encode()).decode()


class Attack:
    """The attacker's moves; each tallies what the server answered."""

    def __init__(self, app: App, addr: str = "203.0.113.66"):
        self.app, self.addr = app, addr
        self.refused: Counter = Counter()
        self.checked_unlock = 0          # guesses answered "wrong" or "right" (a real check)
        self.checked_control = 0         # control presses whose answer depended on the token
        self.slots = 0
        self.held: set[str] = set()

    def fresh(self) -> Browser:
        return Browser(self.app, self.addr)

    def uploads(self, n: int = 8) -> None:
        for _ in range(n):
            b = self.fresh()
            r = b.call("..ctl-trace.options", "ctl-trace-upload.contents",
                       **{"ctl-trace-upload.contents": bomb(32), "ctl-trace-upload.filename": "bomb.csv"})
            msg = b.message(r)
            self.refused["upload" if "not accepted" in msg else "upload accepted"] += 1

    def race_sandboxes(self, n: int = 6) -> None:
        b = self.fresh()
        out = []
        threads = [threading.Thread(target=lambda: out.append(b.call("..ctl-twin.data", "ctl-sandbox.n_clicks",
                                                                        **{"ctl-sandbox.n_clicks": 1})))
                   for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = {r["ctl-twin"]["data"] for r in out if str(r.get("ctl-twin", {}).get("data", "")).startswith("sb-")}
        for key in got:                           # and runs it at max speed, as the honest viewers do
            b.values["ctl-twin.data"] = key
            b.call("..ctl-msg.children", button("ctl-speed-btn", "max"))
        self.held |= got
        self.slots = max(self.slots, len(self.held))
        self.refused["sandbox"] += len(out) - sum(1 for r in out if str(r.get("ctl-twin", {}).get("data", "")).startswith("sb-"))

    def guess_unlock(self, n: int = 30) -> None:
        for i in range(n):
            b = self.fresh()
            r = b.call("..ctl-token.data", "ctl-unlock.n_clicks",
                       **{"ctl-token-input.value": f"guess-{i}", "ctl-unlock.n_clicks": 1})
            msg = b.message(r)
            if "Wrong instructor token" in msg or "unlocked" in msg:
                self.checked_unlock += 1
            else:
                self.refused["unlock"] += 1

    def guess_controls(self, n: int = 40) -> None:
        """Presses with a forged token store; the last carries the real token: if that one is
        applied, controls are a token oracle."""
        for i in range(n):
            b = self.fresh()
            real = i == n - 1
            store = {"token": TOKEN if real else f"guess-{i}", "ok": True}
            r = b.call("..ctl-msg.children", button("ctl-speed-btn", "1"),
                       **{"ctl-token.data": store})
            msg = b.message(r)
            if real and applied(msg):
                self.checked_control += 1
            self.refused["control"] += not applied(msg)

    def sweeps(self) -> None:
        for _ in range(2):
            b = self.fresh()
            r = b.call("..ex-job.data", "ex-start.n_clicks", **{
                "ex-start.n_clicks": 1, "ex-dep.value": "cloudmatrix-infer-paper", "ex-sc.value": "paper-decode",
                "ex-k1.value": "rate", "ex-v1.value": "99000", "ex-k2.value": "mtp", "ex-v2.value": "true,false",
                "ex-seeds.value": 4, "ex-dur.value": 10, "ex-source.value": "engine"})
            self.refused["sweep" if "msg-error" in str(r.get("ex-msg", {})) else "sweep queued"] += 1

    def comparison(self) -> None:
        b = self.fresh()
        r = b.call("..cl-run.data", "cl-go.n_clicks", **{"cl-go.n_clicks": 1, "cl-day.value": 600})
        self.refused["comparison" if "msg-error" in str(r) else "comparison queued"] += 1


ATTACKER_NICE = 10     # the attacker's client runs beside the server on this machine; in a room it is
                       # another computer: its own CPU should not be what slows the server


DOORS = ("dashboard", "api")
MOVES = ("uploads", "race_sandboxes", "guess_unlock", "guess_controls", "sweeps", "comparison")


def attacker(base: str, minutes: float, out, moves: tuple = MOVES) -> None:
    """The attack, in a process of its own (its client work must not hold the pollers' GIL); with no
    moves, the same room with nobody attacking (the baseline)."""
    os.nice(ATTACKER_NICE)
    attack = Attack(App(base))
    end, rounds = time.monotonic() + minutes * 60, 0
    while time.monotonic() < end and not moves:
        time.sleep(1.0)
    while time.monotonic() < end:
        for move in moves:
            getattr(attack, move)()
        rounds += 1
        time.sleep(2.0)
    out.put({"rounds": rounds, "refused": dict(attack.refused), "checked_unlock": attack.checked_unlock,
             "checked_control": attack.checked_control, "slots": attack.slots, "leaks": attack.app.leaks,
             "responses": attack.app.responses})


def rss_mb(pid: int) -> tuple[float, float]:
    """(web process RSS, RSS of the whole tree: the web process and its job processes), MB."""
    try:
        p = psutil.Process(pid)
        own = p.memory_info().rss
        kids = sum(c.memory_info().rss for c in p.children(recursive=True))
    except psutil.Error:
        return float("nan"), float("nan")
    return own / 2**20, (own + kids) / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="length of the attack")
    ap.add_argument("--after", type=float, default=120.0, help="seconds to wait after it before reading RSS")
    ap.add_argument("--threads", type=int, default=8, help="room server threads")
    ap.add_argument("--slow-connections", type=int, default=1000, choices=range(0, 10_001), metavar="0..10000",
                    help="slow clients' connections from one address after the attack (0: none)")
    ap.add_argument("--slow-seconds", type=float, default=30.0, help="length of each slow-client phase")
    ap.add_argument("--baseline", action="store_true", help="the same room and minutes with nobody attacking")
    ap.add_argument("--moves", default=",".join(MOVES), help=f"the attacker's moves, comma-separated (of {', '.join(MOVES)})")
    ap.add_argument("--doors", default=",".join(DOORS), help=f"the doors attacked, comma-separated (of {', '.join(DOORS)}: "
                    "the dashboard, the OpenAI API of `twin serve`), one after the other")
    ap.add_argument("--api-moves", default="ghosts,idle,unread,oversized,guesses",
                    help="the API attacker's moves, comma-separated (ghosts, idle, unread, oversized, guesses)")
    a = ap.parse_args(argv)
    doors = [d for d in a.doors.split(",") if d]
    if set(doors) - set(DOORS):
        ap.error(f"--doors: allowed {', '.join(DOORS)}")
    if "api" in doors:
        from twin.cli import attack_api
        api_moves = tuple(m for m in a.api_moves.split(",") if m)
        if set(api_moves) - set(attack_api.MOVES):
            ap.error(f"--api-moves: allowed {', '.join(attack_api.MOVES)}")
        attack_api.main(a.minutes, baseline=a.baseline, moves=api_moves)
    if "dashboard" not in doors:
        return 0
    moves = () if a.baseline else tuple(m for m in a.moves.split(",") if m)
    if set(moves) - set(MOVES):
        ap.error(f"--moves: allowed {', '.join(MOVES)}")

    port = free_port()
    proc = start_room(port, a.threads)
    base = f"http://127.0.0.1:{port}"
    try:
        app = App(base)
        cbs = tick_callbacks(base)
        worker = proc.pid                                             # the one process the twins live in
        first = Browser(app, "198.51.100.1")
        first.call("..shell-status.data", "shell-tick.n_intervals", **{"shell-tick.n_intervals": 1})
        # the instructor unlocks before class; two honest viewers open sandboxes and run them at max
        teacher = Browser(app, "198.51.100.10")
        r = teacher.call("..ctl-token.data", "ctl-unlock.n_clicks",
                         **{"ctl-token-input.value": TOKEN, "ctl-unlock.n_clicks": 1})
        teacher.values["ctl-token.data"] = r.get("ctl-token", {}).get("data")
        stop, leave = threading.Event(), threading.Event()
        watchers = []              # the honest sandboxes' tabs poll them to the end (a sandbox no tab shows is freed)
        for i in range(HONEST_SANDBOXES):
            v = Browser(app, f"198.51.100.{20 + i}")
            key = v.call("..ctl-twin.data", "ctl-sandbox.n_clicks", **{"ctl-sandbox.n_clicks": 1}).get(
                "ctl-twin", {}).get("data")
            if key:
                v.values["ctl-twin.data"] = key
                v.call("..ctl-msg.children", button("ctl-speed-btn", "max"))
                watchers.append(Viewer(base, "overview", cbs, leave, 1.0, twin=key))
        for w in watchers:
            w.start()
        time.sleep(5.0)
        rss0, tree0 = rss_mb(worker)
        pollers = [Viewer(base, page, cbs, stop, 1.0) for page in ("overview", "traffic", "topology")]
        for v in pollers:
            v.start()
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        hostile = ctx.Process(target=attacker, args=(base, a.minutes, out, moves), daemon=True)
        hostile.start()
        peak_rss = peak_tree = rss0
        instructor_refused = instructor_ok = 0
        while hostile.is_alive() and out.empty():
            own, tree = rss_mb(worker)
            peak_rss, peak_tree = max(peak_rss, own), max(peak_tree, tree)
            msg = teacher.message(teacher.call("..ctl-msg.children", button("ctl-speed-btn", "1")))
            instructor_ok += applied(msg)
            instructor_refused += not applied(msg)
            time.sleep(2.0)
        got = out.get(timeout=60)
        hostile.join(10)
        stop.set()
        for v in pollers:
            v.join(timeout=15)
        samples = sorted((w, s) for v in pollers for w, s, _st in v.status)
        pace = (samples[-1][1] - samples[0][1]) / max(samples[-1][0] - samples[0][0], 1e-9) if len(samples) > 2 else float("nan")
        rtt = [x for v in pollers for x in v.rtt]
        slow = attack_slow.run_phases(base, a.slow_connections, a.slow_seconds) if a.slow_connections else []
        peak_rss = max(peak_rss, rss_mb(worker)[0])
        time.sleep(a.after)
        rss_after, tree_after = rss_mb(worker)
        leave.set()
        from twin.live.session import MAX_SANDBOXES_PER_ADDRESS, UNLOCK_PER_MIN_ADDRESS
        allowed = UNLOCK_PER_MIN_ADDRESS * (a.minutes + 1)
        print(f"\nattack: {a.minutes:g} min, {got['rounds']} rounds from one address (client at nice {ATTACKER_NICE}); "
              f"shared twin at 1x; {HONEST_SANDBOXES} honest sandboxes at max and the attacker's; {len(pollers)} "
              "honest viewers polling every 1 s")
        print(f"shared twin pace during the attack: {pace:.3f}x real time (target >= 0.95x)")
        print(f"poll round trip: p50 {pct(rtt, 50):.1f} ms, p95 {pct(rtt, 95):.1f} ms, max {max(rtt, default=0):.0f} ms "
              f"(target p95 < 100 ms); errors {sum(v.errors for v in pollers)}")
        print(f"web process RSS: start {rss0:.0f} MB, peak {peak_rss:.0f} MB, {a.after:.0f} s after {rss_after:.0f} MB "
              f"(target within 150 MB of start: {'met' if rss_after - rss0 <= 150 else 'NOT met'}); with job "
              f"processes: start {tree0:.0f}, peak {peak_tree:.0f}, after {tree_after:.0f} MB")
        print(f"unlock guesses checked: {got['checked_unlock']} (stated limit {UNLOCK_PER_MIN_ADDRESS}/min per address: "
              f"{allowed:.0f} over the attack) -> beyond the limit: {max(got['checked_unlock'] - allowed, 0):.0f}")
        print(f"control presses that checked a token: {got['checked_control']} (target 0)")
        print(f"sandboxes the attacker got over the attack: {got['slots']} (at most {MAX_SANDBOXES_PER_ADDRESS} at once, "
              "its address's cap; one no tab shows is freed after 90 s); "
              f"instructor presses applied {instructor_ok}, refused {instructor_refused}")
        print("refusals by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(got["refused"].items())))
        keys = sum("upload:" in json.dumps(st) for v in pollers for _w, _s, st in v.status)
        leaks = app.leaks + got["leaks"]
        print(f"responses read: {app.responses + got['responses']}; carrying an absolute path or traceback: "
              f"{len(leaks)}" + "".join(f"\n  {x}" for x in leaks[:5]) + f"; honest viewers' statuses naming an upload key: {keys}")
        if slow:
            attack_slow.report(slow, a.slow_connections, a.slow_seconds)
        return 0
    finally:
        stop_server(proc)


if __name__ == "__main__":
    raise SystemExit(main())
