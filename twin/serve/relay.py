"""The HTTP side of the served twin: a relay between the event loop's streams and the engine
process (`engine_proc`), which it starts, watches and restarts.

The engine ships each token event before its time (it runs LEAD_S ahead of the wall clock); the
relay schedules one loop callback per distinct sim time t at wall `wall0 + t` that hands the
events to their streams, so every chunk leaves at the twin's time and the loop never waits for
the engine. If the engine process dies, the streams it held end with "engine_lost" (an error to
their clients), new requests get 503 while a new engine starts, and `restarts` counts it.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import pickle
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from twin.engine.commands import Command
from twin.serve import engine_proc
from twin.serve.engine_proc import LEAD_S, STEP_S

log = logging.getLogger("twin.serve")

START_TIMEOUT_S = 180.0   # a new engine process must say hello within this (it builds a topology)
FAULT_TIMEOUT_S = 10.0    # the engine process answers a fault within this, or it is refused
PROBE_S = 0.005           # the loop's delay is sampled this often (GET /twin/status: loop_lag_ms)


@dataclass(eq=False)
class Stream:
    """One served request: what the twin was asked, and its events as they are handed over."""
    input_tokens: int
    output_tokens: int | None            # None: the engine draws it (then set at admission)
    blocks: object
    key: int = -1
    arrival: float = 0.0                 # sim time of the HTTP arrival
    admitted: float | None = None
    times: list = field(default_factory=list)    # sim time of each chunk
    counts: list = field(default_factory=list)   # tokens made by then (cumulative)
    end: str = ""                        # "stop", a rejection reason, or "engine_lost", once over
    prefill: tuple = ()                  # (prefill start, prefill end, cached prompt tokens) once done
    finish_reason: str = "length"        # "length" when max_tokens set the output, else "stop"
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _sent: int = 0                       # chunks handed to the reader

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
            delta = made - (self.counts[-1] if self.counts else 0)
            if delta > 0:
                self.times.append(t)
                self.counts.append(made)
            if end:
                self.end = end
        self._ready.set()
        return max(delta, 0)

    async def decision(self) -> str:
        """"admitted", or the rejection reason."""
        while self.admitted is None and not self.end:
            self._ready.clear()
            await self._ready.wait()
        return "admitted" if self.admitted is not None else self.end

    async def chunks(self):
        """(tokens in this chunk, first token index) per chunk as the twin makes them, until done."""
        while True:
            while self._sent < len(self.counts):
                i = self._sent
                self._sent += 1
                prev = self.counts[i - 1] if i else 0
                yield self.counts[i] - prev, prev
            if self.end:
                return
            self._ready.clear()
            await self._ready.wait()

    @property
    def ttft(self) -> float | None:
        return self.times[0] - self.arrival if self.times else None

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:])]


class LiveTwin:
    """The engine process of `scenario` (outside requests only, unless `background`) and its relay."""

    def __init__(self, scenario: str = "default", seed: int | None = None, background: bool = False,
                 lead_s: float = LEAD_S, step_s: float = STEP_S, **overrides):
        self.args = (scenario, seed, background, lead_s, step_s, overrides)
        self.lead_s, self.step_s = lead_s, step_s
        self.model: str | None = None
        self.block_size: int | None = None
        self.gauges: dict = {}            # the engine's latest (twin.serve.metrics.engine_gauges)
        self.pace = 1.0                   # sim seconds per wall second, as the engine measured it
        self.late = 0                     # events shipped after their time (the engine fell behind)
        self.restarts = 0
        self.lateness = deque(maxlen=20_000)   # wall seconds each emit ran after its time (engine and loop)
        self.loop_lag = deque(maxlen=2_000)    # wall seconds each probe ran after its time (the loop alone)
        self.pipe_lag = deque(maxlen=5_000)    # wall seconds from the engine's sending to the loop's reading
        self.on_event = None              # callable(stream, t, tokens added, end) on the loop (metrics)
        self.streams: dict[int, Stream] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wall0 = 0.0
        self.proc = None
        self.conn = None                  # to the engine process
        self.reader = None                # from it
        self._buf = bytearray()
        self._out = bytearray()           # framed messages to the engine not yet written
        self._writing = False             # a writer callback is waiting for room in the pipe
        self._keys = 0
        self._faults: dict[int, asyncio.Future] = {}
        self._ready: asyncio.Event | None = None
        self._stopping = False

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> "LiveTwin":
        self.loop = loop
        self._spawn()
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
        out_r, out_w = ctx.Pipe(duplex=False)      # engine -> here: read without blocking, framed below
        in_r, in_w = ctx.Pipe(duplex=False)        # here -> engine: small messages, plain blocking sends
        self.proc = ctx.Process(target=engine_proc.main, args=(in_r, out_w, *self.args), name="twin-engine",
                                daemon=True)
        self.proc.start()
        out_w.close()
        in_r.close()
        self.reader, self.conn, self._buf = out_r, in_w, bytearray()
        os.set_blocking(out_r.fileno(), False)     # (an event loop may make it so anyway: uvloop does)
        os.set_blocking(in_w.fileno(), False)
        self._ready = asyncio.Event()
        self.loop.add_reader(out_r.fileno(), self._readable)

    def stop(self) -> None:
        self._stopping = True
        if self.conn is not None:
            self.loop.remove_reader(self.reader.fileno())
            self._send(("stop",))
            if self.conn is not None:
                self._close()
        if self.proc is not None:
            self.proc.join(5.0)
            if self.proc.is_alive():
                self.proc.kill()
            self.proc = None

    def _close(self) -> None:
        if self._writing:
            self.loop.remove_writer(self.conn.fileno())
        self._out, self._writing = bytearray(), False
        self.conn.close()
        self.reader.close()
        self.conn = self.reader = None

    def _lost(self) -> None:
        """The engine process died: end what it held, refuse until a new one says hello."""
        self.loop.remove_reader(self.reader.fileno())
        self._close()
        if self.proc is not None:
            self.proc.join(1.0)
        code = self.proc.exitcode if self.proc is not None else None
        held, self.streams = self.streams, {}
        for s in held.values():
            s.push(self.now(), s.counts[-1] if s.counts else 0, "engine_lost")
        for fut in self._faults.values():
            if not fut.done():
                fut.set_result({"error": "fault: the twin's engine stopped; retry when it is back"})
        self._faults.clear()
        if self._stopping:
            return
        self.restarts += 1
        log.error("twin serve: the engine process ended (exit code %s); %d streams lost; starting a new one",
                  code, len(held))
        self._spawn()

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
        self._send(("req", stream.key, stream.arrival, stream.input_tokens, stream.output_tokens, stream.blocks))

    def command(self, cmd: Command) -> None:
        """A typed engine command (a policy, ...) for the engine's next advance."""
        self._send(("cmd", cmd))

    def _send(self, msg: tuple) -> None:
        """To the engine process, never blocking the loop (a blocking write here while the engine
        blocks writing its events would deadlock both): framed as multiprocessing frames them,
        buffered, flushed now and whenever the pipe has room. If the engine has just died, what it
        held ends now (the stream just registered included: refused with "engine_lost")."""
        if self.conn is None:
            return
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self._out += len(data).to_bytes(4, "big", signed=True) + data
        self._flush()

    def _flush(self) -> None:
        if self.conn is None:
            return
        fd = self.conn.fileno()
        try:
            del self._out[:os.write(fd, self._out)]
        except BlockingIOError:
            pass
        except OSError:                          # a broken pipe: the engine process is gone
            self._lost()
            return
        if self._out and not self._writing:
            self.loop.add_writer(fd, self._flush)
        elif not self._out and self._writing:
            self.loop.remove_writer(fd)
        self._writing = bool(self._out)

    async def fault(self, cmd: Command) -> dict:
        """A checked fault command for the engine process: its ticket there, as a dict (state accepted
        or refused, with the reason), or {"error": why} if the engine is not there to answer."""
        if not self.ready:
            return {"error": "fault: the twin's engine is starting; retry in a moment"}
        fid = self._keys = self._keys + 1
        fut = self._faults[fid] = self.loop.create_future()
        self._send(("fault", fid, cmd))
        try:
            return await asyncio.wait_for(fut, FAULT_TIMEOUT_S)
        except asyncio.TimeoutError:
            return {"error": "fault: the twin's engine did not answer in time"}
        finally:
            self._faults.pop(fid, None)

    def achieved(self) -> float:
        return self.pace

    # ---- the pipe ----------------------------------------------------------------------------
    def _readable(self) -> None:
        """Read what the engine sent, without blocking: multiprocessing's frames (a 4-byte big-endian
        length, then a pickle) are cut here, so a message half-written never stalls the loop."""
        try:
            data = os.read(self.reader.fileno(), 1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            data = b""
            log.error("twin serve: the pipe from the engine process failed: %r", exc)
        if not data:                           # end of file: the engine process is gone
            self._lost()
            return
        buf = self._buf
        buf += data
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big", signed=True)
            if len(buf) < 4 + n:
                break
            msg = pickle.loads(buf[4:4 + n])
            del buf[:4 + n]
            self._dispatch(msg)

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "ev":
            self.pipe_lag.append(time.monotonic() - msg[2])
            self._schedule(msg[1])
        elif kind == "gauges":
            self.gauges, self.pace, self.late = msg[1], msg[2], msg[3]
        elif kind == "fault":
            fut = self._faults.get(msg[1])
            if fut is not None and not fut.done():
                fut.set_result(msg[2])
        elif kind == "hello":
            info = msg[1]
            self.model, self.block_size, self.wall0 = info["model"], info["block_size"], info["wall0"]
            self.gauges = info["gauges"]
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
        streams, observe = self.streams, self.on_event
        for key, t, made, end, *extra in group:
            s = streams.get(key)
            if s is None:
                continue
            delta = s.push(t, made, end, extra[0] if extra else None)
            if end == "times" or (end and end not in ("stop", "admitted")):
                del streams[key]       # its last event ("times" follows "stop"), or refused
            if observe is not None and end != "times":
                observe(s, t, delta, end)
