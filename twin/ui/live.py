"""The polling contract shared by every page.

Each page keeps a small *cursor* in a dcc.Store: which twin and run it drew, the snapshot version
and the last history time it has, and the status revision. On every tick `Tick.read()` says what
to send: nothing (same version), the new points only, or everything (first load, another twin,
or a reset). Pages never mutate module state; the session registry owns the twins.
"""
from __future__ import annotations

from dataclasses import dataclass

from dash import no_update

from twin import session as S

from . import figures, guard

ACTIONS_SHOWN = 8


def twin_for(choice: str | None) -> tuple[S.Twin, str]:
    """The twin a viewer picked (browser store), or the shared one with a note if it is gone."""
    reg = S.sessions()
    tw = reg.get(guard.choice(choice))
    if tw is None:
        return reg.shared(), ("that private sandbox is gone (stopped after "
                              f"{reg.ttl_s / 60:.0f} min without an action); showing the shared twin")
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


def status_payload(tw: S.Twin, note: str = "") -> dict:
    st = tw.status()
    st["actions"] = tw.actions(ACTIONS_SHOWN) if tw.shared else []
    st["note"] = note
    st["sandboxes"] = len(S.sessions().sandboxes())
    st["max_sandboxes"] = S.sessions().max_sandboxes
    return st


@dataclass
class Tick:
    """What a page's interval callback should send for one tick."""
    twin: S.Twin
    snap: object
    mode: str            # "none" | "extend" | "full"
    since_t: float | None
    cursor: dict
    status: object      # dict or no_update
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.mode != "none"

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
        status_changed = (not same_twin or cur.get("rev") != tw.rev or cur.get("v") != version
                          or bool(note))
        status = status_payload(tw, note) if status_changed else no_update
        new_cursor = {"twin": tw.key, "run": tw.run, "v": version, "t": t_last, "rev": tw.rev}
        return cls(tw, snap, mode, cur.get("t") if mode == "extend" else None, new_cursor, status, note)

    def strip(self, spec: figures.StripSpec, height: int = 230):
        """(figure, extendData) outputs for a strip chart."""
        hist = getattr(self.snap, "history", None)
        if self.mode == "full":
            return figures.strip_figure(spec, hist, height=height), no_update
        if self.mode == "extend":
            ext = figures.extend(spec, hist, self.since_t)
            return no_update, (ext if ext is not None else no_update)
        return no_update, no_update
