"""A twin's user actions (play, pause, speed, load, rate, fault, policy, random, copool, reset) and
the one way in for them: `send` checks who is asking (instructor lock, sandbox owner), builds the
typed command and validates it once (twin.live.controls, the budgets), then either applies it at once
(pause, play, speed: plain attribute writes) or puts it on the engine's one queue (`Engine.submit`;
a reset hands the runner a new engine instead). Every action comes back as a `Ticket`: accepted (at
sim time t) or refused with the reason, at once for a refusal at the edge, from the engine's thread
otherwise. `TwinActions` is the controlling half of `twin.live.runner.Twin`.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.live.controls import (ControlError, _checked, _throttled, demo_names, fault_command, parse_hold,
                                parse_load, parse_rate, parse_seed, parse_speed, random_command)
from twin.cloud import live as copool_live
from twin.engine import commands
from twin.engine.commands import Ticket
from twin.engine.faults import load_fault_file
from twin.i18n import N_, said
from twin.live.tracestore import TraceChoiceError, check, label, pin, registered, resolve, unpin
from twin.workload import TraceNotFound

log = logging.getLogger("twin.live.session")

FAULTS_PER_MIN = 30                   # faults a client may send one twin per minute
RESETS_PER_MIN = 10                   # resets a client may send one twin per minute (each builds an engine
                                      # in the web process: up to ~1 s of CPU)
MAX_PENDING_FAULTS = 20               # scheduled faults not yet struck, per twin
FAULT_HORIZON_S = 86_400.0            # a fault may be scheduled at most one sim day ahead
TICKETS_KEPT = 256                    # answers a twin keeps for browsers to read on their next poll
RESET_LATE = "the twin was reset before this command landed; send it again"
RESET_REPLACED = "a later reset replaced this one before it took effect"


def policy_of(engine) -> dict:
    """The fault policy of an engine that is not running yet (a plain dict; {} if it has none)."""
    pol = getattr(getattr(engine, "faults", None), "policy", None)
    return dict(vars(pol)) if pol is not None else {}


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


def apply_load(engine, params: _Params, key: str) -> None:
    """Re-apply the viewer's load override to a new engine (after a reset, or in a sandbox copied
    from the shared twin); on a scenario that cannot take it, keep the scenario's own load."""
    if params.load is None:
        return
    try:
        engine.submit(commands.SetLoad(params.load))
    except Exception as exc:
        log.warning("twin %s: could not re-apply load: %s", key, exc)
        params.load = None


@dataclass(frozen=True)
class _Swap:
    """A reset for the runner: replace the running engine with this one, built from these settings;
    `ticket` is answered when the swap is done."""
    engine: Any
    params: "_Params"
    policy: dict
    random: float | None
    ticket: Ticket


# an accepted fault, by (scheduled ahead, with a duration)
FAULT_SAID = {(False, False): N_("fault %(kind)s %(target)s"),
              (True, False): N_("fault %(kind)s %(target)s at t=%(at)s s"),
              (False, True): N_("fault %(kind)s %(target)s for %(s)s s"),
              (True, True): N_("fault %(kind)s %(target)s at t=%(at)s s for %(s)s s")}


class TwinActions:
    """User actions on a twin (mixed into twin.live.runner.Twin, which owns the state they change)."""

    def send(self, action: str, value: Any = None, *, who: str = "viewer",
             credential: str | None = None, client: str | None = None) -> Ticket:
        """Send a user action; returns its ticket: refused at once (with the reason) if the edge
        refuses it, accepted at once for play, pause and speed, else answered by the engine's thread.

        Actions: play, pause, hold (pause after this many more simulated seconds), speed (1..1000 or "max"), load (fraction of capacity), rate (req/s),
        fault ({"target", "kind", "at_s", "duration_s", "factor", "period_s"}), policy ({"detect_s",
        "redundant_experts", "weights_from", ...}), random ({"hours_per_sim_s"}), copool (co-pool
        knobs on a co-pool day: {"policy", "lend_below", "dedicated_prefill_groups", ...}),
        reset ({"scenario", "seed", "deployment", "trace": a name `twin.live.tracestore` offers, "rate",
        "load": a fraction of capacity, "" for the scenario's own, "faults": a demo name}). `client` must be the sandbox's owner
        (see `client_id`); `credential` is what an instructor unlock returned (twin.live.gate), needed on a
        locked shared twin. The shared twin's log records each answer with `who`.
        """
        act = ACTIONS.get(action) if isinstance(action, str) else None
        try:
            self.require(credential, client)
            self.touch()
            if act is None:
                raise ControlError(f"unknown action {action!r}: allowed {', '.join(ACTIONS)}")
            ticket = act(self, value, client)
        except ControlError as exc:
            return Ticket(action if act else "unknown").refuse(str(exc))
        self._wake.set()
        self._keep(ticket, who)
        return ticket

    def control(self, action: str, value: Any = None, **who) -> str:
        """`send` for a caller that wants the confirmation as text (the lessons, links, the soak):
        raises ControlError with the reason if the action is refused at once."""
        ticket = self.send(action, value, **who)
        if ticket.refused:
            raise ControlError(ticket.reason)
        return ticket.said

    def ticket(self, ticket_id) -> Ticket | None:
        """A recent ticket of this twin by its id (None if unknown or long gone)."""
        with self._lock:
            return self._tickets.get(ticket_id) if type(ticket_id) is int else None

    def _keep(self, ticket: Ticket, who: str) -> None:
        """Keep the ticket for the sender's next poll; when answered, log it (shared twin) and bump
        the status so every page's beat carries the news."""
        with self._lock:
            self._tickets[ticket.id] = ticket
            while len(self._tickets) > TICKETS_KEPT:
                self._tickets.popitem(last=False)

        def answered(t: Ticket) -> None:
            if not self.shared:
                self._bump()
            elif t.accepted:
                self._note(who, t.said)
            else:
                self._note(who, said(N_("%(what)s refused: %(msg)s"), what=t.said, msg=t.reason), ok=False)
        ticket.on_done(answered)

    def _now(self, name: str, what) -> Ticket:
        """An action applied in the caller's thread: accepted at once."""
        return Ticket(name, what).accept(getattr(self.snapshot, "sim_time", 0.0))

    def _submit(self, cmd: commands.Command, what) -> Ticket:
        """Put a command on the one queue of the engine that will run next (a reset's, if one waits)."""
        with self._lock:
            engine = self._swap.engine if self._swap is not None else self._engine
            return engine.submit(cmd, Ticket(cmd.name, what))

    # pause, play and speed are plain attribute writes (atomic), applied immediately so the reply
    # already shows them; the thread is woken to act on them within one iteration
    def _play(self, _value, _client) -> Ticket:
        if self.paused:
            self._window_reset = True
        self.paused = False
        self.message = ""
        return self._now("play", said(N_("play")))

    def _pause(self, _value, _client) -> Ticket:
        self.paused = True
        self._window_reset = True
        return self._now("pause", said(N_("pause")))

    def _speed(self, value, _client) -> Ticket:
        s = parse_speed(value)
        self.speed = s
        self._window_reset = True
        return self._now("speed", said(N_("speed max")) if s == "max" else said(N_("speed %(x)sx"), x=f"{s:g}"))

    def _hold(self, value, _client) -> Ticket:
        """Pause once the engine that will run next has run `value` more simulated seconds: a hold
        sent after a reset counts from the new run's start (it names that run's engine)."""
        s = parse_hold(value)
        with self._lock:
            engine = self._swap.engine if self._swap is not None else self._engine
            self._pause_at = (engine, engine.sim_time + s, time.monotonic(), s)   # wall start: twin.live.pace
        return self._now("hold", said(N_("pause after %(s)s simulated s"), s=f"{s:g}"))

    def _synthetic_only(self, action: str, engine=None) -> None:
        workload = getattr(getattr(engine, "scenario", None), "workload", None) if engine else self.workload
        if workload == "trace":
            raise ControlError(f"{action}: a trace replays its own arrival times; pick a synthetic "
                               "scenario (e.g. bursty-chat or diurnal) to set the load, or change the speed")

    def _load(self, value, _client) -> Ticket:
        self._synthetic_only("load")
        cmd = _checked(commands.SetLoad, value)
        with self._lock:
            self.params.load = cmd.fraction
        return self._submit(cmd, said(N_("load %(pct)s%% of capacity"), pct=f"{cmd.fraction * 100:.0f}"))

    def _rate(self, value, _client) -> Ticket:
        self._synthetic_only("rate")
        cmd = _checked(commands.SetRate, value)
        return self._submit(cmd, said(N_("rate %(r)s req/s"), r=f"{cmd.rate:g}"))

    def _fault(self, value, client) -> Ticket:
        cmd = fault_command(value, getattr(self.snapshot, "deployment", None) or self.params.deployment)
        spec = self._budget_fault(cmd.spec, client)
        at, dur = spec.get("at_s"), spec.get("duration_s")
        return self._submit(cmd, said(FAULT_SAID[at is not None, dur is not None], kind=spec["kind"],
                                      target=spec["target"], **({"at": f"{at:g}"} if at is not None else {}),
                                      **({"s": f"{dur:g}"} if dur is not None else {})))

    def _policy(self, value, _client) -> Ticket:
        cmd = _checked(commands.SetPolicy, value)
        self.policy = {**self.policy, **cmd.fields}
        return self._submit(cmd, said(N_("policy %(fields)s"),
                                      fields=", ".join(f"{k}={v}" for k, v in cmd.fields.items())))

    def _random(self, value, _client) -> Ticket:
        cmd = random_command(value)
        self.random = cmd.hours_per_sim_s or None
        return self._submit(cmd, said(N_("random failures on (%(h)s failure-clock h per sim s)"), h=f"{self.random:g}")
                            if self.random else said(N_("random failures off")))

    def _copool(self, value, client) -> Ticket:
        """Co-pool knobs (twin.cloud.live): checked against the day the twin runs, rate-limited."""
        cmd = _checked(copool_live.check, value, getattr(self.snapshot, "cloud", None))
        _throttled(self._copool_rate, "co-pool changes", client or "anyone")
        return self._submit(cmd, said(N_("co-pool %(fields)s"),
                                      fields=", ".join(f"{k}={v}" for k, v in cmd.fields.items())))

    def _reset_action(self, value, client) -> Ticket:
        if client is not None:         # a browser (in-process callers, such as the lesson check, pass none)
            _throttled(self._reset_rate, "resets", client)
        return self._reset(value or {})

    def require(self, credential: str | None, client: str | None = None) -> None:
        """Raise ControlError unless `credential` may control this twin (instructor lock, checked by
        twin.live.gate) and `client` owns it (a sandbox)."""
        if self.owner is not None and client != self.owner:
            raise ControlError(f"sandbox {self.key} belongs to another browser: only the browser that "
                               "opened it can control or close it (open your own sandbox)")
        if not self.authorized(credential):
            raise ControlError("the shared twin is locked by the instructor: enter the instructor "
                               "token, or open a private sandbox to experiment")

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

    def _reset(self, spec: dict) -> str:
        """Build the new engine here (in the caller's thread) so a bad scenario, trace or deployment
        raises before anything changes; the running engine is swapped only on success.

        With "faults" (a demo name such as "l2-loss" or a fault file) the twin restarts on the file's
        scenario and seed (unless given) with the scenario's own deployment, trace and load, so the
        demo replays exactly; a reset without "faults" drops any fault file."""
        p = self.params
        if not isinstance(spec, dict):
            raise ControlError("reset: allowed a table {scenario, seed, deployment, trace, rate, load, faults}")
        demo: dict = {}
        if spec.get("faults"):
            if spec["faults"] not in demo_names():
                raise ControlError(f"faults = {str(spec['faults'])[:48]!r}: not a demo (allowed: "
                                   f"{', '.join(demo_names())})")
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
            load=None if demo else p.load,     # kept only on the same scenario (below)
            faults=demo.get("path"),
        )
        new.deployment = new.deployment or None
        if new.scenario != p.scenario:     # a load override belongs to the scenario it was set on
            new.load = None
        if spec.get("load") not in (None, ""):      # a load for the new run (e.g. from a link)
            new.load = parse_load(spec["load"])
        elif spec.get("load") == "":                # the scenario's own load (a lesson's reset)
            new.load = None
        try:
            if "trace" in spec:
                new.trace = check(spec["trace"])
            pin(new.trace, self)         # kept from here; the swap unpins the old run's trace
        except TraceChoiceError as exc:
            raise ControlError(str(exc)) from None
        try:
            engine = self._build(new, spec.get("load") not in (None, ""))
        except BaseException:
            unpin(new.trace, self)
            raise
        random = (demo.get("random") or {}).get("hours_per_sim_s")
        ticket = Ticket("reset", self._reset_said(spec, new, engine))
        with self._lock:
            dropped, self._swap = self._swap, _Swap(engine, new, policy_of(engine), random, ticket)
            self._pending = []
        if dropped is not None:           # two resets before the runner took the first: the last wins
            unpin(dropped.params.trace, self)
            dropped.engine.refuse_queued(RESET_LATE)
            dropped.ticket.refuse(RESET_REPLACED)
        return ticket

    @staticmethod
    def _reset_said(spec: dict, new: _Params, engine):
        """What a reset says it did (its settings, and what loading the trace did to it)."""
        bits = [said(N_("scenario %(name)s"), name=new.scenario), said(N_("seed %(seed)s"), seed=new.seed)]
        if new.deployment:
            bits.append(said(N_("deployment %(name)s"), name=new.deployment))
        if new.trace:
            bits.append(said(N_("trace %(name)s"), name=label(new.trace)))
        if new.faults:
            bits.append(said(N_("faults %(name)s"), name=Path(new.faults).stem))
        if spec.get("load") not in (None, "") and new.load is not None:
            bits.append(said(N_("load %(pct)s%% of capacity"), pct=f"{new.load * 100:.0f}"))
        notes = _trace_notes(engine, label(new.trace) if new.trace else None)
        if notes:
            return said(N_("reset: %(bits)s; note: %(notes)s"), bits=bits, notes=notes)
        return said(N_("reset: %(bits)s"), bits=bits)


    def _build(self, new: _Params, load_given: bool):
        """The engine for a reset, with its load applied; a ControlError that names no server path."""
        try:
            engine = self._factory(**new.engine_kwargs())
        except ControlError:
            raise
        except (ValueError, KeyError, OSError, TypeError) as exc:
            if new.trace in registered():         # the operator's file: say which name, never its text
                log.warning("twin %s: operator trace %s unusable: %s", self.key, new.trace, exc)
                raise ControlError(f"trace {new.trace}: the server's file for it cannot be used (the "
                                   "server log says why)") from None
            if isinstance(exc, TraceNotFound):    # its message lists the server's trace folders
                log.warning("twin %s: %s", self.key, exc)
                raise ControlError(f"trace {exc.name}: not available on this server") from None
            raise ControlError(str(exc).strip("'\"") or type(exc).__name__) from None
        if load_given:
            self._synthetic_only("load", engine)
        apply_load(engine, new, self.key)
        return engine


_RESORTED = re.compile(r"rows were not in arrival order \((\d+) step\(s\) back in time\); sorted stably by timestamp")


def _trace_notes(engine, shown: str | None) -> list[str]:
    """What loading the trace did to it (`Workload.notes`, e.g. rows re-sorted): shown with the reset
    in the action log and the status message, so nothing changes silently. A note starts with the
    loader's name for the file (an operator's server path): that becomes the dashboard's label."""
    wl = getattr(getattr(engine, "source", None), "workload", None)
    name = re.sub(r" x[0-9.e+-]+$", "", str(getattr(wl, "source", "")).partition(":")[2])
    out = []
    for n in getattr(wl, "notes", ()) or ():
        n = str(n)
        if not (name and n.startswith(name + ": ")):
            out.append(n)
        elif m := _RESORTED.fullmatch(n[len(name) + 2:]):
            out.append(said(N_("trace %(name)s: rows were not in arrival order (%(n)s step(s) back in time); "
                               "sorted stably by timestamp"), name=shown, n=m[1]))
        else:
            out.append(f"trace {shown}: {n[len(name) + 2:]}")
    return out


ACTIONS = {"play": TwinActions._play, "pause": TwinActions._pause, "speed": TwinActions._speed,
           "load": TwinActions._load, "rate": TwinActions._rate, "fault": TwinActions._fault,
           "policy": TwinActions._policy, "random": TwinActions._random, "copool": TwinActions._copool,
           "reset": TwinActions._reset_action, "hold": TwinActions._hold}
