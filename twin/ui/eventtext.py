"""Engine event lines in the viewer's language, translated at the UI boundary.

The engine logs English (`Engine.log`); a line meant for the dashboard is a catalog msgid marked
with N_, and with values it is a template the event keeps with them ({"template", "args"}). Here
the template is translated and filled; values that are words are translated too (a fault kind,
a refused command and its reason); identifiers (part ids, instance names) stay as they are.
A line of an unknown form is shown as the engine wrote it."""
from __future__ import annotations

import re

from twin.ui.errors import explain
from twin.engine.faults import KINDS as FAULT_KINDS
from twin.ui.lang import N_, _

# the event's kind, shown as a tag before the line
KINDS = {"start": N_("start"), "schedule": N_("scheduled"), "fault": N_("fault"), "detect": N_("detected"),
         "recover": N_("recovered"), "repair": N_("repaired"),
         "partition": N_("partition"), "rate": N_("rate"), "policy": N_("policy"),
         "error": N_("error"), "reject": N_("rejected"), "trace": N_("trace"), "note": N_("note"),
         "copool": N_("co-pool")}

# a refused command, by its name (twin.engine.commands)
COMMANDS = {"rate": N_("arrival rate"), "load": N_("load"), "fault": N_("fault"), "policy": N_("fault policy"),
            "random": N_("random failures"), "event": N_("note")}


def kind(e: dict) -> str:
    k = e.get("kind", "")
    return _(KINDS[k]) if k in KINDS else k


# where a co-pool group goes (twin.cloud.copool)
MOVES = {"training": N_("training"), "serving": N_("serving")}

# who did a shared action (twin.ui.guard.actor, the lessons, the session): the words in it
WHO = {"viewer": N_("viewer"), "instructor": N_("instructor"), "system": N_("system"), "lesson": N_("lesson")}
_WHO = re.compile(r"\b(" + "|".join(WHO) + r")\b")


def _value(name: str, v):
    if isinstance(v, list):                     # a list of lines (twin.i18n.said)
        return _(", ").join(said(x) for x in v)
    if getattr(v, "template", None):
        return said(v)
    if name == "kind" and v in FAULT_KINDS:
        return _(FAULT_KINDS[v].label)
    if name == "cmd" and v in COMMANDS:
        return _(COMMANDS[v])
    if name == "msg":
        return explain(v)
    if name == "to" and v in MOVES:
        return _(MOVES[v])
    if name == "about":                         # a scenario's description (catalog data, extracted)
        return _(v)
    if name in ("src", "plane") and isinstance(v, str):       # ems / obs, ub / rdma: acronyms
        return v.upper()
    return v


def line(e: dict) -> str:
    """The event's text in the viewer's language."""
    template, args = e.get("template"), e.get("args")
    if not (isinstance(template, str) and isinstance(args, dict)):
        return _(str(e.get("message", "")))
    try:
        return _(template) % {k: _value(k, v) for k, v in args.items()}
    except (KeyError, TypeError, ValueError):       # a catalog text that does not fit its values
        return str(e.get("message", ""))


def said(x) -> str:
    """A control's confirmation (`twin.i18n.Said`) in the viewer's language; plain text as it is."""
    return line({"message": str(x), "template": x.template, "args": x.args}) if getattr(x, "template", None) else str(x)


def action(a: dict) -> dict:
    """A shared-action log entry (`Twin.actions`) with its who and what in the viewer's language."""
    what = line({"message": a.get("what", ""), "template": a.get("template"), "args": a.get("args")})
    return {k: v for k, v in a.items() if k not in ("template", "args")} | {
        "what": what, "who": _WHO.sub(lambda m: _(WHO[m[1]]), str(a.get("who", "")))}


def once(evs) -> list:
    """The events with each fault shown once: the "scheduled now" line of a fault that struck in the
    same instant is dropped (its strike line says the same); a fault scheduled ahead keeps both."""
    evs = list(evs or ())
    struck = {(e.get("t"), (e.get("args") or {}).get("id")) for e in evs if e.get("kind") == "fault"}
    return [e for e in evs if not (e.get("kind") == "schedule" and (e.get("args") or {}).get("at") is None
                                   and (e.get("t"), (e.get("args") or {}).get("id")) in struck)]


def latest(evs, kind_: str, arg: str) -> str | None:
    """The newest event line of a kind naming `arg` among its values, in the viewer's language (the
    UB partition's line names the cut-off instances; a KV transfer waiting for a path does not)."""
    ev = next((e for e in reversed(list(evs or ())) if e.get("kind") == kind_ and arg in (e.get("args") or {})),
              None)
    return line(ev) if ev else None
