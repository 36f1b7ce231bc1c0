"""The outside client: a Mooncake-format trace replayed against `twin serve` by the official openai
SDK (AsyncOpenAI, one asyncio task per stream), printing the client's TTFT and inter-token latency
percentiles next to the twin's own for the same requests (sent back in each stream's last chunk
when the request asks for `twin_timing`).

Prompts: each 512-token block id of a row becomes the same 2,048 bytes of text (its id, repeated),
so rows that share hash_ids share text prefixes, and the server's prefix hashes (prompt.py) give
them shared blocks; the last block is cut to the row's input_length (4 bytes a token, prompt.py).
Closed loop: `concurrency` streams are kept open; the next row starts as soon as one ends.
"""
from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import numpy as np

from .prompt import BYTES_PER_TOKEN

BLOCK = 512       # Mooncake's block size (tokens per hash id; /work/shared/traces/README.md)


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


def text(inp: int, ids: list) -> str:
    body = "".join((f"{h:015d} " * (BLOCK * BYTES_PER_TOKEN // 16))[:BLOCK * BYTES_PER_TOKEN] for h in ids)
    return body[:inp * BYTES_PER_TOKEN]


async def one(client, model: str, prompt: str, out: int) -> tuple[float, list, dict]:
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


def _status(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/twin/status", timeout=5) as r:
        return json.loads(r.read())


async def run(a) -> dict:
    from openai import AsyncOpenAI
    work = rows(a.trace, a.requests, a.max_input)
    client = AsyncOpenAI(base_url=a.base_url, api_key="twin", max_retries=0, timeout=600)
    model = (await client.models.list()).data[0].id
    sem = asyncio.Semaphore(a.concurrency)
    results, paces, done = [], [], asyncio.Event()

    async def task(inp, out, ids):
        async with sem:
            results.append(await one(client, model, text(inp, ids), a.max_tokens or out))

    async def watch():
        while not done.is_set():
            st = await asyncio.to_thread(_status, a.base_url)
            paces.append((st["pace"], st["open_requests"]))
            await asyncio.sleep(1.0)
    w = asyncio.create_task(watch())
    t0 = time.perf_counter()
    await asyncio.gather(*(task(*r) for r in work))
    wall = time.perf_counter() - t0
    done.set()
    await w
    final = await asyncio.to_thread(_status, a.base_url)
    return summarize(results, paces, wall, final)


def summarize(results, paces, wall, final) -> dict:
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
    busy = [p for p, n in paces if n > 0]
    return {"requests": len(results), "wall_s": wall, "max_open": max((n for _, n in paces), default=0),
            "pace_min": min(busy, default=float("nan")), "pace_mean": float(np.mean(busy)) if busy else float("nan"),
            "events_late": final["events_late"],
            "rows": [("TTFT p50", pct(c_ttft, 50), pct(t_ttft, 50)), ("TTFT p99", pct(c_ttft, 99), pct(t_ttft, 99)),
             ("ITL p50", pct(c_itl, 50), pct(t_itl, 50)), ("ITL p99", pct(c_itl, 99), pct(t_itl, 99))]}


def main(a) -> int:
    s = asyncio.run(run(a))
    print(f"{s['requests']} requests, {a.concurrency} streams at once (most open seen: {s['max_open']}), "
          f"{s['wall_s']:.1f} s; twin pace min {s['pace_min']:.3f}, mean {s['pace_mean']:.3f} x real time; "
          f"events sent late: {s['events_late']}")
    print(f"  {'':<10}{'client ms':>11}{'twin ms':>10}{'diff ms':>9}{'diff %':>8}")
    for name, c, t in s["rows"]:
        print(f"  {name:<10}{c:>11.2f}{t:>10.2f}{c - t:>9.2f}{(c - t) / t * 100 if t else float('nan'):>8.1f}")
    return 0
