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

Messages: twin/serve/messages.py, each handled through one dispatch table (`HANDLERS`). A relay
that goes away (a worker stopped or killed) aborts all its requests: nobody is left to read them.
The gauges' `behind_ms`: how far the engine's sim time was behind the wall clock each time it
woke (negative: ahead, -LEAD_S at best); above 0 what it makes next is already due and is shipped
late (`late`): the engine process did not get the CPU in time. The pace (when to wake, how far to
advance) is twin.live.realtime's, as the live twin's.
"""
from __future__ import annotations

import logging
import secrets
import time
from collections import deque

import numpy as np

from twin.live import realtime
from twin.serve import messages, wire

LEAD_S = 0.030       # the engine runs this far ahead of the wall clock (covers its stalls on this loaded 2-core machine: docs/serve.md)
STEP_S = 0.002       # wall seconds between advances (assumption: well under a decode step of ~20-90 ms)
IDLE_S = 0.05        # with nothing in flight it waits this long between advances (or until a message)
SNAPSHOT_S = 2.0     # gauges (for /metrics) are published this often (~6 ms of CPU each; scrapes are 5-15 s)
OUTPUT_SEED = 27     # served requests without max_tokens draw from [seed, OUTPUT_SEED, draw number]
PREFILL_CHUNK = 2048    # assumption: chunked prefill (PREFILL), at most this many tokens a prefill batch (vLLM's
                        # max_num_batched_tokens; 2,048 is its API server's default below 70 GB of memory).
                        # A chunk late in a 128K prompt then costs ~0.3 s of attention (8,192: ~1.2 s),
                        # and 12 whole-context prompts finish ~10% later (tests/test_chunked_prefill.py)
PREFILL = {"name": "chunked-fifo", "chunk_tokens": PREFILL_CHUNK}    # the served engine's prefill batching
KEY_BITS = 40        # the engine's key of a request: relay number << KEY_BITS | the relay's own key
KEY_MASK = (1 << KEY_BITS) - 1

log = logging.getLogger("twin.serve.engine")


def main(path: str, scenario: str, seed, background: bool, lead_s: float, step_s: float, overrides: dict) -> None:
    """The engine process: listen at `path` at once (relays connect while the engine is built), build
    the engine, then advance at real time until told to stop or its parent process is gone. Each
    relay that connects is a peer: it is sent the hello, its requests enter the engine under keys of
    its own, and only its requests' events are sent back to it."""
    import os
    os.setsid()     # a session of its own: the kernel's autogroup scheduler gives it its own CPU share
    served = Served(wire.listen(path), scenario, seed, background, lead_s, step_s, overrides)
    realtime.run(served.wake, served.rest, served.failed)


class Served:
    """The served twin's engine and its relays, driven by twin.live.realtime.run."""

    def __init__(self, lst, scenario: str, seed, background: bool, lead_s: float, step_s: float, overrides: dict):
        import os
        from twin.engine import Engine
        from twin.engine.external import External
        from twin.serve.metrics import ServeMetrics
        self.parent = os.getppid()
        self.lst = lst
        self.eng = eng = Engine(scenario, seed=seed, **{"policies": {"prefill_batching": PREFILL}, **overrides})
        self.ext = External.attach(eng, background)
        self.metrics = ServeMetrics(eng.scenario.deployment, max_model_len(eng), eng.timing.drafts)
        eng.timing.record = self.metrics.steps    # the engine's steps, as vLLM's engine-step series count them
        self.draws = 0
        self.drawn: dict = {}
        self.clock = realtime.Clock(step_s, lead_s=lead_s, idle_step_s=IDLE_S, window=250)
        self.clock.start(time.monotonic(), eng.sim_time)      # the engine starts lead_s ahead
        self.hello = messages.Hello(eng.scenario.deployment, self.ext.block_size, self.clock.wall0, lead_s, step_s,
                                    secrets.token_hex(4), max_model_len(eng), int(time.time()))
        self.peers: dict[int, wire.Peer] = {}
        self.accepted = 0
        self.behind: deque = deque(maxlen=5000)    # wall s the engine was behind the wall clock when it woke
        self.last_gauges, self.late = 0.0, 0
        self.stopped = False

    def wake(self, t0: float) -> bool:
        """Take new relays and their messages, advance to the clock's due time, ship the events."""
        self._accept()
        for p in list(self.peers.values()):
            msgs = p.read()
            if msgs is None:         # the relay is gone: nobody reads its requests any more
                self.peers.pop(p.id).close()
                for gid in [g for g in self.ext.keys() if g >> KEY_BITS == p.id]:
                    self._abort(gid)
                continue
            for msg in msgs:
                HANDLERS(self, msg, p)
                if self.stopped:
                    return False
        eng, clock = self.eng, self.clock
        self.behind.append(clock.behind(t0, eng.sim_time))    # > 0: what this advance makes is already due
        due = clock.due(t0, eng.sim_time)
        if due > 0:
            eng.advance(due)
        self._ship()
        clock.note(t0, eng.sim_time)
        if t0 - self.last_gauges >= SNAPSHOT_S:
            self.last_gauges = t0
            g = {"sim_time": float(eng.sim_time), "open": len(self.metrics.open), "behind_ms": dict(zip(
                ("p50", "p99", "max"), np.round(np.percentile(self.behind, [50, 99, 100]) * 1e3, 3).tolist()))}
            for p in self.peers.values():
                p.send(messages.Gauges(g, clock.achieved(1.0), self.late))
        for p in list(self.peers.values()):
            if not p.flush():
                log.error("twin serve: relay %d stopped reading; dropped", p.id)
                self.peers.pop(p.id).close()
        return True

    def rest(self, t0: float) -> bool:
        """Until the next step (the idle step with nothing in flight) or a message; False once the
        process that started this one is gone."""
        import os
        import select
        if os.getppid() != self.parent:
            return False                 # whoever started it is gone
        busy = bool(self.ext.watch) or not self.ext.exhausted      # served requests in flight, or background traffic
        rest = self.clock.rest(time.monotonic() - t0, idle=not busy)
        if rest > 0:                     # a request (or a new relay) wakes it at once
            peers = self.peers.values()
            select.select([self.lst, *peers], [p for p in peers if p.out], [], rest)
        return True

    def failed(self, exc: Exception) -> None:
        """A bad step never kills the engine: say so and carry on."""
        log.error("twin serve: engine step failed", exc_info=exc)

    def _accept(self) -> None:
        while True:                      # relays that connected since
            try:
                sock, _ = self.lst.accept()
            except BlockingIOError:
                return
            self.accepted += 1
            self.peers[self.accepted] = p = wire.Peer(sock, self.accepted)
            p.send(self.hello)

    def _ship(self) -> None:
        """The advance's events: drawn outputs added at admission, counted, and routed to their relays."""
        ext, drawn = self.ext, self.drawn
        if not ext.events:
            return
        events, ext.events = ext.events, []
        if drawn:
            events = [e + (drawn.pop(e[0]),) if e[3] == "admitted" and e[0] in drawn else e for e in events]
        self.metrics.events(events)
        done = time.monotonic()
        wall0 = self.clock.wall0
        self.late += sum(1 for e in events if wall0 + e[1] < done)
        _route(self.peers, events, done)

    def _abort(self, gid: int) -> None:
        """The request `gid`'s client went away: out of the engine, counted as aborted."""
        if self.ext.abort(gid):
            self.metrics.aborted(gid)
        self.drawn.pop(gid, None)

    # ---- the messages' handlers (HANDLERS) ----------------------------------------------------

    def on_request(self, m: messages.Request, p: wire.Peer) -> None:
        gid = p.id << KEY_BITS | m.key
        self.metrics.arrived(gid, m.arrival, m.input_tokens, m.output_tokens)
        out = m.output_tokens
        if out is None:
            rng = np.random.default_rng([self.eng.seed, OUTPUT_SEED, self.draws])
            out, self.draws = int(self.eng.scenario.output.dist().sample(rng, 1)[0]), self.draws + 1
            out = min(out, m.cap or out)
            self.drawn[gid] = out
        self.ext.inject(m.arrival + self.clock.lead_s, m.input_tokens, out, m.blocks, gid)   # the hop: LEAD_S after the HTTP arrival

    def on_abort(self, m: messages.Abort, p: wire.Peer) -> None:
        self._abort(p.id << KEY_BITS | m.key)

    def on_fault(self, m: messages.Fault, p: wire.Peer) -> None:
        p.send(messages.FaultAnswer(m.qid, _fault(self.eng, m.cmd)))

    def on_metrics(self, m: messages.MetricsAsk, p: wire.Peer) -> None:
        p.send(messages.MetricsText(m.qid, self.metrics.render(self.eng, self.clock.achieved(1.0), self.late)))

    def on_http(self, m: messages.Http, p: wire.Peer) -> None:
        self.metrics.http(m.rows)

    def on_cmd(self, m: messages.Cmd, p: wire.Peer) -> None:
        self.eng.submit(m.cmd)

    def on_stop(self, m: messages.Stop, p: wire.Peer) -> None:
        self.stopped = True


HANDLERS = realtime.Dispatch({
    messages.Request: Served.on_request, messages.Abort: Served.on_abort, messages.Fault: Served.on_fault,
    messages.MetricsAsk: Served.on_metrics, messages.Http: Served.on_http, messages.Cmd: Served.on_cmd, messages.Stop: Served.on_stop})


def max_model_len(eng) -> int:
    """Prompt plus output tokens one request may hold: what the model takes and what one decode
    die's KV holds (the engine refuses more as kv_too_long)."""
    return int(min(eng.pm.model.max_context, eng.kv_capacity_tokens))


def _route(peers: dict, events: list, sent: float) -> None:
    """Each relay gets its own requests' events, under its own keys, in one message."""
    mine: dict[int, list] = {}
    for e in events:
        mine.setdefault(e[0] >> KEY_BITS, []).append((e[0] & KEY_MASK, *e[1:]))
    for pid, evs in mine.items():
        p = peers.get(pid)
        if p is not None:
            p.send(messages.Events(evs, sent))


def _fault(eng, cmd) -> dict:
    """A fault command checked at the edge (twin.live.controls.fault_command): on the engine's one queue,
    applied now, and its ticket's answer (accepted at t, or refused with the engine's reason)."""
    ticket = eng.submit(cmd)
    eng.apply_commands()
    return ticket.as_dict()
