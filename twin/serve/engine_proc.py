"""The served twin's engine in a process of its own (spawned), so that the HTTP process's event loop
and this engine never share a GIL: the engine keeps real time however many streams are open, and
the relay sends each chunk at the time the twin decided.

Time: both processes read CLOCK_MONOTONIC (`time.monotonic`). Sim time s is wall time `wall0 + s`.
The engine runs LEAD_S ahead of the wall clock: every STEP_S it advances to `now - wall0 + LEAD_S`
and ships the token events it made (batched: one message per advance) before their wall time, so
the relay schedules each chunk to leave exactly at `wall0 + s`. A request reaches the engine
LEAD_S after the HTTP server received it (later only if the pipe was slower than the engine's
lead: then at the engine's present), as a front-end hop would hold it; the twin's own TTFT counts
from the HTTP arrival, so that hop is inside it (docs/serve.md). A fixed hop, not "whenever the
engine reads it", keeps the twin's TTFT from depending on where its advance loop happened to be.

One engine serves several relays (the HTTP workers, `twin/serve/workers.py`, or the one HTTP
process): each connects to the engine's Unix socket (`wire.py`), is a numbered peer, and its
requests enter the engine under the key `peer << KEY_BITS | its own key`, so their events go back
to that peer alone. The engine also keeps the per-request Prometheus series (metrics.py): it is the
single source of truth that every worker's /metrics asks for.

Messages in: ("req", key, arrival, input tokens, output tokens or None, block ids, the most a drawn
output may be or None), ("abort", key)
(its client went away: the request leaves the engine now, counted as finished_reason "abort"),
("fault", id, Command), ("metrics", id), ("http", [(handler, method, status class, seconds), ...]) (the
HTTP requests a relay served, for the HTTP series), ("cmd", Command), ("stop",). A relay that goes away
(a worker stopped or killed) aborts all its requests: nobody is left to read them. Out: ("hello", info), ("ev", [(key, t,
tokens so far, end[, extra]), ...], wall time sent), ("fault", id, ticket), ("metrics", id, text),
("gauges", {sim_time, open (served requests not finished, all relays), behind_ms}, pace, late).
`behind_ms` in the gauges: how far the engine's sim time was behind the wall clock each time it
woke (negative: ahead, -LEAD_S at best); above 0 what it makes next is already due and is shipped
late (`late`): the engine process did not get the CPU in time.
"""
from __future__ import annotations

import logging
import secrets
import time
from collections import deque

import numpy as np

from twin.serve import wire

LEAD_S = 0.030       # the engine runs this far ahead of the wall clock (covers its stalls on this loaded 2-core machine: docs/serve.md)
STEP_S = 0.002       # wall seconds between advances (assumption: well under a decode step of ~20-90 ms)
IDLE_S = 0.05        # with nothing in flight it waits this long between advances (or until a message)
SNAPSHOT_S = 2.0     # gauges (for /metrics) are published this often (~6 ms of CPU each; scrapes are 5-15 s)
OUTPUT_SEED = 27     # served requests without max_tokens draw from [seed, OUTPUT_SEED, draw number]
PREFILL_CHUNK = 2048    # assumption: chunked prefill, at most this many tokens a prefill batch (vLLM's
                        # max_num_batched_tokens; 2,048 is its API server's default below 70 GB of memory).
                        # A chunk late in a 128K prompt then costs ~0.3 s of attention (8,192: ~1.2 s),
                        # and 12 whole-context prompts finish ~10% later (tests/test_chunked_prefill.py)
KEY_BITS = 40        # the engine's key of a request: relay number << KEY_BITS | the relay's own key
KEY_MASK = (1 << KEY_BITS) - 1

log = logging.getLogger("twin.serve.engine")


def main(path: str, scenario: str, seed, background: bool, lead_s: float, step_s: float, overrides: dict) -> None:
    """The engine process: listen at `path` at once (relays connect while the engine is built), build
    the engine, then advance at real time until told to stop or its parent process is gone. Each
    relay that connects is a peer: it is sent the hello, its requests enter the engine under keys of
    its own, and only its requests' events are sent back to it."""
    import os
    import select
    os.setsid()     # a session of its own: the kernel's autogroup scheduler gives it its own CPU share
    parent = os.getppid()
    lst = wire.listen(path)
    from twin.engine import Engine
    from twin.engine.external import External
    from twin.serve.metrics import ServeMetrics
    eng = Engine(scenario, seed=seed, **{"prefill_chunk_tokens": PREFILL_CHUNK, **overrides})
    ext = External.attach(eng, background)
    metrics = ServeMetrics(eng.scenario.deployment, max_model_len(eng), eng.timing.drafts)
    eng.timing.record = metrics.steps         # the engine's steps, as vLLM's engine-step series count them
    draws = 0
    drawn: dict = {}
    wall0 = time.monotonic() - eng.sim_time + lead_s     # the engine starts lead_s ahead
    hello = ("hello", {"model": eng.scenario.deployment, "block_size": ext.block_size, "wall0": wall0,
                       "lead_s": lead_s, "step_s": step_s, "engine": secrets.token_hex(4),
                       "max_model_len": max_model_len(eng), "created": int(time.time())})
    peers: dict[int, wire.Peer] = {}
    accepted = 0
    pace: deque = deque(maxlen=250)
    behind: deque = deque(maxlen=5000)    # wall s the engine was behind the wall clock when it woke
    last_gauges, late = 0.0, 0
    while True:
        t0 = time.monotonic()
        try:
            while True:                  # relays that connected since
                try:
                    sock, _ = lst.accept()
                except BlockingIOError:
                    break
                accepted += 1
                peers[accepted] = p = wire.Peer(sock, accepted)
                p.send(hello)
            for p in list(peers.values()):
                msgs = p.read()
                if msgs is None:         # the relay is gone: nobody reads its requests any more
                    peers.pop(p.id).close()
                    for gid in [g for g in ext.keys() if g >> KEY_BITS == p.id]:
                        _abort(ext, metrics, drawn, gid)
                    continue
                for msg in msgs:
                    kind = msg[0]
                    if kind == "req":
                        _, key, arrival, inp, out, blocks, cap = msg
                        gid = p.id << KEY_BITS | key
                        metrics.arrived(gid, arrival, inp, out)
                        if out is None:
                            rng = np.random.default_rng([eng.seed, OUTPUT_SEED, draws])
                            out, draws = int(eng.scenario.output.dist().sample(rng, 1)[0]), draws + 1
                            out = min(out, cap or out)
                            drawn[gid] = out
                        ext.inject(arrival + lead_s, inp, out, blocks, gid)   # the hop: LEAD_S after the HTTP arrival
                    elif kind == "abort":
                        _abort(ext, metrics, drawn, p.id << KEY_BITS | msg[1])
                    elif kind == "fault":
                        p.send(("fault", msg[1], _fault(eng, msg[2])))
                    elif kind == "http":
                        metrics.http(msg[1])
                    elif kind == "metrics":
                        p.send(("metrics", msg[1], metrics.render(eng, _pace(pace), late)))
                    elif kind == "cmd":
                        eng.submit(msg[1])
                    elif kind == "stop":
                        return
            behind.append(t0 - wall0 - eng.sim_time)   # > 0: what this advance makes is already due
            target = t0 - wall0 + lead_s
            if target > eng.sim_time:
                eng.advance(target - eng.sim_time)
            if ext.events:
                events, ext.events = ext.events, []
                if drawn:
                    events = [e + (drawn.pop(e[0]),) if e[3] == "admitted" and e[0] in drawn else e
                              for e in events]
                metrics.events(events)
                done = time.monotonic()
                late += sum(1 for e in events if wall0 + e[1] < done)
                _route(peers, events, done)
            pace.append((t0, eng.sim_time))
            if t0 - last_gauges >= SNAPSHOT_S:
                last_gauges = t0
                g = {"sim_time": float(eng.sim_time), "open": len(metrics.open), "behind_ms": dict(zip(
                    ("p50", "p99", "max"), np.round(np.percentile(behind, [50, 99, 100]) * 1e3, 3).tolist()))}
                for p in peers.values():
                    p.send(("gauges", g, _pace(pace), late))
            for p in list(peers.values()):
                if not p.flush():
                    log.error("twin serve: relay %d stopped reading; dropped", p.id)
                    peers.pop(p.id).close()
        except Exception:                # a bad step never kills the engine: say so and carry on
            log.exception("twin serve: engine step failed")
        if os.getppid() != parent:
            return                       # whoever started it is gone
        busy = bool(ext.watch) or not ext.exhausted      # served requests in flight, or background traffic
        rest = (step_s if busy else IDLE_S) - (time.monotonic() - t0)
        if rest > 0:                     # a request (or a new relay) wakes it at once
            select.select([lst, *peers.values()], [p for p in peers.values() if p.out], [], rest)


def max_model_len(eng) -> int:
    """Prompt plus output tokens one request may hold: what the model takes and what one decode
    die's KV holds (the engine refuses more as kv_too_long)."""
    return int(min(eng.pm.model.max_context, eng.kv_capacity_tokens))


def _abort(ext, metrics, drawn: dict, gid: int) -> None:
    """The request `gid`'s client went away: out of the engine, counted as aborted."""
    if ext.abort(gid):
        metrics.aborted(gid)
    drawn.pop(gid, None)


def _route(peers: dict, events: list, sent: float) -> None:
    """Each relay gets its own requests' events, under its own keys, in one message."""
    mine: dict[int, list] = {}
    for e in events:
        mine.setdefault(e[0] >> KEY_BITS, []).append((e[0] & KEY_MASK, *e[1:]))
    for pid, evs in mine.items():
        p = peers.get(pid)
        if p is not None:
            p.send(("ev", evs, sent))


def _pace(pace: deque) -> float:
    """Sim seconds per wall second over the last ~0.5 s of advances."""
    if len(pace) < 2:
        return 1.0
    (w0, s0), (w1, s1) = pace[0], pace[-1]
    return (s1 - s0) / (w1 - w0) if w1 > w0 else 1.0


def _fault(eng, cmd) -> dict:
    """A fault command checked at the edge (twin.live.controls.fault_command): on the engine's one queue,
    applied now, and its ticket's answer (accepted at t, or refused with the engine's reason)."""
    ticket = eng.submit(cmd)
    eng.apply_commands()
    return ticket.as_dict()
