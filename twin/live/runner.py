"""Live runner: one daemon thread per twin advances an Engine in chunks and publishes snapshots.

A `Twin` owns one `twin.engine.Engine`. Its thread runs twin.live.realtime's loop (as `twin serve`'s
engine process does), waking every ``wall_dt`` (0.2 s): take a reset's new engine if one waits,
advance what its clock says is due (``speed`` x the wall time that passed, at most two steps' worth
after a stall; ``eng.advance`` applies the commands on the engine's one queue first and answers
their tickets; a paused twin applies them without advancing), publish the engine's snapshot by
rebinding one reference (atomic in CPython), rest the remainder.
The thread never dies from a bad command or a failing step: it logs an event and carries on, and
after repeated failures it pauses itself with a message. User actions: twin.live.actions.TwinActions.
Callers (Dash callbacks) only read `Twin.snapshot` / `Twin.status()` / `Twin.ticket()` and call
`Twin.send()`; they never touch SimPy objects. The module never imports dash.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable

from twin.live import pace, realtime, tracestore
from twin.live.actions import FAULTS_PER_MIN, RESET_LATE, RESETS_PER_MIN, TwinActions, _Params, _Swap, apply_load, policy_of
from twin.live.budget import REQUESTS, CpuShare, RateLimit, give_back_memory, trim_heap
from twin.live.controls import parse_speed
from twin.cloud import live as live_cloud
from twin.engine import Engine

log = logging.getLogger("twin.live.session")

WALL_DT = 0.2                 # s of wall time per loop iteration
MIN_SLEEP = 0.03              # s the thread always yields per iteration (keeps callbacks responsive)
MAX_DUTY = 0.8                # at most this share of wall time in advance(): viewers share the GIL
MAX_CONSECUTIVE_ERRORS = 5    # then the twin pauses itself and says why
SANDBOX_CPU_SHARE = 0.25      # all sandboxes' engines together: at most 25% of one core (assumption: the
                              # rest keeps the shared twin at pace and polls fast, whatever sandboxes run)
SANDBOXES = CpuShare(SANDBOX_CPU_SHARE)
SANDBOX_SLICE_S = 0.005       # a sandbox works in slices of about this much compute, and before each
SANDBOX_YIELD_S = 0.25        # waits up to this long for the viewers' requests in flight (viewers first)
LOG_LEN = 200
HEAP_TRIM_S = 60.0            # the shared twin's thread returns the process's free heap pages to the OS this
                              # often (assumption: a trim costs milliseconds; live tables grow over minutes)


def default_factory(**params):
    """An Engine; a co-pool day runs its scheduler inside it (twin.cloud.live)."""
    return live_cloud.attach(Engine(**params))


@dataclass
class Action:
    """One logged action on a twin."""
    wall: float
    who: str
    what: str
    ok: bool = True
    sim_time: float = 0.0

    def as_dict(self) -> dict:
        return {"wall": self.wall, "when": time.strftime("%H:%M:%S", time.localtime(self.wall)),
                "who": self.who, "what": self.what, "ok": self.ok,
                "sim_time": round(self.sim_time, 1),
                **({"template": self.what.template, "args": self.what.args} if getattr(self.what, "template", "") else {})}


@dataclass
class _Stats:
    step_ms: float = 0.0             # EWMA of wall ms per advance()
    errors: int = 0
    consecutive_errors: int = 0
    last_error: str = ""


class Twin(TwinActions):
    """One live engine and the thread that drives it.

    Attributes read by the UI: `key`, `shared`, `snapshot` (latest published Snapshot or None),
    `run` (increments when the engine is replaced by a reset), `status()`, `actions()`.
    """

    def __init__(self, key: str, *, shared: bool = False, params: dict | None = None,
                 factory: Callable[..., Any] = default_factory, wall_dt: float = WALL_DT,
                 speed: float | str = 1.0, gate=None, ttl_s: float | None = None,
                 owner: str | None = None, addr: str | None = None):
        self.key = key
        self.shared = shared
        self.owner, self.addr = owner, addr       # the client that opened a sandbox (None: anyone)
        self.created = time.time()
        self.last_seen = self.last_viewed = time.monotonic()
        self._factory = factory
        self._gate = gate                         # twin.live.gate.Gate of a lockable (shared) twin
        self._ttl = ttl_s
        self.wall_dt = float(wall_dt)
        # the pace (twin.live.realtime): sim time follows the wall time that really passed (rests
        # overshoot a little), capped so a slow step is not followed by a catch-up burst
        self._clock = realtime.Clock(self.wall_dt, parse_speed(speed), catch_up_s=2 * self.wall_dt,
                                     min_rest_s=MIN_SLEEP, max_duty=MAX_DUTY)
        self._wait = 0.0                          # s a sandbox waits for its CPU share at this wake
        self._trimmed = 0.0                       # when the heap was last trimmed
        self.params = _Params(**(params or {}))
        self.paused = False
        self.run = 0
        self.rev = 0                              # bumps on any status change viewers should see
        self.message = ""
        self._swap: _Swap | None = None           # a reset's engine, waiting for the thread to take it
        self._tickets: OrderedDict = OrderedDict()   # recent tickets by id (read by the pages' polls)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()             # guards _actions, _memo, params, rev, _swap, _tickets
        self._actions: deque[Action] = deque(maxlen=LOG_LEN)
        self._memo: dict = {}
        self._memo_version: tuple = ()
        self._stats = _Stats()
        self._slice = 0.1                         # sim s per slice of a sandbox's advance (adapted)
        self._window_reset = False                # set by control(); the thread resets its clock
        self._pending: list[float] = []           # at_s of scheduled faults not yet struck
        self._pause_at: tuple | None = None       # (engine, sim time, wall start, sim s) of a hold (actions.hold)
        self._fault_rate = RateLimit(FAULTS_PER_MIN)
        self._reset_rate = RateLimit(RESETS_PER_MIN)
        self._copool_rate = RateLimit(live_cloud.CHANGES_PER_MIN)
        tracestore.pin(self.params.trace, self)    # an upload is kept while this twin may re-open it
        try:
            self._engine = self._factory(**self.params.engine_kwargs())   # raises ValueError on bad input
        except BaseException:
            tracestore.release(self)
            raise
        apply_load(self._engine, self.params, key)
        self.snapshot = self._engine.snapshot()
        self.policy: dict = policy_of(self._engine)   # fault policy as last set (read by the UI)
        self.random: float | None = None               # random failures: failure-clock h per sim s
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> "Twin":
        self.touch()                       # idle time counts from when the twin runs
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name=f"twin-{self.key}", daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and drop this twin's pins on uploads (a reset's too, if still queued)."""
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        with self._lock:
            sw, self._swap = self._swap, None
        if sw is not None:
            sw.ticket.refuse("the twin was stopped before this reset took effect")
        tracestore.release(self)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def ended(self) -> bool:
        """Its thread ran and has stopped; a thread made but not yet started has not ended."""
        t = self._thread
        return t is not None and t.ident is not None and not t.is_alive()

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def idle_s(self) -> float:
        return time.monotonic() - self.last_seen

    def viewed(self) -> None:
        """A tab's poll read this twin (polls are not actions: they do not touch)."""
        self.last_viewed = time.monotonic()

    def unviewed_s(self) -> float:
        return time.monotonic() - self.last_viewed

    # ---- the engine thread ------------------------------------------------------------------

    @property
    def speed(self) -> float | str:
        """Times real time, or "max" (a plain attribute write of the clock's: atomic)."""
        return self._clock.speed

    @speed.setter
    def speed(self, value: float | str) -> None:
        self._clock.speed = value

    def _loop(self) -> None:
        self._trimmed = time.monotonic()
        realtime.run(self._wake_once, self._rest, self._fail_wake)
        if not self.shared:          # a sandbox's engine goes with its thread: its memory back to the OS
            self._engine = None
            give_back_memory()

    def _wake_once(self, t0: float) -> bool:
        if self._stop.is_set():
            return False
        self._take_swap()
        if self._ttl is not None and self.idle_s() > self._ttl:
            self._note("system", f"stopped after {self._ttl:.0f} s idle")
            return False
        clock = self._clock
        if self._window_reset:
            self._window_reset = False
            clock.reset()
        self._wait = 0.0 if self.shared else SANDBOXES.wait_s()
        if self.paused or self._wait:   # wait: the sandboxes' share is spent, this one falls behind
            clock.hold()
            self._answer_now()
        else:
            self._advance_once(clock.due(t0, self._engine.sim_time))
        clock.note(time.monotonic(), self._engine.sim_time)
        return True

    def _rest(self, t0: float) -> bool:
        now = time.monotonic()
        if self.shared and now - self._trimmed >= HEAP_TRIM_S:   # sandboxes' grown tables too
            trim_heap()
            self._trimmed = now
        self._wake.wait(max(self._clock.rest(now - t0), min(self._wait, self.wall_dt)))
        self._wake.clear()
        return not self._stop.is_set()

    def _fail_wake(self, exc: Exception) -> None:
        """Belt and braces: the loop itself must never die."""
        log.error("twin %s: runner iteration failed", self.key, exc_info=exc)
        self._fail_step(exc)

    def _advance_once(self, sim: float) -> float:
        eng = self._engine
        hold = self._pause_at
        if hold is not None and hold[0] is eng:     # a hold (of this run): stop exactly at the moment to look
            sim = max(min(sim, hold[1] - eng.sim_time), 0.0)
        t0, cpu0 = time.monotonic(), time.thread_time()
        try:
            if self.shared:
                eng.advance(sim)
            else:
                self._advance_politely(eng, sim)
        except Exception as exc:   # never let the thread die; say what happened
            self._fail_step(exc)
            return 0.0
        finally:
            if not self.shared:    # a sandbox's CPU, counted against the sandboxes' share
                SANDBOXES.spend(time.thread_time() - cpu0)
        dt = time.monotonic() - t0
        st = self._stats
        st.step_ms = 0.8 * st.step_ms + 0.2 * dt * 1e3 if st.step_ms else dt * 1e3
        st.consecutive_errors = 0
        self._clock.ran(sim, dt if self.shared else time.thread_time() - cpu0)
        self.snapshot = eng.snapshot()
        if hold is not None and hold[0] is eng and eng.sim_time >= hold[1] - 1e-9:
            self._pause_at, self.paused, self._window_reset = None, True, True
            if self.shared:       # what a lecturer's Go really took here (the timeline shows it)
                pace.record(self.params.scenario, self.params.deployment,
                            pace.Pace(hold[3], time.monotonic() - hold[2], self.speed))
            self._bump()
        return sim

    def _advance_politely(self, eng, sim: float) -> None:
        """A sandbox advances in slices of about SANDBOX_SLICE_S of compute, each after the viewers'
        requests in flight (viewers first): a request never waits behind more than one slice."""
        end = eng.sim_time + sim
        while eng.sim_time < end - 1e-9:
            REQUESTS.wait_idle(SANDBOX_YIELD_S)
            piece = min(end - eng.sim_time, self._slice)
            cpu0 = time.thread_time()
            eng.advance(piece)
            used = time.thread_time() - cpu0
            self._slice = min(max(piece * SANDBOX_SLICE_S / max(used, 1e-5), 1e-3), 3600.0)

    def advance_to(self, sim_s: float, chunk_s: float = 10.0) -> None:
        """Drive a twin that is not started, in the caller's thread, to `sim_s` simulated seconds:
        the queued commands (a reset's engine swap) are applied and the engine advanced as the thread
        would, so `python -m twin.lessons check` reads the pages' numbers at a known time."""
        if self.alive:
            raise RuntimeError(f"twin {self.key} runs its own thread; advance_to is for a twin not started")
        self._take_swap()
        self._engine.run(sim_s, step=chunk_s)
        self.snapshot = self._engine.snapshot()

    def run_until_held(self) -> None:
        """Drive a twin that is not started, in the caller's thread, the way its thread would (the
        queued reset taken, the engine advanced at the twin's speed, "max" included) until the hold
        pauses it: `python -m twin.lessons plan-check` runs a lecture's timeline with it. RuntimeError
        if there is no hold to wait for or the engine keeps failing (the twin then pauses, saying why)."""
        if self.alive:
            raise RuntimeError(f"twin {self.key} runs its own thread; run_until_held is for a twin not started")
        self._take_swap()
        while not self.paused:
            if self._pause_at is None or self._pause_at[0] is not self._engine:
                raise RuntimeError(f"twin {self.key}: no hold of this run to wait for")
            self._advance_once(self._clock.per_step())
            self._take_swap()
        if self.message:
            raise RuntimeError(self.message)

    def _fail_step(self, exc: Exception) -> None:
        st = self._stats
        st.errors += 1
        st.consecutive_errors += 1
        st.last_error = f"{type(exc).__name__}: {exc}"
        log.exception("twin %s: engine step failed", self.key)
        if st.consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
            self.paused = True
            self.message = (f"paused after {st.consecutive_errors} failed steps; last error: "
                            f"{st.last_error}. Reset the twin to continue.")
            self._note("system", self.message, ok=False)
        else:
            self._note("system", f"engine step failed: {st.last_error}", ok=False)

    def _take_swap(self) -> None:
        """A reset: the new engine replaces the running one (commands still queued on the old one are
        refused, saying so) and the reset's ticket is accepted."""
        with self._lock:
            sw, self._swap = self._swap, None
            if sw is None:
                return
            old_engine, self._engine = self._engine, sw.engine
            old, self.params = self.params, sw.params
            if self._pause_at is not None and self._pause_at[0] is not sw.engine:
                self._pause_at = None           # a hold of the run that ends
        old_engine.refuse_queued(RESET_LATE)
        tracestore.unpin(old.trace, self)       # _reset pinned the new run's trace
        self.policy = sw.policy
        self.random = sw.random
        self.snapshot = sw.engine.snapshot()   # before run: a reader of the new run sees its snapshot
        self.run += 1
        self.paused = False
        self.message = ""
        self._stats = _Stats()
        self._clock.reset()
        sw.ticket.accept(sw.engine.sim_time)
        self._bump()

    def _answer_now(self) -> None:
        """Not advancing (paused, or a sandbox out of its share): apply the queued commands anyway,
        so their senders get an answer now, and publish what they changed."""
        try:
            if self._engine.apply_commands():
                self.snapshot = self._engine.snapshot()
        except Exception as exc:   # a command that breaks the engine: said, never fatal
            self._fail_step(exc)

    # ---- reading ----------------------------------------------------------------------------

    def status(self) -> dict:
        """Small JSON-friendly state for the run-control strip (sent to browsers each update)."""
        snap = self.snapshot
        st = self._stats
        p = self.params
        return {
            "key": self.key, "shared": self.shared, "run": self.run, "rev": self.rev,
            "version": getattr(snap, "version", 0), "sim_time": round(getattr(snap, "sim_time", 0.0), 2),
            "paused": self.paused, "alive": self.alive,
            "speed": self.speed, "achieved": round(self._clock.achieved(), 2), "step_ms": round(st.step_ms, 1),
            "scenario": p.scenario, "seed": p.seed, "deployment": getattr(snap, "deployment", p.deployment),
            "trace": tracestore.label(p.trace), "rate": p.rate, "load": p.load,   # never an upload's key
            "workload": self.workload,
            "locked": self.locked, "message": self.message or getattr(snap, "message", ""),
            "errors": st.errors,
        }

    @property
    def locked(self) -> bool:
        return self.shared and self._gate is not None and self._gate.locked

    @property
    def workload(self) -> str | None:
        """"trace" or "synthetic" (from the engine's scenario), None if unknown."""
        return getattr(getattr(self._engine, "scenario", None), "workload", None)

    def authorized(self, credential: str | None) -> bool:
        """Whether `credential` (from an instructor unlock, twin.live.gate) may use this twin's controls."""
        return not self.locked or self._gate.check(credential)

    def actions(self, n: int = 20) -> list[dict]:
        with self._lock:
            return [a.as_dict() for a in list(self._actions)[-n:]][::-1]

    def memo(self, name: str, fn: Callable[[Any], Any]):
        """fn(snapshot), computed once per (run, snapshot version) and shared by every viewer."""
        snap = self.snapshot
        key = (self.run, getattr(snap, "version", None))
        with self._lock:
            if key != self._memo_version:
                self._memo, self._memo_version = {}, key
            if name in self._memo:
                return self._memo[name]
        value = fn(snap)
        with self._lock:
            if key == self._memo_version:
                self._memo[name] = value
        return value

    def _bump(self) -> None:
        with self._lock:
            self.rev += 1

    def _note(self, who: str, what: str, ok: bool = True) -> None:
        with self._lock:
            self._actions.append(Action(time.time(), who, what, ok, getattr(self.snapshot, "sim_time", 0.0)))
            self.rev += 1
