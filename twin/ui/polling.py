"""The polling contract shared by every page: one clock for the whole app.

The shell holds the only `dcc.Interval` (`shell-tick`). Its callback (`shell_tick`) is the one
path that writes the twin's status (`shell-status`, drawn by the control bar) and a small *beat*
(twin, run, snapshot version, status revision, lock) that changes only when the viewed twin has
something new. The beat goes to the shell (`shell-beat`, to compare against) and to the beat store
of whichever page is shown (`{"type": "beat", "page": P}`, written through an ALL wildcard, so a
page's callbacks only ever listen to components of their own page). Every page's live callback is
declared with `page_tick`, which feeds it from its beat store: a page polls nothing itself and runs
only when there is something to draw (and once when it mounts).

Each page keeps a small *cursor* in a dcc.Store: which twin and run it drew, the snapshot version
and the last history time it has. On every beat `Tick.read()` says what to send: nothing (same
version), the new points only, or everything (first load, another twin, or a reset). Pages never
mutate module state; the session registry owns the twins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import dash
from dash import Input, Output, State, dcc, no_update

from twin.live import session

from twin.ui import eventtext, figures, guard
from twin.ui.lang import _, unit

ACTIONS_SHOWN = 8
TICK_MS = 1000          # the app's one clock: how often a browser asks whether its twin moved
BEAT = "shell-beat"
TICKET = "ctl-ticket"     # a control-bar action the engine has not answered yet (twin.ui.answer)


def beat_id(prefix: str) -> dict:
    """The id of a page's beat store (the shell writes every one shown, through an ALL wildcard)."""
    return {"type": "beat", "page": prefix}


def twin_for(choice: str | None) -> tuple[session.Twin, str]:
    """The twin a viewer picked (browser store), or the shared one with a note if it is gone."""
    reg = session.sessions()
    tw = reg.get(guard.choice(choice))
    if tw is None:
        return reg.shared(), _("that private sandbox is gone (stopped after %(min)s min without an action); "
                               "showing the shared twin") % {"min": f"{reg.ttl_s / 60:.0f}"}
    return tw, ""


def _cursor(cur) -> dict:
    """A tick cursor from the browser with every field of the right type (else dropped)."""
    cur = guard.store(cur)
    out = {k: cur[k] for k in ("twin",) if isinstance(cur.get(k), str)}
    for k in ("run", "v", "rev"):
        if type(cur.get(k)) is int:
            out[k] = cur[k]
    if guard.number(cur.get("t")) is not None and not isinstance(cur.get("t"), str):
        out["t"] = float(cur["t"])
    return out


def status_payload(tw: session.Twin, note: str = "") -> dict:
    st = tw.status()
    st["actions"] = [eventtext.action(a) for a in tw.actions(ACTIONS_SHOWN)] if tw.shared else []
    st["note"] = note
    st["sandboxes"] = len(session.sessions().sandboxes())
    st["max_sandboxes"] = session.sessions().max_sandboxes
    st["text"] = status_text()
    st["class"] = session.sessions().classroom.public()     # the shared twin's class (twin.ui.classbar follows it)
    return st


def status_text() -> dict:
    """The control bar's words that assets/twin.js draws, in the viewer's language."""
    return {"live": _("live"), "paused": _("paused"), "stopped": _("stopped"), "speed": _("speed"),
            "achieved": _("achieved"), "max": _("max"), "shared": _("Shared twin"), "instructor": _("instructor"),
            "locked": _("locked"), "sandbox": _("Private sandbox"), "scenario": _("scenario"), "seed": _("seed"),
            "trace": _("trace"), "load": _("load"), "play": _("Play"), "pause": _("Pause"),
            "failed": _("(failed)"), "noActions": _("no actions yet"),
            "private": _("Your private sandbox: actions are not shared."),
            "lockNote": _("Shared controls are locked by the instructor. Enter the instructor token under "
                          "\u201cScenario & twin\u201d, or open a private sandbox to experiment."),
            "traceLoad": _("This scenario replays a trace with its own arrival times: load is set by the trace "
                           "(pick a synthetic scenario such as bursty-chat to change it)"),
            "loadTitle": _("Offered load as a fraction of the deployment's capacity"),
            "s": unit("s"), "min": unit("min"), "h": _("h")}


@dataclass
class Tick:
    """What a page's interval callback should send for one tick."""
    twin: session.Twin
    snap: object
    mode: str            # "none" | "extend" | "full"
    since_t: float | None
    cursor: dict
    note: str = ""
    prior: dict = field(default_factory=dict)   # the page's cursor as it came (page-specific fields too)

    @property
    def changed(self) -> bool:
        return self.mode != "none"

    @property
    def system(self):
        """The `SystemInfo` of the snapshot being drawn (the system this twin runs)."""
        return self.snap.system

    @classmethod
    def read(cls, cursor: dict | None, choice: str | None) -> "Tick":
        tw, note = twin_for(choice)
        snap = tw.snapshot
        cur = _cursor(cursor)
        version = int(getattr(snap, "version", 0))
        same_twin = cur.get("twin") == tw.key and cur.get("run") == tw.run
        hist = getattr(snap, "history", None) or {}
        t_last = figures.last_t(hist)
        if not same_twin or cur.get("t") is None and t_last is not None:
            mode = "full"
        elif cur.get("v") == version:
            mode = "none"
        elif t_last is not None and cur.get("t") is not None and t_last < cur["t"]:
            mode = "full"          # history went backwards: redraw
        else:
            mode = "extend"
        new_cursor = {"twin": tw.key, "run": tw.run, "v": version, "t": t_last, "rev": tw.rev}
        return cls(tw, snap, mode, cur.get("t") if mode == "extend" else None, new_cursor, note,
                   guard.store(cursor))

    def strip(self, spec: figures.StripSpec, height: int = 230):
        """(figure, extendData) outputs for a strip chart."""
        hist = getattr(self.snap, "history", None)
        if self.mode == "full":
            return figures.strip_figure(spec, hist, height=height), no_update
        if self.mode == "extend":
            ext = figures.extend(spec, hist, self.since_t)
            return no_update, (ext if ext is not None else no_update)
        return no_update, no_update


def beat(tw: session.Twin, note: str = "", unlocked: bool = False) -> dict:
    """What the shell's beat says about a twin: it changes exactly when a page may have news (and
    says whether this tab may use the twin's shared controls)."""
    cls = session.sessions().classroom.public()
    return {"twin": tw.key, "run": tw.run, "v": int(getattr(tw.snapshot, "version", 0)), "rev": tw.rev,
            "note": bool(note), "locked": bool(tw.shared and session.sessions().locked and not unlocked),
            "cls": [cls["rev"], cls["n"]]}


def current_beat(choice, unlocked: bool = False) -> dict:
    """The beat of the twin this viewer watches now (for a page that just mounted)."""
    tw, note = twin_for(choice)
    return beat(tw, note, unlocked)


def shell_tick(choice, last: dict | None, action: bool = False, unlocked: bool = False) -> tuple:
    """(status, beat) for the shell's one interval: both no_update while the viewed twin is unchanged,
    unless an action just ran (its message changed), which always refreshes the status."""
    tw, note = twin_for(choice)
    now = beat(tw, note, unlocked)
    if now == last and not action:
        return no_update, no_update
    return status_payload(tw, note), (no_update if now == last else now)


def shell_stores() -> list:
    """The shell's clock, the two stores it feeds (status for the control bar, the last beat) and the
    control bar's pending answer."""
    return [dcc.Interval(id="shell-tick", interval=TICK_MS), dcc.Store(id="shell-status"), dcc.Store(id=BEAT),
            dcc.Store(id=TICKET)]


def page_tick(prefix: str, output: dict, state: dict | None = None, *,
              initial_duplicate: bool = False) -> Callable:
    """Declare a page's live callback: run on the shell's beat (and once when the page mounts), with
    named outputs. The decorated function gets a `Tick` and the named states and returns a dict of
    the outputs it sends (any left out are no_update; its cursor too, unless it returns "cursor").
    The returned function can be called directly as ``fn(beat, choice, cursor, **state)``."""
    outputs = {**output, "cursor": Output(f"{prefix}-cursor", "data")}
    inputs = {"beat": Input(beat_id(prefix), "data"), "choice": State("ctl-twin", "data"),
              "cursor": State(f"{prefix}-cursor", "data"), **(state or {})}

    def decorate(fn: Callable) -> Callable:
        def run(beat=None, choice=None, cursor=None, **states) -> dict:
            t = Tick.read(cursor, choice)
            sent = fn(t, **states)
            out = {k: [no_update] * len(o) if isinstance(o, list) else no_update for k, o in outputs.items()}
            out["cursor"] = t.cursor if t.changed else no_update
            out.update(sent)
            return out
        run.__name__, run.__qualname__, run.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        dash.callback(output=outputs, inputs=inputs,
                      prevent_initial_call="initial_duplicate" if initial_duplicate else False)(run)
        return run
    return decorate


def page_stores(prefix: str) -> list:
    """A page's beat store (fed by the shell) and the store it keeps its cursor in (what it has drawn)."""
    return [dcc.Store(id=beat_id(prefix)), dcc.Store(id=f"{prefix}-cursor")]
