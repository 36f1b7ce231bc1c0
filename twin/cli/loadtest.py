"""Dashboard load test: N scripted viewers poll the page callbacks while a browser times first renders.

    python -m twin.cli.loadtest                      # the room server (8 threads) on a free port
    python -m twin.cli.loadtest --viewers 10 --duration 30 --speed 10
    python -m twin.cli.loadtest --url http://127.0.0.1:8050   # an already running server

Each viewer is an HTTP client that behaves like a browser tab on one page: it posts the shell's
clock callback to /_dash-update-component once per second with the beat it has, and when the beat
changed (the twin has news) that page's live callback with its cursor, exactly as the Dash renderer
would. Reported per page: client round
trip, server time (the app's Server-Timing header), payload per update. A headless Chromium (if
/usr/bin/chromium exists) opens every page in a fresh context during the load and times the first
render (navigation until the page shows live numbers). The engine's achieved speed is read from
the status the shell's clock returns. A benchmark, not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from functools import cache
from pathlib import Path

import requests

from twin.cli import pagelist
from twin.ui.components import presets
from twin.ui.polling import beat_id

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@cache
def pages() -> dict[str, tuple[str, str | None, str]]:
    """name -> (page path, cursor store id of its live callback (None: a static page), selector that
    holds a live value once rendered): every page that declares a `live` probe (twin.cli.pagelist)."""
    return pagelist.live()


SHELL = "shell"            # the shell's clock callback (status and beat)
# how 10 viewers spread over the pages (cycled for other counts)
MIX = ("overview", "topology", "traffic", "overview", "cache", "tradeoffs", "topology", "overview",
       "traffic", "validation")
EXTRA_STATE = {"topo-view.data": "supernode", "to-slo.value": 50, "to-kv.value": 4096,
               "to-dep.data": "cloudmatrix-infer-paper", "fl-view.data": "supernode"}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, threads: int, env: dict | None = None, stderr=None) -> subprocess.Popen:
    """The room server (`make room`: twin.cli.room, `threads` threads) on loopback `port`, once it
    answers; `env` adds settings. The twins live in this one process. Loopback is its trusted proxy
    (unless `env` names another): the benchmarks' simulated browsers all come from 127.0.0.1, as a
    room's come through a proxy, each with its own address in X-Forwarded-For if it has one."""
    cmd = [sys.executable, "-m", "twin.cli.room", "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]
    env = {**os.environ, "TWIN_TRUSTED_PROXIES": "127.0.0.1", **(env or {})}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=stderr)
    for _ in range(240):
        try:
            if requests.get(f"http://127.0.0.1:{port}/_dash-layout", timeout=2).ok:
                return proc
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            raise SystemExit("the room server exited early")
        time.sleep(0.25)
    proc.terminate()
    raise SystemExit("the room server did not come up")


class Callback:
    """One callback as /_dash-dependencies describes it. A wildcard output (the shell's beat to
    every page's beat store) is sent as the list of stores a tab on `page` shows."""

    def __init__(self, dep: dict, page: str | None = None):
        self.output = dep["output"]
        self.outputs = []
        for part in self.output.strip(".").split("..."):
            cid, prop = part.split(".", 1)
            if '"ALL"' in cid:          # {"page":["ALL"],"type":"beat"}: the beat store of the page shown
                self.outputs.append([{"id": beat_id(page), "property": prop}] if page else [])
            else:
                self.outputs.append({"id": cid, "property": prop})
        self.inputs = dep["inputs"]
        self.state = dep["state"]
        self.beat_key = next((f"{i['id']}.{i['property']}" for i in self.inputs if '"type":"beat"' in i["id"]), None)

    def body(self, values: dict, changed: str) -> dict:
        """A request as the renderer sends it: every input and state from `values`, `changed` fired."""
        key = lambda d: f"{d['id']}.{d['property']}"
        return {"output": self.output, "outputs": self.outputs,
                "inputs": [dict(i, value=values.get(key(i))) for i in self.inputs],
                "changedPropIds": [changed],
                "state": [dict(s, value=values.get(key(s))) for s in self.state]}


def stop_server(proc: subprocess.Popen) -> None:
    """End a server start_server started: terminate, and kill it if it has not gone in 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def tick_callbacks(base: str) -> dict[str, Callback]:
    """The shell's clock callback as a tab on each page sends it (key (SHELL, page)) and each live
    page's callback, from the app's dependencies."""
    deps = requests.get(f"{base}/_dash-dependencies", timeout=10).json()
    out = {}
    for name, (_path, cursor, _sel) in pages().items():
        for d in deps:
            if any(i["id"] == "shell-tick" for i in d["inputs"]):
                out[(SHELL, name)] = Callback(d, cursor.removesuffix("-cursor") if cursor else None)
            if cursor and f"..{cursor}.data.." in d["output"] and any('"type":"beat"' in i["id"] for i in d["inputs"]):
                out[name] = Callback(d)
    return out


class Viewer(threading.Thread):
    def __init__(self, base: str, page: str, cbs: dict, stop: threading.Event, period: float, twin: str = "shared"):
        super().__init__(daemon=True)
        self.base, self.page, self.stop_ev, self.period, self.twin = base, page, stop, period, twin
        self.shell, self.cb = cbs[(SHELL, page)], cbs.get(page)
        self.rtt: list[float] = []
        self.server: list[float] = []
        self.bytes: list[int] = []
        self.updates = 0
        self.errors = 0
        self.status: list[tuple[float, float, dict]] = []   # (wall, sim_time, status)

    def _post(self, s: requests.Session, body: dict) -> dict | None:
        """One callback request; its response dict ({} if every output was no_update), None on error.
        Timing and size are added to the last poll's figures."""
        t0 = time.perf_counter()
        try:
            r = s.post(f"{self.base}/_dash-update-component", json=body, timeout=10)
        except requests.RequestException:
            self.errors += 1
            return None
        self.rtt[-1] += (time.perf_counter() - t0) * 1e3
        self.bytes[-1] += len(r.content)
        m = re.search(r"dur=([\d.]+)", r.headers.get("Server-Timing", ""))
        if m:
            self.server[-1] += float(m.group(1))
        if r.status_code == 204:       # every output no_update
            return {}
        if not r.ok:
            self.errors += 1
            return None
        self.updates += 1
        return r.json().get("response", {})

    def run(self) -> None:
        s = requests.Session()
        cursor = pages()[self.page][1]
        values = dict(EXTRA_STATE, **{"ctl-twin.data": self.twin, "shell-beat.data": None})
        n = 0
        nxt = time.monotonic()
        while not self.stop_ev.is_set():
            n += 1
            values["shell-tick.n_intervals"] = n
            self.rtt.append(0.0)
            self.server.append(0.0)
            self.bytes.append(0)
            body = self._post(s, self.shell.body(values, "shell-tick.n_intervals"))
            st = (body or {}).get("shell-status", {}).get("data")
            if isinstance(st, dict):
                self.status.append((time.monotonic(), st.get("sim_time", 0.0), st))
            beat = (body or {}).get("shell-beat", {}).get("data")
            if beat is not None:
                values["shell-beat.data"] = beat
                if self.cb is not None:
                    values[self.cb.beat_key] = beat
                    page = self._post(s, self.cb.body(values, self.cb.beat_key))
                    cur = (page or {}).get(cursor, {}).get("data")
                    if cur:
                        values[f"{cursor}.data"] = cur
            nxt += self.period
            time.sleep(max(0.0, nxt - time.monotonic()))


def first_renders(base: str, names: list[str]) -> dict[str, float]:
    """Seconds from navigation to live numbers on screen, each page in a fresh (cold) browser context."""
    if not Path(CHROMIUM).exists():
        return {}
    try:
        from playwright.sync_api import sync_playwright   # lazy: optional; without it the figure is skipped
    except ImportError:
        return {}
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name in names:
            path, _cursor, sel = pages()[name]
            ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
            pg = ctx.new_page()
            t0 = time.perf_counter()
            pg.goto(base + path)
            pg.wait_for_function(
                "(sel) => { const e = document.querySelector(sel); const s = document.querySelector('#ctl-status-state');"
                " return e && /[0-9A-Za-z]/.test(e.innerText) && e.innerText.trim() !== '–' && s && /live|paused/i.test(s.innerText); }",
                arg=sel, timeout=30_000)
            out[name] = time.perf_counter() - t0
            ctx.close()
        browser.close()
    return out


def set_speed(base: str, speed) -> None:
    """Press a speed button through the real control callback (as a browser click would)."""
    deps = requests.get(f"{base}/_dash-dependencies", timeout=10).json()
    cb = Callback(next(d for d in deps if d["output"].startswith("..ctl-msg.children...")))
    buttons = {"ctl-speed-btn": [str(v) for v in presets("speed")], "ctl-load-btn": [str(v) for v in presets("load")]}
    body = cb.body({"ctl-twin.data": "shared", "ctl-seed.value": 0, "ctl-scenario.value": "default"},
                   "ctl-play.n_clicks")
    body["inputs"] = []
    for i in cb.inputs:
        if not i["id"].startswith("{"):
            body["inputs"].append(dict(i, value=None))
            continue
        kind = json.loads(i["id"])["type"]     # a pattern-matching input arrives as a list
        body["inputs"].append([{"id": {"index": v, "type": kind}, "property": i["property"],
                                "value": int(kind == "ctl-speed-btn" and v == str(speed))}
                               for v in buttons[kind]])
    btn = json.dumps({"index": str(speed), "type": "ctl-speed-btn"}, separators=(",", ":"))
    body["changedPropIds"] = [f"{btn}.n_clicks"]
    r = requests.post(f"{base}/_dash-update-component", json=body, timeout=10)
    r.raise_for_status()
    print(f"control: {r.json()['response']['ctl-msg']['children']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="benchmark a running server instead of starting the room server")
    ap.add_argument("--viewers", type=int, default=10)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of polling")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between polls (the pages' interval)")
    ap.add_argument("--speed", default="10", help="engine speed to hold during the run: 1..1000 or max")
    ap.add_argument("--threads", type=int, default=8, help="room server threads")
    ap.add_argument("--no-browser", action="store_true", help="skip the first-render timing in Chromium")
    a = ap.parse_args(argv)

    proc = None
    base = a.url
    if not base:
        port = free_port()
        proc = start_server(port, a.threads)
        base = f"http://127.0.0.1:{port}"
    try:
        print(f"server {base}  (room server, {a.threads} threads)" if proc else f"server {base}")
        cbs = tick_callbacks(base)
        missing = {p for p, (_path, cur, _sel) in pages().items() if cur} - set(cbs)
        if missing:
            raise SystemExit(f"live callbacks not found for: {', '.join(sorted(missing))}")
        # start the shared twin and set the speed
        requests.post(f"{base}/_dash-update-component", json=cbs[(SHELL, "validation")].body(
            {"ctl-twin.data": "shared", "shell-tick.n_intervals": 1}, "shell-tick.n_intervals"), timeout=30)
        set_speed(base, a.speed)
        time.sleep(2.0)

        stop = threading.Event()
        viewers = [Viewer(base, MIX[i % len(MIX)], cbs, stop, a.period)
                   for i in range(a.viewers)]
        for v in viewers:
            v.start()
            time.sleep(a.period / max(a.viewers, 1))     # spread the polls like independent tabs
        renders = {} if a.no_browser else first_renders(base, list(pages()))
        rest = a.duration - (time.monotonic() - min(v.status[0][0] if v.status else time.monotonic()
                                                         for v in viewers))
        time.sleep(max(0.0, rest))
        stop.set()
        for v in viewers:
            v.join(timeout=15)

        print(f"\n{a.viewers} viewers polling every {a.period:g} s for {a.duration:g} s; engine speed set to "
              f"{a.speed}{'x' if a.speed != 'max' else ''}")
        print(f"{'page':<11}{'viewers':>8}{'polls':>7}{'updates':>8}{'rtt p50':>9}{'rtt p95':>9}"
              f"{'srv p50':>9}{'srv p95':>9}{'KB p50':>8}{'KB p95':>8}{'KB max':>8}{'first render':>14}")
        allsrv, allbytes, allrtt = [], [], []
        for name in pages():
            vs = [v for v in viewers if v.page == name]
            rtt = [x for v in vs for x in v.rtt]
            srv = [x for v in vs for x in v.server]
            kb = [x / 1024 for v in vs for x in v.bytes]
            allsrv += srv
            allrtt += rtt
            allbytes += kb
            fr = renders.get(name)
            print(f"{name:<11}{len(vs):>8}{len(rtt):>7}{sum(v.updates for v in vs):>8}"
                  f"{pct(rtt, 50):>8.1f}m{pct(rtt, 95):>8.1f}m{pct(srv, 50):>8.1f}m{pct(srv, 95):>8.1f}m"
                  f"{pct(kb, 50):>8.1f}{pct(kb, 95):>8.1f}{max(kb, default=float('nan')):>8.1f}"
                  f"{(f'{fr:.2f} s' if fr is not None else '-'):>14}")
        print(f"{'all':<11}{len(viewers):>8}{len(allrtt):>7}{'':>8}{pct(allrtt, 50):>8.1f}m{pct(allrtt, 95):>8.1f}m"
              f"{pct(allsrv, 50):>8.1f}m{pct(allsrv, 95):>8.1f}m{pct(allbytes, 50):>8.1f}{pct(allbytes, 95):>8.1f}"
              f"{max(allbytes, default=float('nan')):>8.1f}")
        samples = sorted((w, s) for v in viewers for w, s, _st in v.status)
        errors = sum(v.errors for v in viewers)
        if len(samples) > 2:
            (w0, s0), (w1, s1) = samples[0], samples[-1]
            achieved = (s1 - s0) / max(w1 - w0, 1e-9)
            last = max((st for v in viewers for _w, _s, st in v.status), key=lambda st: st.get("version", 0))
            target = float(a.speed) if a.speed != "max" else float("nan")
            print(f"\nengine: set {a.speed}, achieved {achieved:.2f}x over the run "
                  f"(runner's own estimate {last.get('achieved')}x, {last.get('step_ms')} ms per advance)"
                  + (f" = {achieved / target * 100:.0f}% of the set speed" if target == target else ""))
        print(f"errors: {errors}")
        if renders:
            print(f"first render (cold browser context, under load): max {max(renders.values()):.2f} s")
        ok = (pct(allsrv, 95) < 50 and max(allbytes, default=0) < 100
              and (not renders or max(renders.values()) < 2.0) and errors == 0)
        print("targets (server p95 < 50 ms, payload < 100 KB, first render < 2 s): "
              + ("met" if ok else "NOT met"))
        return 0
    finally:
        if proc is not None:
            stop_server(proc)


if __name__ == "__main__":
    raise SystemExit(main())
