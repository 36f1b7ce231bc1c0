"""The messages between the served twin's engine process (engine_proc.py) and its relays (relay.py),
all of them, typed: each side dispatches on the type (twin.live.realtime.Dispatch). They travel
pickled over the engine's Unix socket (wire.py); named tuples pickle as small as plain tuples.

An event, inside `Events`: (key, sim time, tokens made so far, end[, drawn output tokens]), as
twin.engine.external.External makes them; `end` is "" while streaming, then "admitted", "stop",
"times", or a refusal's reason.
"""
from __future__ import annotations

from typing import Any, NamedTuple

# ---- relay -> engine -------------------------------------------------------------------------


class Request(NamedTuple):
    """A request the relay received at `arrival` (sim time)."""
    key: int                    # the relay's own key (the engine's is relay number << KEY_BITS | key)
    arrival: float
    input_tokens: int
    output_tokens: int | None   # None: drawn from the scenario's output distribution
    blocks: Any                 # prefix block ids (the prefix cache's hashes)
    cap: int | None             # the most a drawn output may be (max_tokens not given: the context left)


class Abort(NamedTuple):
    """The request's client went away: it leaves the engine now, counted as finished_reason "abort"."""
    key: int


class Fault(NamedTuple):
    """A fault command checked at the edge; answered by `FaultAnswer` with the same `qid`."""
    qid: int
    cmd: Any                    # twin.engine.commands.Command


class MetricsAsk(NamedTuple):
    """Asks for the Prometheus text of the whole twin; answered by `MetricsText` with the same `qid`."""
    qid: int


class Http(NamedTuple):
    """The HTTP requests a relay served since its last, for the HTTP series (twin.serve.http_metrics)."""
    rows: list                  # (handler, method, status class, seconds)


class Cmd(NamedTuple):
    """A typed engine command (a policy, ...) for the engine's next advance; not answered."""
    cmd: Any


class Stop(NamedTuple):
    """The engine process ends (sent by the relay that started it)."""


# ---- engine -> relay -------------------------------------------------------------------------


class Hello(NamedTuple):
    """Sent to each relay that connects, once the engine is built."""
    model: str
    block_size: int
    wall0: float                # the wall time (time.monotonic) of sim time 0: sim time s leaves at wall0 + s
    lead_s: float
    step_s: float
    engine: str                 # a random id of this engine process
    max_model_len: int
    created: int                # unix time the engine was built


class Events(NamedTuple):
    """The relay's requests' events of one advance, in time order."""
    events: list
    sent: float                 # wall time they were sent (the relay measures the pipe's delay)


class FaultAnswer(NamedTuple):
    qid: int
    ticket: dict                # the fault's ticket (accepted at t, or refused with the reason)


class MetricsText(NamedTuple):
    qid: int
    text: Any                   # bytes


class Gauges(NamedTuple):
    """Published every SNAPSHOT_S to every relay (for /metrics and /status)."""
    gauges: dict                # sim_time, open (served requests not finished, all relays), behind_ms
    pace: float                 # sim s per wall s over the last advances
    late: int                   # events shipped after their wall time so far
