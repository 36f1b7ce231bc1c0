"""Live runner: one daemon thread per twin advances an Engine in chunks and publishes snapshots.

A `Twin` owns one `twin.engine.Engine`. Its thread loops every ``wall_dt`` (0.2 s): drain the
control queue (pause, resume, speed, engine swap), ``eng.advance(speed * wall_dt)``, publish the
engine's snapshot by rebinding one reference (atomic in CPython), sleep the remainder. Engine
commands (rate, load, fault) go straight to ``eng.submit`` (thread-safe). The thread never dies
from a bad command or a failing step: it logs an event and carries on, and after repeated
failures it pauses itself with a message.

`Sessions` is the process-wide registry: a shared default twin that every viewer sees, started
lazily and idempotently behind a lock (never at import, so gunicorn forks safely), plus a bounded
number of private sandbox twins keyed by a random id; idle sandboxes (no *action* for a TTL; polls
do not count) are stopped and freed. If ``TWIN_INSTRUCTOR_TOKEN`` is set, controlling the shared
twin needs that token. Actions on the shared twin are logged (who, what, when) for everyone to see.

Budgets (the constants below, listed in the README): every viewer-controlled resource is bounded
here, server-side. A *client* is a browser's secret (a random string kept in its local storage,
sent with each action, stored here only as a hash), or its remote address when it sends none. A
sandbox belongs to the client that opened it: its id alone neither controls nor closes it.
Because a browser can mint new secrets but not new addresses, sandboxes and unlock attempts are
also capped per remote address.

Callers (Dash callbacks) only read `Twin.snapshot` / `Twin.status()` and call `Twin.control()`;
they never touch SimPy objects. The module never imports dash.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import queue
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .budget import RateLimit
from .config import CATALOG_DIR, catalog
from .engine import Engine, commands
from .engine.faults import Policy, check_spec, load_fault_file
from .engine.scenario import LOAD_MAX, MAX_RATE
from .topology import topology
from .tracestore import TraceChoiceError, check, label, registered, resolve

log = logging.getLogger(__name__)

TOKEN_ENV = "TWIN_INSTRUCTOR_TOKEN"
SHARED = "shared"

WALL_DT = 0.2                 # s of wall time per loop iteration
MIN_SLEEP = 0.03              # s the thread always yields per iteration (keeps callbacks responsive)
MAX_DUTY = 0.8                # at most this share of wall time in advance(): viewers share the GIL
SPEED_MIN, SPEED_MAX = 1.0, 1000.0
SPEED_PRESETS = (1, 5, 20, 100, 1000, "max")
LOAD_PRESETS = (25, 50, 75, 90, 100, 120, 150)   # % of capacity
LOAD_MIN = 0.0                        # exclusive; LOAD_MAX is the Scenario model's (one bound)
SEED_MIN, SEED_MAX = 0, 2**31 - 1
MAX_SANDBOXES = 4                     # private sandboxes in total (each is an engine thread)
MAX_SANDBOXES_PER_CLIENT = 1
MAX_SANDBOXES_PER_ADDRESS = 2         # a browser can mint secrets, not addresses
SANDBOX_TTL_S = 600.0                 # sandboxes with no action for this long are stopped and freed
UNLOCK_PER_MIN = 5                    # instructor-token attempts per client per minute
UNLOCK_PER_MIN_ADDRESS = 20           # ... and per remote address (a classroom behind one NAT)
UPLOADS_PER_MIN = 6                   # trace uploads per client per minute (each is parsed here)
FAULTS_PER_MIN = 30                   # faults a client may send one twin per minute
MAX_PENDING_FAULTS = 20               # scheduled faults not yet struck, per twin
FAULT_HORIZON_S = 86_400.0            # a fault may be scheduled at most one sim day ahead
_SECRET = re.compile(r"^[A-Za-z0-9_-]{22,64}$")
MAX_CONSECUTIVE_ERRORS = 5            # then the twin pauses itself and says why
LOG_LEN = 200


class ControlError(ValueError):
    """A rejected control: bad value, locked twin, no free sandbox. The message says what is allowed."""


def client_id(secret, addr) -> str:
    """Who is acting: a hash of the browser's secret if it sent a well-formed one, else its address."""
    if isinstance(secret, str) and _SECRET.match(secret):
        return "s-" + hashlib.sha256(secret.encode()).hexdigest()[:24]
    return "a-" + str(addr or "unknown")[:64]


def _throttled(limit: RateLimit, what: str, *keys: str) -> None:
    wait = limit.wait_s(*keys)
    if wait:
        raise ControlError(f"{what}: at most {limit.n} per minute; try again in {math.ceil(wait)} s")


def _default_factory(**params):
    return Engine(**params)


def _checked(build, *args):
    """A typed engine command, or a ControlError with its validation message."""
    try:
        return build(*args)
    except ValueError as exc:
        raise ControlError(str(exc.args[0] if exc.args else exc)) from None


def parse_speed(value) -> float | str:
    """1..1000 (times real time) or "max"; raises ControlError naming the allowed range."""
    if isinstance(value, str) and value.strip().lower() in ("max", "fastest", "as fast as possible"):
        return "max"
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ControlError(f"speed = {value!r}: allowed {SPEED_MIN:g} to {SPEED_MAX:g} "
                           "(times real time) or 'max'") from None
    if not math.isfinite(v) or not SPEED_MIN <= v <= SPEED_MAX:
        raise ControlError(f"speed = {value!r}: allowed {SPEED_MIN:g} to {SPEED_MAX:g} "
                           "(times real time) or 'max'")
    return v


def parse_load(value) -> float:
    """0 < load <= LOAD_MAX (fraction of capacity): the engine's SetLoad rule."""
    return _checked(commands.SetLoad, value).fraction


def parse_rate(value) -> float:
    """0 < rate <= MAX_RATE req/s: the engine's SetRate rule."""
    return _checked(commands.SetRate, value).rate


def parse_seed(value) -> int:
    try:
        f = float(value)
        ok = math.isfinite(f) and f == int(f)
    except (TypeError, ValueError):
        ok = False
    if not ok or not SEED_MIN <= int(f) <= SEED_MAX:
        raise ControlError(f"seed = {value!r}: allowed a whole number {SEED_MIN} to {SEED_MAX}")
    return int(f)


def parse_random(value) -> float:
    """{"hours_per_sim_s": h} (or a bare number h), 0 <= h <= RANDOM_MAX: how fast the failure clock
    runs (twin.engine.faults); returns h."""
    h = value.get("hours_per_sim_s") if isinstance(value, dict) else value
    if isinstance(value, dict) and set(value) - {"hours_per_sim_s"}:
        h = value          # refused below, naming the allowed table
    if isinstance(h, str):
        try:
            h = float(h)
        except ValueError:
            pass
    return _checked(commands.SetRandom, h).hours_per_sim_s


@lru_cache(maxsize=8)
def _fresh_topology(system: str):
    return topology(system)          # healthy; only read here (validation never fails parts)


def check_fault(spec, deployment: str | None, now: float) -> dict:
    """Validate a fault with the faults component's own rule (`check_spec`) against a fresh
    topology of the deployment's system, without touching any running engine; returns the
    canonical spec (canonical target id, fields given) or raises ControlError naming what is wrong."""
    if not isinstance(spec, dict):
        raise ControlError(f"fault = {spec!r}: allowed a table {{kind, target, at_s?, duration_s?, "
                           "factor?, period_s?}")
    spec = {k: v for k, v in spec.items() if v is not None and v != ""}
    try:
        system = catalog().deployment(deployment or "cloudmatrix-infer-paper").system
        f = check_spec(spec, _fresh_topology(system), float(now))
    except (ValueError, KeyError, TypeError) as exc:
        raise ControlError(str(exc.args[0] if exc.args else exc)) from None
    out = {"kind": f.kind, "target": f.target}
    for name, value in (("at_s", f.at_s), ("duration_s", f.duration_s), ("factor", f.factor),
                        ("period_s", f.period_s)):
        if name in spec:
            out[name] = value
    return out


def _demo_names() -> list[str]:
    """The fault demos a viewer may load (catalog files, by name: never a path from a browser)."""
    return sorted(p.stem for p in (CATALOG_DIR / "faults").glob("*.toml"))


def _policy_of(engine) -> dict:
    """The fault policy of an engine that is not running yet (a plain dict; {} if it has none)."""
    pol = getattr(getattr(engine, "faults", None), "policy", None)
    return dict(vars(pol)) if pol is not None else {}


@dataclass(frozen=True)
class _Swap:
    """Queue message: replace the running engine (a reset), with the settings it was built from."""
    engine: Any
    params: "_Params"
    policy: dict
    random: float | None


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
                "sim_time": round(self.sim_time, 1)}


@dataclass
class _Params:
    scenario: str = "default"
    seed: int = 0
    deployment: str | None = None
    trace: str | None = None
    rate: float | None = None
    load: float | None = None        # last load fraction set by a user (re-applied after a reset)
    faults: str | None = None        # fault scenario file replayed from t = 0 (a demo), if any

    def engine_kwargs(self) -> dict:
        kw = {"scenario": self.scenario, "seed": self.seed, "deployment": self.deployment,
              "trace": resolve(self.trace), "rate": self.rate}
        if self.trace:
            kw["workload"] = "trace"          # a trace picked on a synthetic scenario replays it
        if self.faults:
            kw["faults"] = self.faults
        return kw


@dataclass
class _Stats:
    achieved: float = 0.0            # EWMA of sim seconds per wall second
    step_ms: float = 0.0             # EWMA of wall ms per advance()
    errors: int = 0
    consecutive_errors: int = 0
    last_error: str = ""
    window: deque = field(default_factory=lambda: deque(maxlen=25))   # (wall, sim) samples


class Twin:
    """One live engine and the thread that drives it.

    Attributes read by the UI: `key`, `shared`, `snapshot` (latest published Snapshot or None),
    `run` (increments when the engine is replaced by a reset), `status()`, `actions()`.
    """

    def __init__(self, key: str, *, shared: bool = False, params: dict | None = None,
                 factory: Callable[..., Any] = _default_factory, wall_dt: float = WALL_DT,
                 speed: float | str = 1.0, token: str | None = None, ttl_s: float | None = None,
                 owner: str | None = None, addr: str | None = None):
        self.key = key
        self.shared = shared
        self.owner, self.addr = owner, addr       # the client that opened a sandbox (None: anyone)
        self.created = time.time()
        self.last_seen = time.monotonic()
        self._factory = factory
        self._token = token or None
        self._ttl = ttl_s
        self.wall_dt = float(wall_dt)
        self.params = _Params(**(params or {}))
        self.speed: float | str = parse_speed(speed)
        self.paused = False
        self.run = 0
        self.rev = 0                              # bumps on any status change viewers should see
        self.message = ""
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()             # guards _actions, _memo, params, rev
        self._actions: deque[Action] = deque(maxlen=LOG_LEN)
        self._memo: dict = {}
        self._memo_version: tuple = ()
        self._stats = _Stats()
        self._max_chunk = 1.0                     # sim s per advance at speed "max" (adapted)
        self._window_reset = False                # set by control(); the thread clears its window
        self._pending: list[float] = []           # at_s of scheduled faults not yet struck
        self._fault_rate = RateLimit(FAULTS_PER_MIN)
        self._engine = self._factory(**self.params.engine_kwargs())   # raises ValueError on bad input
        self.snapshot = self._engine.snapshot()
        self.policy: dict = _policy_of(self._engine)   # fault policy as last set (read by the UI)
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
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def idle_s(self) -> float:
        return time.monotonic() - self.last_seen

    # ---- the engine thread ------------------------------------------------------------------

    def _loop(self) -> None:
        last_wall = time.monotonic()
        last_adv: float | None = None       # wall time of the previous advance (None after a pause)
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self._drain()
                if self._ttl is not None and self.idle_s() > self._ttl:
                    self._note("system", f"stopped after {self._ttl:.0f} s idle")
                    break
                advanced = 0.0
                if self.paused:
                    last_adv = None
                else:
                    # sim time follows the wall time that really passed (sleeps overshoot a little),
                    # capped so a slow step is not followed by a catch-up burst
                    elapsed = self.wall_dt if last_adv is None else min(t0 - last_adv, 2 * self.wall_dt)
                    last_adv = t0
                    advanced = self._advance_once(elapsed)
                now = time.monotonic()
                self._account(now - last_wall, advanced)
                last_wall = now
            except Exception as exc:   # belt and braces: the loop itself must never die
                log.exception("twin %s: runner iteration failed", self.key)
                self._fail_step(exc)
                now = last_wall = time.monotonic()
            busy = now - t0
            floor = max(MIN_SLEEP, busy * (1 - MAX_DUTY) / MAX_DUTY)
            pause = max(floor, self.wall_dt - busy) if self.speed != "max" else floor
            self._wake.wait(pause)
            self._wake.clear()

    def _advance_once(self, elapsed: float) -> float:
        eng = self._engine
        if self.speed == "max":
            sim = self._max_chunk
        else:
            sim = float(self.speed) * max(elapsed, 0.0)
        t0 = time.monotonic()
        try:
            eng.advance(sim)
        except Exception as exc:   # never let the thread die; say what happened
            self._fail_step(exc)
            return 0.0
        dt = time.monotonic() - t0
        st = self._stats
        st.step_ms = 0.8 * st.step_ms + 0.2 * dt * 1e3 if st.step_ms else dt * 1e3
        st.consecutive_errors = 0
        if self.speed == "max":   # size the next chunk to take about wall_dt of compute
            rate = sim / max(dt, 1e-4)
            self._max_chunk = min(max(0.2 * self._max_chunk + 0.8 * rate * self.wall_dt, 0.05), 3600.0)
        self.snapshot = eng.snapshot()
        return sim

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

    def _account(self, wall: float, sim: float) -> None:
        st = self._stats
        if self._window_reset:
            self._window_reset = False
            st.window.clear()
            return
        st.window.append((wall, sim))
        w = sum(a for a, _ in st.window)
        st.achieved = sum(b for _, b in st.window) / w if w > 0 else 0.0

    def _drain(self) -> None:
        while True:
            try:
                msg = self._q.get_nowait()
            except queue.Empty:
                return
            try:
                if isinstance(msg, _Swap):
                    engine = msg.engine
                    self._engine = engine
                    with self._lock:
                        self.params = msg.params
                    self.policy = msg.policy
                    self.random = msg.random
                    self.snapshot = engine.snapshot()   # before run: a reader of the new run sees its snapshot
                    self.run += 1
                    self.paused = False
                    self.message = ""
                    self._stats = _Stats()
                else:
                    self._engine.submit(msg)
                self._bump()
            except Exception as exc:   # a bad command never kills the thread
                what = type(msg).__name__
                log.exception("twin %s: command %s failed", self.key, what)
                self._note("system", f"command {what} failed: {type(exc).__name__}: {exc}", ok=False)

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
            "speed": self.speed, "achieved": round(st.achieved, 2), "step_ms": round(st.step_ms, 1),
            "scenario": p.scenario, "seed": p.seed, "deployment": getattr(snap, "deployment", p.deployment),
            "trace": p.trace, "rate": p.rate, "load": p.load,
            "workload": self.workload,
            "locked": self.locked, "message": self.message or getattr(snap, "message", ""),
            "errors": st.errors,
        }

    @property
    def locked(self) -> bool:
        return self.shared and bool(self._token)

    @property
    def workload(self) -> str | None:
        """"trace" or "synthetic" (from the engine's scenario), None if unknown."""
        return getattr(getattr(self._engine, "scenario", None), "workload", None)

    def authorized(self, token: str | None) -> bool:
        if not self.locked:
            return True
        return bool(token) and hmac.compare_digest(str(token).encode(), self._token.encode())

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

    # ---- controlling ------------------------------------------------------------------------

    def _bump(self) -> None:
        with self._lock:
            self.rev += 1

    def _note(self, who: str, what: str, ok: bool = True) -> None:
        with self._lock:
            self._actions.append(Action(time.time(), who, what, ok, getattr(self.snapshot, "sim_time", 0.0)))
            self.rev += 1

    def control(self, action: str, value: Any = None, *, who: str = "viewer",
                token: str | None = None, client: str | None = None) -> str:
        """Apply a user action; returns a short confirmation, raises ControlError with the reason.

        Actions: play, pause, speed (1..1000 or "max"), load (0..2), rate (req/s),
        fault ({"target", "kind", ...}; `check_fault` validates one first), policy ({"detect_s",
        "redundant_experts", "weights_from", ...}), random ({"hours_per_sim_s"}),
        reset ({"scenario", "seed", "deployment", "trace": a name `twin.tracestore` offers, "rate",
        "faults": a demo name}). `client` must be the sandbox's owner (see `client_id`).
        """
        self.require(token, client)
        self.touch()
        # pause, play and speed are plain attribute writes (atomic), applied immediately so the
        # reply already shows them; the thread is woken to act on them within one iteration
        if action == "play":
            if self.paused:
                self._window_reset = True
            self.paused = False
            self.message = ""
            msg = "play"
        elif action == "pause":
            self.paused = True
            self._window_reset = True
            msg = "pause"
        elif action == "speed":
            s = parse_speed(value)
            self.speed = s
            self._window_reset = True
            msg = f"speed {s if s == 'max' else f'{s:g}x'}"
        elif action in ("load", "rate") and self.workload == "trace":
            raise ControlError(f"{action}: a trace replays its own arrival times; pick a synthetic "
                               "scenario (e.g. bursty-chat or diurnal) to set the load, or change the speed")
        elif action == "load":
            f = parse_load(value)
            with self._lock:
                self.params.load = f
            self._q.put(commands.SetLoad(f))
            msg = f"load {f * 100:.0f}% of capacity"
        elif action == "rate":
            r = parse_rate(value)
            self._q.put(commands.SetRate(r))
            msg = f"rate {r:g} req/s"
        elif action == "fault":
            if not isinstance(value, dict) or "target" not in value or "kind" not in value:
                raise ControlError("fault: allowed {'kind': a fault kind (npu_die, l2, optical_link, ...), "
                                   "'target': a topology id, 'at_s', 'duration_s'}")
            value = self._budget_fault(self.check_fault(value), client)
            self._q.put(commands.InjectFault(value))
            msg = f"fault {value['kind']} {value['target']}"
            if value.get("at_s") is not None:
                msg += f" at t={float(value['at_s']):g} s"
            if value.get("duration_s") is not None:
                msg += f" for {float(value['duration_s']):g} s"
        elif action == "policy":
            cmd = self._check_policy(value)
            self._q.put(cmd)
            self.policy = {**self.policy, **cmd.fields}
            msg = "policy " + ", ".join(f"{k}={v}" for k, v in cmd.fields.items())
        elif action == "random":
            h = parse_random(value)
            self._q.put(commands.SetRandom(h))
            self.random = h or None
            msg = (f"random failures on ({self.random:g} failure-clock h per sim s)" if self.random
                   else "random failures off")
        elif action == "reset":
            msg = self._reset(value or {})
        else:
            raise ControlError(f"unknown action {action!r}: allowed play, pause, speed, load, rate, fault, reset")
        self._wake.set()
        if self.shared:
            self._note(who, msg)
        else:
            self._bump()
        return msg

    def require(self, token: str | None, client: str | None = None) -> None:
        """Raise ControlError unless `token` may control this twin (instructor lock) and `client`
        owns it (a sandbox)."""
        if self.owner is not None and client != self.owner:
            raise ControlError(f"sandbox {self.key} belongs to another browser: only the browser that "
                               "opened it can control or close it (open your own sandbox)")
        if not self.authorized(token):
            raise ControlError("the shared twin is locked by the instructor: enter the instructor "
                               "token, or open a private sandbox to experiment")

    def check_fault(self, spec) -> dict:
        """Validate a fault for this twin's system at its current sim time (nothing is changed)."""
        snap = self.snapshot
        return check_fault(spec, getattr(snap, "deployment", None) or self.params.deployment,
                           getattr(snap, "sim_time", 0.0))

    def _budget_fault(self, spec: dict, client: str | None) -> dict:
        """Refuse a fault beyond the horizon, past the pending limit or the client's rate."""
        now = float(getattr(self.snapshot, "sim_time", 0.0))
        at = spec.get("at_s")
        if at is not None and at > now + FAULT_HORIZON_S:
            raise ControlError(f"fault at_s = {at:g}: allowed up to {FAULT_HORIZON_S:,.0f} s after now "
                               f"(t = {now:,.1f} s)")
        with self._lock:
            self._pending = [t for t in self._pending if t > now]
            if at is not None and at > now and len(self._pending) >= MAX_PENDING_FAULTS:
                raise ControlError(f"fault: {MAX_PENDING_FAULTS} scheduled faults are already waiting on this "
                                   "twin (the most allowed); wait for them to strike or reset")
        _throttled(self._fault_rate, "faults", client or "anyone")
        if at is not None and at > now:
            with self._lock:
                self._pending.append(at)
        return spec

    def _check_policy(self, value) -> commands.SetPolicy:
        """The policy change as a command, checked against the policy as last set."""
        cmd = _checked(commands.SetPolicy, value)
        try:
            Policy.load(**{**self.policy, **cmd.fields})
        except (ValueError, TypeError) as exc:
            raise ControlError(str(exc)) from None
        return cmd

    def _reset(self, spec: dict) -> str:
        """Build the new engine here (in the caller's thread) so a bad scenario, trace or deployment
        raises before anything changes; the running engine is swapped only on success.

        With "faults" (a demo name such as "l2-loss" or a fault file) the twin restarts on the file's
        scenario and seed (unless given) with the scenario's own deployment, trace and load, so the
        demo replays exactly; a reset without "faults" drops any fault file."""
        p = self.params
        if not isinstance(spec, dict):
            raise ControlError("reset: allowed a table {scenario, seed, deployment, trace, rate, faults}")
        demo: dict = {}
        if spec.get("faults"):
            if spec["faults"] not in _demo_names():
                raise ControlError(f"faults = {str(spec['faults'])[:48]!r}: not a demo (allowed: "
                                   f"{', '.join(_demo_names())})")
            try:
                demo = load_fault_file(spec["faults"])
            except (ValueError, OSError) as exc:
                raise ControlError(str(exc)) from None
        new = _Params(
            scenario=spec.get("scenario") or demo.get("scenario") or p.scenario,
            seed=(parse_seed(spec["seed"]) if spec.get("seed") not in (None, "")
                  else parse_seed(demo["seed"]) if "seed" in demo else p.seed),
            deployment=spec.get("deployment") if "deployment" in spec else None if demo else p.deployment,
            trace=spec.get("trace") if "trace" in spec else None if demo else p.trace,
            rate=parse_rate(spec["rate"]) if spec.get("rate") not in (None, "") else None,
            load=None if demo else p.load,
            faults=demo.get("path"),
        )
        new.deployment = new.deployment or None
        if "trace" in spec:
            try:
                new.trace = check(spec["trace"])
            except TraceChoiceError as exc:
                raise ControlError(str(exc)) from None
        try:
            engine = self._factory(**new.engine_kwargs())
        except ControlError:
            raise
        except (ValueError, KeyError, OSError, TypeError) as exc:
            if new.trace in registered():         # the operator's file: say which name, never its text
                log.warning("twin %s: operator trace %s unusable: %s", self.key, new.trace, exc)
                raise ControlError(f"trace {new.trace}: the server's file for it cannot be used (the "
                                   "server log says why)") from None
            raise ControlError(str(exc).strip("'\"") or type(exc).__name__) from None
        if new.load is not None:
            try:
                engine.submit(commands.SetLoad(new.load))
            except Exception as exc:  # keep the scenario's own load rather than fail the reset
                log.warning("twin %s: could not re-apply load: %s", self.key, exc)
                new.load = None
        random = (demo.get("random") or {}).get("hours_per_sim_s")
        self._q.put(_Swap(engine, new, _policy_of(engine), random))
        with self._lock:
            self._pending = []
        bits = [f"scenario {new.scenario}", f"seed {new.seed}"]
        if new.deployment:
            bits.append(f"deployment {new.deployment}")
        if new.trace:
            bits.append(f"trace {label(new.trace)}")
        if new.faults:
            bits.append(f"faults {Path(new.faults).stem}")
        notes = _trace_notes(engine, label(new.trace) if new.trace else None)
        return "reset: " + ", ".join(bits) + "".join(f"; note: {n}" for n in notes)


def _trace_notes(engine, shown: str | None) -> list[str]:
    """What loading the trace did to it (`Workload.notes`, e.g. rows re-sorted): shown with the reset
    in the action log and the status message, so nothing changes silently. A note starts with the
    loader's name for the file (an operator's server path): that becomes the dashboard's label."""
    wl = getattr(getattr(engine, "source", None), "workload", None)
    name = re.sub(r" x[0-9.e+-]+$", "", str(getattr(wl, "source", "")).partition(":")[2])
    out = []
    for n in getattr(wl, "notes", ()) or ():
        n = str(n)
        out.append(f"trace {shown}: {n[len(name) + 2:]}" if name and n.startswith(name + ": ") else n)
    return out


class SandboxLimit(ControlError):
    pass


class Sessions:
    """Registry of live twins: one shared default twin plus at most `max_sandboxes` private ones."""

    def __init__(self, *, factory: Callable[..., Any] = _default_factory, params: dict | None = None,
                 max_sandboxes: int = MAX_SANDBOXES, ttl_s: float = SANDBOX_TTL_S,
                 wall_dt: float = WALL_DT, speed: float | str = 1.0, token: str | None = None,
                 per_client: int = MAX_SANDBOXES_PER_CLIENT, per_address: int = MAX_SANDBOXES_PER_ADDRESS):
        self.factory = factory
        self.params = dict(params or {})
        self.max_sandboxes = max_sandboxes
        self.per_client, self.per_address = per_client, per_address
        self._unlock_client = RateLimit(UNLOCK_PER_MIN)
        self._unlock_addr = RateLimit(UNLOCK_PER_MIN_ADDRESS)
        self._uploads = RateLimit(UPLOADS_PER_MIN)
        self.ttl_s = ttl_s
        self.wall_dt = wall_dt
        self.speed = speed
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self._lock = threading.Lock()
        self._shared: Twin | None = None
        self._sandboxes: dict[str, Twin] = {}

    @property
    def locked(self) -> bool:
        return bool(self.token)

    def shared(self) -> Twin:
        """The shared default twin, created and started on first use (idempotent, thread-safe)."""
        t = self._shared
        if t is not None:
            return t
        with self._lock:
            if self._shared is None:
                tw = Twin(SHARED, shared=True, params=self.params, factory=self.factory,
                          wall_dt=self.wall_dt, speed=self.speed, token=self.token)
                tw._note("system", f"shared twin started: scenario {tw.params.scenario}")
                self._shared = tw.start()
            return self._shared

    def get(self, key: str | None) -> Twin | None:
        """The twin a viewer asked for: the shared one, a live sandbox, or None if it is gone."""
        self.reap()
        if not key or key == SHARED:
            return self.shared()
        if not isinstance(key, str):
            return None
        with self._lock:
            return self._sandboxes.get(key)      # viewing is not an action: no touch

    def unlock(self, token, client: str, addr: str | None) -> bool:
        """Check an instructor token (constant-time), at most UNLOCK_PER_MIN tries per client and
        UNLOCK_PER_MIN_ADDRESS per address a minute; ControlError when over."""
        _throttled(self._unlock_client, "unlock attempts", client)
        _throttled(self._unlock_addr, "unlock attempts from this address", f"addr:{addr}")
        return self.shared().authorized(token if isinstance(token, str) else None)

    def allow_upload(self, client: str) -> None:
        _throttled(self._uploads, "trace uploads", client)

    def open_sandbox(self, params: dict | None = None, *, client: str | None = None,
                     addr: str | None = None) -> Twin:
        """Start a private twin (same settings as the shared one unless given), owned by `client`."""
        self.reap()
        with self._lock:
            live = [t for t in self._sandboxes.values() if t is not None]
            if client is not None and sum(t.owner == client for t in live) >= self.per_client:
                raise SandboxLimit(f"this browser already has {self.per_client} private sandbox(es), the "
                                   "most allowed: go back to it, or close it first")
            if addr is not None and sum(t.addr == addr for t in live) >= self.per_address:
                raise SandboxLimit(f"{self.per_address} private sandboxes are already open from your network "
                                   "address, the most allowed: close one first")
            if len(self._sandboxes) >= self.max_sandboxes:
                raise SandboxLimit(f"all {self.max_sandboxes} private sandboxes are in use; idle ones "
                                   f"are freed after {self.ttl_s / 60:.0f} min. Watch the shared twin "
                                   "meanwhile.")
            key = "sb-" + secrets.token_hex(8)
            self._sandboxes[key] = None   # reserve the slot while the engine builds
        base = params
        if base is None:
            sp = self._shared.params if self._shared else None
            base = {k: v for k, v in vars(sp).items() if k != "load"} if sp else dict(self.params)
        try:
            tw = Twin(key, shared=False, params=base, factory=self.factory, wall_dt=self.wall_dt,
                      speed=self.speed, ttl_s=self.ttl_s, owner=client, addr=addr)
        except Exception as exc:
            with self._lock:
                self._sandboxes.pop(key, None)
            if isinstance(exc, (ValueError, KeyError, OSError)):   # e.g. an upload no longer kept
                log.warning("sandbox could not start: %s", exc)
                raise ControlError("a sandbox could not start with the shared twin's settings; reset "
                                   "the shared twin or try again") from None
            raise
        with self._lock:
            self._sandboxes[key] = tw
        return tw.start()

    def close(self, key: str, client: str | None = None) -> bool:
        """Stop a sandbox; ControlError if `client` is not its owner."""
        with self._lock:
            tw = self._sandboxes.get(key) if isinstance(key, str) else None
            if tw is not None and tw.owner is not None and client != tw.owner:
                raise ControlError(f"sandbox {key} belongs to another browser: only the browser that "
                                   "opened it can close it")
            tw = self._sandboxes.pop(key, None) if isinstance(key, str) else None
        if tw is not None:
            tw.stop(timeout=2.0)
        return tw is not None

    def reap(self) -> list[str]:
        """Stop and free sandboxes idle for longer than the TTL (or whose thread has ended)."""
        gone = []
        with self._lock:
            for key, tw in list(self._sandboxes.items()):
                if tw is None:
                    continue
                if tw.idle_s() > self.ttl_s or (tw._thread is not None and not tw.alive):
                    gone.append(self._sandboxes.pop(key))
        for tw in gone:
            tw.stop(timeout=0.5)
        return [tw.key for tw in gone]

    def sandboxes(self) -> list[str]:
        with self._lock:
            return [k for k, v in self._sandboxes.items() if v is not None]

    def shutdown(self) -> None:
        with self._lock:
            twins = [t for t in self._sandboxes.values() if t is not None]
            if self._shared is not None:
                twins.append(self._shared)
            self._sandboxes.clear()
            self._shared = None
        for tw in twins:
            tw.stop(timeout=2.0)


_registry: Sessions | None = None
_registry_lock = threading.Lock()


def sessions() -> Sessions:
    """The process-wide registry, created on first call (never at import)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Sessions()
    return _registry


def configure(**kwargs) -> Sessions:
    """Replace the process-wide registry (tests, benchmarks); stops the old one's twins."""
    global _registry
    with _registry_lock:
        old, _registry = _registry, Sessions(**kwargs)
    if old is not None:
        old.shutdown()
    return _registry
