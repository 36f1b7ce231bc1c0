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

Messages in (tuples over one one-way Pipe, `inbox`): ("req", key, arrival, input tokens, output tokens or None, block
ids), ("fault", id, spec), ("cmd", Command), ("stop",). Out (over another, `conn`): ("hello", info), ("ev", [(key, t,
tokens so far, end[, extra]), ...], wall time sent), ("fault", id, error or None), ("gauges", gauges, pace, late).
`behind_ms` in the gauges: how far the engine's sim time was behind the wall clock each time it
woke (negative: ahead, -LEAD_S at best); above 0 what it makes next is already due and is shipped
late (`late`): the engine process did not get the CPU in time.
"""
from __future__ import annotations

import logging
import time
from collections import deque

import numpy as np

LEAD_S = 0.030       # the engine runs this far ahead of the wall clock (covers its stalls on this loaded 2-core machine: docs/serve.md)
STEP_S = 0.002       # wall seconds between advances (assumption: well under a decode step of ~20-90 ms)
IDLE_S = 0.05        # with nothing in flight it waits this long between advances (or until a message)
SNAPSHOT_S = 2.0     # gauges (for /metrics) are published this often (~6 ms of CPU each; scrapes are 5-15 s)
OUTPUT_SEED = 27     # served requests without max_tokens draw from [seed, OUTPUT_SEED, draw number]

log = logging.getLogger("twin.serve.engine")


def main(inbox, conn, scenario: str, seed, background: bool, lead_s: float, step_s: float, overrides: dict) -> None:
    """The engine process: build the engine, say hello, then advance at real time until told to stop
    or the pipe closes (the HTTP process is gone)."""
    import os
    os.setsid()     # a session of its own: the kernel's autogroup scheduler gives it its own CPU share
    from twin.engine import Engine
    from twin.engine.external import External
    from twin.serve.metrics import engine_gauges
    eng = Engine(scenario, seed=seed, **overrides)
    ext = External.attach(eng, background)
    draws = 0
    drawn: dict = {}
    wall0 = time.monotonic() - eng.sim_time + lead_s     # the engine starts lead_s ahead
    conn.send(("hello", {"model": eng.scenario.deployment, "block_size": ext.block_size, "wall0": wall0,
                         "lead_s": lead_s, "step_s": step_s, "gauges": engine_gauges(eng)}))
    pace: deque = deque(maxlen=250)
    behind: deque = deque(maxlen=5000)    # wall s the engine was behind the wall clock when it woke
    last_gauges, late = 0.0, 0
    while True:
        t0 = time.monotonic()
        try:
            while inbox.poll():
                msg = inbox.recv()
                kind = msg[0]
                if kind == "req":
                    _, key, arrival, inp, out, blocks = msg
                    if out is None:
                        rng = np.random.default_rng([eng.seed, OUTPUT_SEED, draws])
                        out, draws = int(eng.scenario.output.dist().sample(rng, 1)[0]), draws + 1
                        drawn[key] = out
                    ext.inject(arrival + lead_s, inp, out, blocks, key)   # the hop: LEAD_S after the HTTP arrival
                elif kind == "fault":
                    conn.send(("fault", msg[1], _fault(eng, msg[2])))
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
                done = time.monotonic()
                late += sum(1 for e in events if wall0 + e[1] < done)
                conn.send(("ev", events, done))
            pace.append((t0, eng.sim_time))
            if t0 - last_gauges >= SNAPSHOT_S:
                last_gauges = t0
                (w0, s0), (w1, s1) = pace[0], pace[-1]
                g = engine_gauges(eng)
                g["behind_ms"] = dict(zip(("p50", "p99", "max"), np.round(np.percentile(behind, [50, 99, 100]) * 1e3, 3)))
                conn.send(("gauges", g, (s1 - s0) / (w1 - w0) if w1 > w0 else 1.0, late))
        except (EOFError, BrokenPipeError, OSError):
            return                       # the HTTP process is gone
        except Exception:                # a bad step never kills the engine: say so and carry on
            log.exception("twin serve: engine step failed")
        busy = bool(ext.watch) or not ext.exhausted      # served requests in flight, or background traffic
        rest = (step_s if busy else IDLE_S) - (time.monotonic() - t0)
        if rest > 0:
            inbox.poll(rest)             # a request wakes it at once


def _fault(eng, cmd) -> dict:
    """A fault command checked at the edge (twin.live.controls.fault_command): on the engine's one queue,
    applied now, and its ticket's answer (accepted at t, or refused with the engine's reason)."""
    ticket = eng.submit(cmd)
    eng.apply_commands()
    return ticket.as_dict()
