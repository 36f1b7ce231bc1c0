"""`twin serve --workers 2`: a real supervisor, one engine process and two HTTP worker processes on one
port (SO_REUSEPORT). Requests spread over the workers; each stream gets exactly its own tokens
(both workers number their requests from 1, so a mix-up in the engine's routing would show); a
worker that stops ends its streams with an OpenAI-style error event, one killed outright drops its
connections, and neither takes the engine or the other worker's streams with it."""
from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from twin.serve import prompt

MODEL = "cloudmatrix-infer-paper"
ROOT = Path(__file__).resolve().parents[1]


def _status(port: int) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/twin/status")
    st = json.loads(c.getresponse().read())
    c.close()
    return st


def _workers(port: int, tries: int = 40) -> dict:
    """worker id -> its status, from `tries` new connections (the kernel spreads them)."""
    seen = {}
    for _ in range(tries):
        try:
            st = _status(port)
        except OSError:
            continue
        seen[st["worker"]] = st
    return seen


def _wait(port: int, ready, timeout: float = 300.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        seen = _workers(port, 10)
        if ready(seen):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"workers not ready: {seen}")


@pytest.fixture(scope="module")
def served():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "twin", "serve", "--workers", "2", "--port", str(port), "--seed", "1"],
                         cwd=ROOT, start_new_session=True)
    try:
        _wait(port, lambda seen: len(seen) == 2 and all(st["engine_ready"] for st in seen.values()))
        yield port, p.pid
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def _open(port: int, k: int):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"model": MODEL, "prompt": f"stream {k} " * 40, "max_tokens": k,
                                                     "stream": True, "twin_timing": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    return c, r, r.getheader("x-twin-worker")


def _serving(supervisor: int, c: http.client.HTTPConnection) -> int:
    """The pid of the worker at the other end of connection `c` (the server names no pids: the
    supervisor's child holding the socket)."""
    mine = c.sock.getsockname()
    for child in psutil.Process(supervisor).children():
        if any(k.raddr and tuple(k.raddr) == mine for k in child.net_connections("tcp")):
            return child.pid
    raise AssertionError(f"no worker holds {mine}")


def _aborted(port: int) -> float:
    """Requests the engine counted as aborted (their clients or their worker went)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    fams = text_string_to_metric_families(c.getresponse().read().decode())
    c.close()
    return sum(smp.value for f in fams for smp in f.samples
               if smp.name == "vllm:request_success_total" and smp.labels.get("finished_reason") == "abort")


def _drain(r, lines=()) -> tuple[str, list, bool]:
    """The stream's text (after `lines` already read), its other events (decoded), and whether it
    ended with [DONE]."""
    text, other = "", []
    try:
        for line in itertools.chain(lines, r):
            if line == b"data: [DONE]\n":
                return text, other, True
            if line.startswith(b"data: "):
                ev = json.loads(line[6:])
                if ev.get("choices") and ev["choices"][0].get("text"):
                    text += ev["choices"][0]["text"]
                else:
                    other.append(ev)
    except (http.client.IncompleteRead, ConnectionError):
        pass
    return text, other, False


def _one(port: int, k: int) -> tuple[int, str, list, bool]:
    c, r, worker = _open(port, k)
    try:
        return (worker, *_drain(r))
    finally:
        c.close()


def test_streams_spread_over_workers_and_each_gets_its_own_tokens(served):
    served = served[0]
    ks = list(range(3, 43))                 # 40 streams at once, each with its own length
    with ThreadPoolExecutor(len(ks)) as pool:
        got = list(pool.map(lambda k: _one(served, k), ks))
    workers = {w for w, *_ in got}
    assert len(workers) == 2, workers
    for k, (worker, text, other, done) in zip(ks, got):
        timing = other[-1]["twin_timing"]
        assert done and text == prompt.filler(0, k), (k, text)
        assert timing["chunk_tokens"][-1] == k and timing["worker"] == worker
    # /metrics is the engine's: every worker answers with all 40 streams' tokens (the first test here)
    time.sleep(0.1)                         # the engine's "times" event follows each stream's last token
    scraped = {}
    for _ in range(20):
        c = http.client.HTTPConnection("127.0.0.1", served, timeout=10)
        c.request("GET", "/metrics")
        r = c.getresponse()
        fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        c.close()
        scraped[r.getheader("x-twin-worker")] = (
            fams["vllm:generation_tokens"].samples[0].value,
            sum(x.value for x in fams["vllm:request_success"].samples if x.name.endswith("_total")))
    assert len(scraped) == 2 and set(scraped.values()) == {(sum(ks), len(ks))}


def test_a_stopped_or_killed_worker_ends_only_its_own_streams(served):
    served, supervisor = served
    engine = _workers(served)
    engine_id = {st["engine"] for st in engine.values()}
    assert len(engine_id) == 1
    for sig in (signal.SIGTERM, signal.SIGKILL):
        opened = []
        while len({w for *_, w in opened}) < 2 or len(opened) < 8:
            opened.append(_open(served, 600))    # ~9 s of tokens each
            assert len(opened) < 60
        first = [r.readline() for _, r, _ in opened]        # streaming
        victim = opened[0][2]
        aborted = _aborted(served)
        os.kill(_serving(supervisor, opened[0][0]), sig)
        with ThreadPoolExecutor(len(opened)) as pool:
            ends = list(pool.map(lambda o, f: _drain(o[1], [f]), opened, first))
        for (c, _, worker), (text, other, done) in zip(opened, ends):
            c.close()
            if worker != victim:
                assert done and text == prompt.filler(0, 600)
            elif sig == signal.SIGTERM:          # an OpenAI-style error event, then the end of the stream
                assert other[-1]["error"]["code"] == "server_shutting_down" and other[-1]["error"]["message"]
                assert done and len(text) < len(prompt.filler(0, 600))
            else:                                # killed outright: the connection just closes
                assert not done and len(text) < len(prompt.filler(0, 600))
        # the engine aborts what the worker that went held: nobody reads those streams any more
        lost = sum(w == victim for *_, w in opened)
        deadline = time.time() + 30
        while _aborted(served) - aborted < lost and time.time() < deadline:
            time.sleep(0.2)
        assert _aborted(served) - aborted == lost
        # the supervisor starts a new worker; the engine is the same process throughout
        seen = _wait(served, lambda s: len(s) == 2 and victim not in s and all(st["engine_ready"] for st in s.values()))
        assert {st["engine"] for st in seen.values()} == engine_id
    worker, text, _, done = _one(served, 5)
    assert done and text == prompt.filler(0, 5)


def test_a_dead_engine_is_restarted_by_the_supervisor_and_every_worker_reconnects(served):
    served, supervisor = served
    before = _workers(served)
    old = {st["engine"] for st in before.values()}.pop()
    c, r, _ = _open(served, 2000)
    first = r.readline()
    worker = _serving(supervisor, c)
    engine = [p for p in psutil.Process(supervisor).children() if p.pid != worker and any(
        str(k.laddr).endswith("engine.sock") for k in p.net_connections("unix"))]
    assert len(engine) == 1
    os.kill(engine[0].pid, signal.SIGKILL)
    text, other, done = _drain(r, [first])       # the stream in flight ends with the engine's error event
    c.close()
    assert done and other[-1]["error"]["code"] == "engine_restarting"
    seen = _wait(served, lambda s: len(s) == 2 and all(st["engine_ready"] and st["engine"] != old
                                                       for st in s.values()))
    assert {st["engine_restarts"] for st in seen.values()} == {1} and set(seen) == set(before)
    assert len({st["engine"] for st in seen.values()}) == 1
    worker, text, _, done = _one(served, 4)
    assert done and text == prompt.filler(0, 4)
