"""Ready a twin for a lesson step: the one command path of the lesson page's action button, the
lecturer's timeline (Go, Next step) and `python -m twin.lessons plan-check`.

A class also ends here: `starting` notes the run the shared twin had when the lecturer began
leading, and `restore` brings it back when they stop (issue 36: a plan run twice in a row, and the
room left on the scenario and deployment it had, not on the last step's H800 run).

A step is three commands: its action (a reset, a load, ...), its speed and, for the timeline, a hold
that pauses the twin once the step's figures are there. The step is checked whole before any of them
is applied (issue 36: a hold the controls refused used to arrive after the reset had already
changed the run): speed and hold are parsed first, then the action is sent (a reset builds its
engine before anything is swapped, so a refused action changes nothing), then speed and hold.
"""
from __future__ import annotations

from pathlib import Path

from twin import lessons
from twin.engine.commands import Ticket
from twin.engine.faults import load_fault_file
from twin.live import pace
from twin.live.controls import ControlError, parse_hold, parse_speed


def ready(tw, step: lessons.Step, *, hold: bool = False, **who) -> Ticket:
    """Send `step`'s action, speed and (with `hold`) its hold to twin `tw` as `who` (the `send`
    keywords: who, credential, client); returns the action's ticket. ControlError naming what was
    refused, with nothing applied, if any part of the step is refused at once."""
    parse_speed(step.screen.speed)
    if hold:
        parse_hold(step.screen.warmup_s)
    ticket = tw.send(step.action.control, step.action.value, **who)
    if ticket.refused:
        raise ControlError(ticket.reason)
    tw.control("speed", step.screen.speed, **who)        # the pace the step's figures assume
    if hold:
        tw.control("hold", step.screen.warmup_s, **who)   # counts from the reset's new run (actions.hold)
    return ticket


def run_of(step: lessons.Step) -> tuple[str, str] | None:
    """(scenario, deployment) a step's reset starts ("" for the scenario's own deployment; a fault demo
    brings its own scenario), or None for a step that acts on whatever runs (load, fault, ...)."""
    v = step.action.value if isinstance(step.action.value, dict) else None
    if step.action.control != "reset" or v is None:
        return None
    if v.get("faults"):
        return str(load_fault_file(v["faults"]).get("scenario") or "default"), ""
    return v["scenario"], v.get("deployment") or ""


def warmup_wall(step: lessons.Step) -> tuple[float, pace.Pace | None]:
    """Wall seconds the step's warm-up takes: at the pace last measured here on its run (the shared
    twin's holds, twin.live.pace), else the promise of its speed; and that pace (None: not measured)."""
    run = run_of(step)
    measured = pace.measured(*run) if run else None
    sc = step.screen
    return (measured.wall_for(sc.warmup_s, sc.speed) if measured else sc.warmup_s / sc.speed), measured


def starting(tw) -> dict:
    """What `restore` brings back: the run `tw` has now (scenario, deployment, seed, trace, load or
    fault demo, as a reset names them) and its speed."""
    p = tw.params
    run = ({"faults": Path(p.faults).stem, "seed": p.seed} if p.faults else
           {"scenario": p.scenario, "deployment": p.deployment or "", "seed": p.seed, "trace": p.trace or "",
            "load": "" if p.load is None else p.load})
    return {"run": run, "speed": tw.speed}


def restore(tw, start: dict, **who) -> bool:
    """Bring `tw` back to `start` (from `starting`): a reset if the run differs (which also ends a
    hold's pause), then its speed; True if a reset was sent. ControlError if refused."""
    now = starting(tw)
    reset = now["run"] != start["run"]
    if reset:
        tw.control("reset", start["run"], **who)
    elif tw.paused:
        tw.control("play", **who)
    if now["speed"] != start["speed"]:
        tw.control("speed", start["speed"], **who)
    return reset
