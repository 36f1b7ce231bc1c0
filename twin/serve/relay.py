"""The HTTP side of the served twin: a relay between the event loop's streams and the engine
process (`engine_proc`), which it starts, watches and restarts.

The engine ships each token event before its time (it runs LEAD_S ahead of the wall clock), only the
events of this relay's own requests; the relay schedules one loop callback per distinct sim time t at wall `wall0 + t` that hands the
events to their streams, so every chunk leaves at the twin's time and the loop never waits for
the engine. If the engine process dies, the streams it held end with "engine_lost" (an error to
their clients), new requests get 503 while a new engine starts (this relay's, or the supervisor's),
and `restarts` counts it.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from twin.engine.commands import Command
from twin.live.realtime import Dispatch
from twin.serve import engine_proc, messages, wire
from twin.serve.engine_proc import LEAD_S, STEP_S

log = logging.getLogger("twin.serve")

START_TIMEOUT_S = 180.0   # a new engine process must say hello within this (it builds a topology)
ASK_TIMEOUT_S = 10.0      # the engine process answers a fault or a metrics scrape within this, or it is refused
CONNECT_S = 0.05          # wall seconds between attempts to connect to the engine's socket
PROBE_S = 0.005           # the loop's delay is sampled this often (GET /twin/status: loop_lag_ms)
HTTP_SHIP_S = 1.0         # assumption: served HTTP requests go to the engine's metrics this often (and at a scrape)
HTTP_ROWS_MAX = 100_000   # assumption: at most this many wait (an engine away for long: the rest go uncounted)


@dataclass(eq=False)
class Stream:
    """One served request: what the twin was asked, and its events as they are handed over. Only
    the chunks not yet handed to the reader are held (`due`: a slow reader's are bounded by the
    connection guard's write deadline, twin.serve.guard); every chunk's time is kept only when
    the client asked for `twin_timing` (`keep`)."""
    input_tokens: int
    output_tokens: int | None            # None: the engine draws it (then set at admission)
    blocks: object
    keep: bool = False                   # keep every chunk's time and count (twin_timing)
    cap: int | None = None               # a drawn output ends here at most (a stop the filler meets)
    key: int = -1
    arrival: float = 0.0                 # sim time of the HTTP arrival
    admitted: float | None = None
    made: int = 0                        # tokens made so far
    first: float | None = None           # sim time of the first chunk
    times: list = field(default_factory=list)    # sim time of each chunk (with `keep`)
    counts: list = field(default_factory=list)   # tokens made by then, cumulative (with `keep`)
    due: list = field(default_factory=list)      # tokens made by each chunk not yet taken
    end: str = ""                        # "stop", a rejection reason, or "engine_lost", once over
    prefill: tuple = ()                  # (prefill start, prefill end, cached prompt tokens) once done
    finish_reason: str = "length"        # "length" when max_tokens set the output, else "stop"
    sink: object = None                  # called instead of waking a reader, if set (api._Writer)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _taken: int = 0                      # tokens handed to the reader

    def push(self, t: float, made: int, end: str, extra=None) -> int:
        """An event of the twin's; returns the tokens it adds."""
        delta = 0
        if end == "times":
            self.prefill = extra
            return 0
        if end == "admitted":
            self.admitted = t
            if extra is not None:
                self.output_tokens = extra
        else:
            delta = made - self.made
            if delta > 0:
                self.made = made
                self.due.append(made)
                if self.first is None:
                    self.first = t
                if self.keep:
                    self.times.append(t)
                    self.counts.append(made)
            if end:
                self.end = end
        if self.sink is not None:
            self.sink()
        else:
            self._ready.set()
        return max(delta, 0)

    async def decision(self) -> str:
        """"admitted", or the rejection reason."""
        while self.admitted is None and not self.end:
            self._ready.clear()
            await self._ready.wait()
        return "admitted" if self.admitted is not None else self.end

    async def chunks(self):
        """The chunks made since the last call, [(tokens in the chunk, first token index), ...] (one,
        unless the reader woke late), until done: a reader writes them with one send."""
        while True:
            out = self.take()
            if out:
                yield out
                continue
            if self.end:
                return
            self._ready.clear()
            await self._ready.wait()

    def take(self) -> list:
        """The chunks made since the last take, [(tokens in the chunk, first token index), ...]."""
        out, prev = [], self._taken
        for made in self.due:
            out.append((made - prev, prev))
            prev = made
        self._taken = prev
        self.due.clear()
        return out

    @property
    def ttft(self) -> float | None:
        return self.first - self.arrival if self.first is not None else None


class LiveTwin:
    """The relay of one HTTP process: its streams, and its connection to the engine process. Without
    `engine_path` it starts the engine of `scenario` itself (outside requests only, unless
    `background`) and starts a new one if it dies; with it, it connects to an engine a supervisor
    runs (`workers.py`) and reconnects when that engine is restarted."""

    def __init__(self, scenario: str = "default", seed: int | None = None, background: bool = False,
                 lead_s: float = LEAD_S, step_s: float = STEP_S, engine_path: str | None = None, **overrides):
        self.args = (scenario, seed, background, lead_s, step_s, overrides)
        self.own = engine_path is None
        self.path = engine_path or os.path.join(tempfile.mkdtemp(prefix="twin-serve-"), "engine.sock")
        self.lead_s, self.step_s = lead_s, step_s
        self.model: str | None = None
        self.block_size: int | None = None
        self.engine_id: str | None = None     # the engine process's opaque id (a new one after a restart)
        self.max_model_len: int | None = None
        self.created = 0                  # the engine's start (Unix seconds): /v1/models' `created`
        self.gauges: dict = {}            # the engine's latest {sim_time, behind_ms}
        self.pace = 1.0                   # sim seconds per wall second, as the engine measured it
        self.late = 0                     # events shipped after their time (the engine fell behind)
        self.restarts = 0
        self.lateness = deque(maxlen=20_000)   # wall seconds each emit ran after its time (engine and loop)
        self.loop_lag = deque(maxlen=2_000)    # wall seconds each probe ran after its time (the loop alone)
        self.pipe_lag = deque(maxlen=5_000)    # wall seconds from the engine's sending to the loop's reading
        self.streams: dict[int, Stream] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wall0 = 0.0
        self.proc = None                  # the engine process, when this relay started it
        self.peer: wire.Peer | None = None     # the connection to the engine
        self._writing = False             # a writer callback is waiting for room in the socket
        self._keys = 0
        self._asks: dict[int, asyncio.Future] = {}
        self._ready: asyncio.Event | None = None
        self._stopping = False
        self._http: list = []             # HTTP requests served, not yet shipped to the engine (http_metrics)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> "LiveTwin":
        self.loop = loop
        self._ready = asyncio.Event()
        if self.own:
            self._spawn()
        self._connect()
        self._probe(time.monotonic())
        return self

    def _probe(self, due: float) -> None:
        """Every PROBE_S: how late the loop ran this callback (the loop's own delay, engine aside)."""
        now = time.monotonic()
        self.loop_lag.append(now - due)
        if not self._stopping:
            self.loop.call_later(PROBE_S, self._probe, now + PROBE_S)

    async def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        await asyncio.wait_for(self._ready.wait(), timeout)

    @property
    def ready(self) -> bool:
        return self._ready is not None and self._ready.is_set()

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")
        self.proc = ctx.Process(target=engine_proc.main, args=(self.path, *self.args), name="twin-engine", daemon=True)
        self.proc.start()

    def _connect(self) -> None:
        """Connect to the engine's socket, again every CONNECT_S until it listens (it starts, or a
        supervisor restarts it); the engine says hello once it is built."""
        if self._stopping or self.peer is not None:
            return
        self.peer = wire.connect(self.path)
        if self.peer is None:
            self.loop.call_later(CONNECT_S, self._connect)
            return
        self.loop.add_reader(self.peer.fileno(), self._readable)

    def stop(self) -> None:
        self._stopping = True
        if self.peer is not None:
            if self.own:
                self.peer.send(messages.Stop())
                self.peer.flush()
            self._close()
        if self.proc is not None:
            self.proc.join(5.0)
            if self.proc.is_alive():
                self.proc.kill()
            self.proc = None

    def _close(self) -> None:
        self.loop.remove_reader(self.peer.fileno())
        if self._writing:
            self.loop.remove_writer(self.peer.fileno())
        self._writing = False
        self.peer.close()
        self.peer = None

    def abandon(self, end: str) -> None:
        """End every stream this relay holds with `end` (an error to its client): the engine is gone,
        or this worker is stopping."""
        held, self.streams = self.streams, {}
        for s in held.values():
            s.push(self.now(), s.made, end)

    def _lost(self) -> None:
        """The engine process died: end what it held, refuse until a new one says hello."""
        was_ready = self.ready            # (a connection the dying engine's listener took, never greeted, is no restart)
        self._close()
        self._ready.clear()
        held = len(self.streams)
        self.abandon("engine_lost")
        for fut in self._asks.values():
            if not fut.done():
                fut.set_result({"error": "the twin's engine stopped; retry when it is back"})
        self._asks.clear()
        if self._stopping:
            return
        self.restarts += was_ready
        if self.own and (was_ready or not self.proc.is_alive()):
            self.proc.join(1.0)
            log.error("twin serve: the engine process ended (exit code %s); %d streams lost; starting a new one",
                      self.proc.exitcode, held)
            if self.proc.is_alive():
                self.proc.kill()
            self._spawn()
        elif was_ready:
            log.error("twin serve: the engine went away; %d streams lost; reconnecting", held)
        self._connect()

    # ---- from the loop -----------------------------------------------------------------------
    def now(self) -> float:
        """The wall clock in sim time."""
        return time.monotonic() - self.wall0

    def submit(self, stream: Stream, arrival: float | None = None) -> None:
        """The request arrived at `arrival` (sim time; default now); the engine takes it at its own
        present, up to LEAD_S later. Needs `ready`."""
        stream.arrival = self.now() if arrival is None else arrival
        stream.key = self._keys = self._keys + 1
        self.streams[stream.key] = stream
        self._send(messages.Request(stream.key, stream.arrival, stream.input_tokens, stream.output_tokens,
                                    stream.blocks, stream.cap))

    def abort(self, stream: Stream) -> None:
        """The stream's client went away: the engine drops its request now (KV and batch slot
        freed) and nothing more is kept for it here."""
        if self.streams.pop(stream.key, None) is not None:
            self._send(messages.Abort(stream.key))
        stream.sink = None
        stream.due.clear()

    def command(self, cmd: Command) -> None:
        """A typed engine command (a policy, ...) for the engine's next advance."""
        self._send(messages.Cmd(cmd))

    def _send(self, msg: tuple) -> None:
        """To the engine process, never blocking the loop (a blocking write here while the engine
        blocks writing its events would deadlock both): buffered, flushed now and whenever the
        socket has room. If the engine has just died, what it held ends now (the stream just
        registered included: refused with "engine_lost")."""
        if self.peer is None:
            return
        self.peer.send(msg)
        self._flush()

    def _flush(self) -> None:
        if self.peer is None:
            return
        if not self.peer.flush():                # a broken socket: the engine process is gone
            self._lost()
            return
        fd, waiting = self.peer.fileno(), bool(self.peer.out)
        if waiting and not self._writing:
            self.loop.add_writer(fd, self._flush)
        elif not waiting and self._writing:
            self.loop.remove_writer(fd)
        self._writing = waiting

    async def _ask(self, kind: type, *args):
        """A question (a message type of twin.serve.messages whose first field is the question's id) for
        the engine process and its answer, or {"error": why} if the engine is not there to answer in time."""
        if not self.ready:
            return {"error": "the twin's engine is starting; retry in a moment"}
        qid = self._keys = self._keys + 1
        fut = self._asks[qid] = self.loop.create_future()
        self._send(kind(qid, *args))
        try:
            return await asyncio.wait_for(fut, ASK_TIMEOUT_S)
        except asyncio.TimeoutError:
            return {"error": "the twin's engine did not answer in time"}
        finally:
            self._asks.pop(qid, None)

    async def fault(self, cmd: Command) -> dict:
        """A checked fault command for the engine process: its ticket there, as a dict (state accepted
        or refused, with the reason), or {"error": why}."""
        return await self._ask(messages.Fault, cmd)

    async def metrics(self) -> bytes | dict:
        """The Prometheus text of the whole twin, from the engine process (the one source of truth for
        all workers), or {"error": why}; this worker's HTTP requests so far included."""
        self._ship_http()
        return await self._ask(messages.MetricsAsk)

    def http_done(self, handler: str, method: str, status: str, seconds: float) -> None:
        """An HTTP request served (twin.serve.http_metrics): shipped to the engine within HTTP_SHIP_S."""
        if not self._http and self.loop is not None:
            self.loop.call_later(HTTP_SHIP_S, self._ship_http)
        if len(self._http) < HTTP_ROWS_MAX:
            self._http.append((handler, method, status, seconds))

    def _ship_http(self) -> None:
        if not self._http:
            return
        if not self.ready:                     # (the engine is starting: again later)
            self.loop.call_later(HTTP_SHIP_S, self._ship_http)
            return
        rows, self._http = self._http, []
        self._send(messages.Http(rows))

    def achieved(self) -> float:
        return self.pace

    # ---- the socket --------------------------------------------------------------------------
    def _readable(self) -> None:
        """Read what the engine sent, without blocking (a message half-written waits for its rest)."""
        msgs = self.peer.read()
        if msgs is None:                       # end of file: the engine process is gone
            self._lost()
            return
        for msg in msgs:
            HANDLERS(self, msg)

    # ---- the engine's messages' handlers (HANDLERS) -------------------------------------------
    def _on_events(self, m: messages.Events) -> None:
        self.pipe_lag.append(time.monotonic() - m.sent)
        self._schedule(m.events)

    def _on_gauges(self, m: messages.Gauges) -> None:
        self.gauges, self.pace, self.late = m.gauges, m.pace, m.late

    def _on_answer(self, m: messages.FaultAnswer | messages.MetricsText) -> None:
        fut = self._asks.get(m.qid)
        if fut is not None and not fut.done():
            fut.set_result(m[1])

    def _on_hello(self, m: messages.Hello) -> None:
        self.model, self.block_size, self.wall0 = m.model, m.block_size, m.wall0
        self.engine_id, self.max_model_len, self.created = m.engine, m.max_model_len, m.created
        self._ready.set()

    def _schedule(self, events: list) -> None:
        """One loop callback per distinct sim time, at its wall time (events come in time order)."""
        later, now = self.loop.call_later, time.monotonic()
        group, t = [], None
        for e in events:
            if e[1] != t and group:
                later(self.wall0 + t - now, self._emit, group)
                group = []
            t = e[1]
            group.append(e)
        if group:
            later(self.wall0 + t - now, self._emit, group)

    def delays_ms(self) -> dict:
        """p50, p99 and max (ms) of how late events were handed over (the last 20,000 sim times) and of
        the loop's own delay (the last 10 s)."""
        out = {}
        for name, d in (("relay_late_ms", self.lateness), ("loop_lag_ms", self.loop_lag), ("pipe_ms", self.pipe_lag)):
            if d:
                p50, p99, top = np.percentile(d, [50, 99, 100]) * 1e3
                out[name] = {"p50": round(p50, 3), "p99": round(p99, 3), "max": round(top, 3)}
        return out

    def _emit(self, group: list) -> None:
        self.lateness.append(time.monotonic() - self.wall0 - group[0][1])
        streams = self.streams
        for key, t, made, end, *extra in group:
            s = streams.get(key)
            if s is None:
                continue
            s.push(t, made, end, extra[0] if extra else None)
            if end == "times" or (end and end not in ("stop", "admitted")):
                del streams[key]       # its last event ("times" follows "stop"), or refused


HANDLERS = Dispatch({messages.Events: LiveTwin._on_events, messages.Gauges: LiveTwin._on_gauges,
                     messages.FaultAnswer: LiveTwin._on_answer, messages.MetricsText: LiveTwin._on_answer,
                     messages.Hello: LiveTwin._on_hello})
