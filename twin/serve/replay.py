"""The outside client: a Mooncake-format trace replayed against `twin serve`, printing the client's
TTFT and inter-token latency percentiles next to the twin's own for the same requests (sent back
in each stream's last chunk when the request asks for `twin_timing`).

Two clients the project did not write: the official openai SDK (`--client sdk`: AsyncOpenAI, one
asyncio task per stream; it parses every chunk into pydantic objects) and aiohttp reading the raw
SSE lines (`--client aiohttp`: less CPU a chunk). `--client raw` is the project's own: a bare
asyncio protocol that only finds each event's text marker (the least CPU a chunk). `--procs` splits the streams over client
processes (spawned, each its own event loop), so the client is not the bottleneck it measures.
A chunk's time is taken when its line is read, on the client's own clock (time.perf_counter).

Prompts: each 512-token block id of a row becomes the same 512 words (drawn with the id as the
seed from the shipped tokenizer's words that are one token each: twin.serve.tokens), so rows that
share hash_ids share text prefixes, and the server's prefix hashes (prompt.py) give them shared
blocks; the last block is cut to the row's input_length, which is then exactly the server's count.
Closed loop: `concurrency` streams are kept open (started over `ramp_s`, inside the server's
per-address rate budget); the next row starts as soon as one ends (1 s after a failure).
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context

import numpy as np

from twin.serve import tokens
from twin.workload.tracefile import TRACES, default_trace_path

BLOCK = 512       # Mooncake's block size (tokens per hash id; Qin et al., FAST 2025; twin/traces/README.md)
RAMP_PER_S = 250  # streams started a second during the ramp (well under api.REQUESTS_PER_S_ADDRESS = 500)


def rows(path: str, n: int, max_input: int) -> list[tuple[int, int, list]]:
    out = []
    with open(path) as f:
        for line in f:
            if len(out) >= n:
                break
            r = json.loads(line)
            inp = min(int(r["input_length"]), max_input)
            out.append((inp, int(r["output_length"]), r["hash_ids"][:-(-inp // BLOCK)]))
    if not out:
        raise ValueError(f"{path}: no rows (allowed: a Mooncake JSONL file)")
    return out


@lru_cache(maxsize=1)
def _words() -> np.ndarray:
    """" word" tokens of the shipped tokenizer that encode back to themselves alone."""
    tok = tokens.tokenizer()
    out = [w for w, i in tok.get_vocab().items() if w[:1] == "\u0120" and w[1:].isascii() and w[1:].isalpha()
           and tokens.encode(" " + w[1:]) == [i]]
    return np.array(sorted(" " + w[1:] for w in out))


@lru_cache(maxsize=4096)
def _block(h: int) -> tuple:
    return tuple(np.random.default_rng(h).choice(_words(), BLOCK))


def text(inp: int, ids: list) -> str:
    """A prompt of exactly `inp` tokens whose 512-token blocks are those of hash ids `ids`."""
    words = [w for h in ids for w in _block(h)]
    return "".join(words[:inp])


async def _sdk_one(client, model: str, prompt: str, out: int) -> tuple[float, list, dict]:
    t0 = time.perf_counter()
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=out, stream=True,
                                             extra_body={"twin_timing": True})
    times, twin = [], {}
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            times.append(time.perf_counter())
        extra = getattr(chunk, "model_extra", None) or {}
        if "twin_timing" in extra:
            twin = extra["twin_timing"]
    return t0, times, twin


async def _raw_one(session, url: str, model: str, prompt: str, out: int) -> tuple[float, list, dict]:
    body = {"model": model, "prompt": prompt, "max_tokens": out, "stream": True, "twin_timing": True}
    t0 = time.perf_counter()
    times, twin = [], {}
    async with session.post(url + "/completions", json=body) as r:
        if r.status != 200:
            code = re.search(r'"code":"([a-z_]+)"', await r.text())
            raise RuntimeError(f"HTTP {r.status} {code.group(1) if code else ''}".strip())
        async for line in r.content:
            if line.startswith(b"data: {"):
                if b'"text":""' in line:            # the last chunk: no token, the twin's times
                    twin = json.loads(line[6:]).get("twin_timing", twin)
                elif b'"text":"' in line:
                    times.append(time.perf_counter())
    return t0, times, twin


class _SSE(asyncio.Protocol):
    """`--client raw`: the project's own minimal HTTP/1.1 client for one streamed completion (a new
    connection per request, `Connection: close`): each complete `data: {...}` event that carries
    text is timestamped when the read that completed it arrives; nothing else is parsed."""

    def __init__(self, request: bytes):
        self.request, self.buf, self.pos = request, bytearray(), 0
        self.times, self.twin, self.status = [], {}, b""
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        transport.write(self.request)

    def data_received(self, data: bytes):
        now = time.perf_counter()
        buf = self.buf
        buf += data
        if not self.status:
            self.status = bytes(buf[9:12])
        while True:
            i = buf.find(b"data: {", self.pos)
            j = buf.find(b"\n\n", i) if i >= 0 else -1
            if j < 0:
                return
            event = buf[i:j]
            if b'"text":""' in event:
                self.twin = json.loads(bytes(event[6:])).get("twin_timing", self.twin)
            elif b'"text":"' in event:
                self.times.append(now)
            self.pos = j + 2

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(None)


async def _raw_socket_one(host: str, port: int, path: str, model: str, prompt: str, out: int):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": out, "stream": True,
                       "twin_timing": True}).encode()
    head = (f"POST {path}/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.perf_counter()
    _, proto = await asyncio.get_running_loop().create_connection(lambda: _SSE(head + body), host, port)
    await proto.done
    if proto.status != b"200":
        code = re.search(rb'"code":"([a-z_]+)"', proto.buf)
        raise RuntimeError(f"HTTP {proto.status.decode()} {code.group(1).decode() if code else ''}".strip())
    return t0, proto.times, proto.twin


async def _part(base_url: str, client_kind: str, model: str, work: list, concurrency: int, ramp_s: float,
                max_tokens) -> tuple[list, Counter]:
    """One client process's share: `concurrency` closed-loop streams over `work`."""
    results, errors, it = [], Counter(), iter(work)
    if client_kind == "sdk":
        from openai import AsyncOpenAI
        client = AsyncOpenAI(base_url=base_url, api_key="twin", max_retries=0, timeout=600)
        one = lambda p, o: _sdk_one(client, model, p, o)            # noqa: E731
    elif client_kind == "raw":
        from urllib.parse import urlsplit
        u = urlsplit(base_url)
        one = lambda p, o: _raw_socket_one(u.hostname, u.port or 80, u.path, model, p, o)  # noqa: E731
    else:
        import aiohttp
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                        timeout=aiohttp.ClientTimeout(total=600))
        one = lambda p, o: _raw_one(session, base_url, model, p, o)  # noqa: E731

    async def worker(i: int):
        await asyncio.sleep(ramp_s * i / concurrency)
        for inp, out, ids in it:
            try:
                results.append(await one(text(inp, ids), max_tokens or out))
            except Exception as exc:   # counted by kind, not fatal: a refusal is a figure too
                errors[str(exc)[:60] or type(exc).__name__] += 1
                await asyncio.sleep(1.0)   # back off (a 429 storm would measure the budget, not the twin)
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    if client_kind == "aiohttp":
        await session.close()
    return results, errors


def _run_part(args) -> tuple[list, Counter, float]:
    os.setsid()     # a session of its own, as a separate client program would be (the kernel's autogroups)
    nice = args[-1]
    if nice:
        os.nice(nice)
    results, errors = asyncio.run(_part(*args[:-1]))
    return results, errors, time.process_time()     # this client process's CPU seconds


def _status(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/twin/status", timeout=5) as r:
        return json.loads(r.read())


def _server_pids(base_url: str) -> tuple[set, set]:
    """The server's HTTP worker pids (the processes listening on its port: the server says no pids)
    and its engine process's (the workers' other sibling or child processes), on this machine."""
    import urllib.parse

    import psutil
    port = urllib.parse.urlparse(base_url).port
    workers = {c.pid for c in psutil.net_connections("tcp")
               if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid}
    family = set()
    for w in workers:
        p = psutil.Process(w)
        family |= {c.pid for c in p.children()}
        if len(workers) > 1:                     # a supervisor's workers: the engine is their sibling
            family |= {c.pid for c in p.parent().children()}
    return workers, family - workers


def _cpu(pids) -> float:
    """CPU seconds (user + system) the processes `pids` have used, from /proc (0 for one gone)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run(a) -> dict:
    with urllib.request.urlopen(a.base_url + "/models", timeout=10) as r:
        model = json.loads(r.read())["data"][0]["id"]
    workers, engines = _server_pids(a.base_url)
    cpu0 = (_cpu(workers), _cpu(engines))
    trace = str(default_trace_path(a.trace)) if a.trace in TRACES else a.trace
    work = rows(trace, a.requests, a.max_input)
    procs = min(a.procs, a.concurrency)
    ramp = a.concurrency / RAMP_PER_S if a.concurrency > 1 else 0.0
    parts = [(a.base_url, a.client, model, work[p::procs], len(range(p, a.concurrency, procs)), ramp, a.max_tokens,
              a.nice) for p in range(procs)]
    samples, done = [], threading.Event()

    def watch():                  # the twin's pace and open streams, and this machine's load, each second
        while not done.wait(1.0):
            try:
                st = _status(a.base_url)
            except OSError:
                continue
            samples.append((st["pace"], max(st["open_requests"], st.get("engine_open", 0)), os.getloadavg()[0]))
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(procs, mp_context=get_context("spawn")) as pool:
        outs = list(pool.map(_run_part, parts))
    wall = time.perf_counter() - t0
    cpu1 = (_cpu(workers), _cpu(engines))
    done.set()
    w.join()
    final = _status(a.base_url)
    results = [r for res, _, _ in outs for r in res]
    errors = sum((e for _, e, _ in outs), Counter())
    s = summarize(results, samples, wall, final, sum(errors.values()))
    s["error_kinds"] = dict(errors)
    s["split"] = split(results, final["wall0"])
    s["client_cpu"] = sum(c for _, _, c in outs) / wall
    s["server_cpu"] = ((cpu1[0] - cpu0[0]) / wall, (cpu1[1] - cpu0[1]) / wall)
    s["workers"] = len(workers)
    s["chunks_per_s"] = sum(len(times) for _, times, _ in results) / wall
    return s


def summarize(results, samples, wall, final, errors=0) -> dict:
    c_ttft, t_ttft, c_itl, t_itl = [], [], [], []
    for t0, times, twin in results:
        if not times or not twin.get("chunk_times_s"):
            continue
        c_ttft.append(times[0] - t0)
        c_itl += np.diff(times).tolist()
        tt = twin["chunk_times_s"]
        t_ttft.append(tt[0] - twin["arrival_s"])
        t_itl += np.diff(tt).tolist()
    pct = lambda x, q: float(np.percentile(x, q) * 1e3) if len(x) else float("nan")  # noqa: E731
    busy = [(p, load) for p, n, load in samples if n > 0]
    return {"requests": len(results), "errors": errors, "wall_s": wall,
            "max_open": max((n for _, n, _ in samples), default=0),
            "pace_min": min((p for p, _ in busy), default=float("nan")),
            "pace_mean": float(np.mean([p for p, _ in busy])) if busy else float("nan"),
            "load": (min((x for _, x in busy), default=float("nan")), max((x for _, x in busy), default=float("nan"))),
            "events_late": final["events_late"],
            "rows": [("TTFT p50", pct(c_ttft, 50), pct(t_ttft, 50)), ("TTFT p99", pct(c_ttft, 99), pct(t_ttft, 99)),
                     ("ITL p50", pct(c_itl, 50), pct(t_itl, 50)), ("ITL p99", pct(c_itl, 99), pct(t_itl, 99))]}


def split(results, wall0: float) -> dict:
    """Where a client's extra TTFT goes (ms, p50 and p99), on this machine's one monotonic clock (the
    client's perf_counter and the server's monotonic are both CLOCK_MONOTONIC on Linux): `request`
    from the client starting a request to the server stamping its arrival, `response` from the
    twin's time of the first token to the client reading it."""
    req = [wall0 + twin["arrival_s"] - t0 for t0, times, twin in results if times and twin.get("chunk_times_s")]
    resp = [times[0] - wall0 - twin["chunk_times_s"][0] for t0, times, twin in results
            if times and twin.get("chunk_times_s")]
    pct = lambda x, q: float(np.percentile(x, q) * 1e3) if len(x) else float("nan")  # noqa: E731
    return {"request": (pct(req, 50), pct(req, 99)), "response": (pct(resp, 50), pct(resp, 99))}


def within(client: float, twin: float) -> bool:
    """The issue's bar: within 5% or 2 ms."""
    return abs(client - twin) <= max(0.05 * abs(twin), 2.0)


def main(a) -> int:
    s = run(a)
    print(f"{s['requests']} requests ({s['errors']} failed), {a.concurrency} streams at once by {a.client} in "
          f"{min(a.procs, a.concurrency)} process(es) (most open seen: {s['max_open']}), {s['wall_s']:.1f} s; "
          f"twin pace min {s['pace_min']:.3f}, mean {s['pace_mean']:.3f} x real time; events shipped late: "
          f"{s['events_late']}; load average {s['load'][0]:.1f}-{s['load'][1]:.1f}; client CPU "
          f"{s['client_cpu']:.2f} s a second")
    k = s["chunks_per_s"] / 1000 or float("nan")
    print(f"  {s['chunks_per_s']:.0f} chunks a second; CPU s a second: client {s['client_cpu']:.2f}, HTTP workers "
          f"({s['workers']}) {s['server_cpu'][0]:.2f}, engine {s['server_cpu'][1]:.2f}; CPU ms per 1,000 chunks: client "
          f"{s['client_cpu'] / k * 1e3:.0f}, HTTP workers {s['server_cpu'][0] / k * 1e3:.0f}, engine "
          f"{s['server_cpu'][1] / k * 1e3:.0f}")
    if s["error_kinds"]:
        print(f"  failed: {s['error_kinds']}")
    print(f"  {'':<10}{'client ms':>11}{'twin ms':>10}{'diff ms':>9}{'diff %':>8}  within 5% or 2 ms")
    for name, c, t in s["rows"]:
        print(f"  {name:<10}{c:>11.2f}{t:>10.2f}{c - t:>9.2f}{(c - t) / t * 100 if t else float('nan'):>8.1f}  "
              f"{'yes' if within(c, t) else 'NO'}")
    sp = s["split"]
    print(f"  client TTFT - twin TTFT = request path p50 {sp['request'][0]:.2f} / p99 {sp['request'][1]:.2f} ms "
          f"+ response path p50 {sp['response'][0]:.2f} / p99 {sp['response'][1]:.2f} ms")
    return 0
