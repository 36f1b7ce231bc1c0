"""Engine event lines in the viewer's language, translated at the UI boundary.

The engine logs English (`Engine.log`); a line meant for the dashboard is a catalog msgid marked
with N_, and with values it is a template the event keeps with them ({"template", "args"}). Here
the template is translated and filled; values that are words are translated too (a fault kind,
a refused command and its reason); identifiers (part ids, instance names) stay as they are.
A line of an unknown form is shown as the engine wrote it."""
from __future__ import annotations

from .errors import explain
from .faultview import KIND_LABEL
from .lang import N_, _

# the event's kind, shown as a tag before the line
KINDS = {"start": N_("start"), "schedule": N_("scheduled"), "fault": N_("fault"), "detect": N_("detected"),
         "recover": N_("recovered"), "partition": N_("partition"), "rate": N_("rate"), "policy": N_("policy"),
         "error": N_("error"), "reject": N_("rejected"), "trace": N_("trace"), "note": N_("note"),
         "copool": N_("co-pool")}

# a refused command, by its name (twin.engine.commands)
COMMANDS = {"rate": N_("arrival rate"), "load": N_("load"), "fault": N_("fault"), "policy": N_("fault policy"),
            "random": N_("random failures"), "event": N_("note")}


def kind(e: dict) -> str:
    k = e.get("kind", "")
    return _(KINDS[k]) if k in KINDS else k


def _value(name: str, v):
    if name == "kind" and v in KIND_LABEL:
        return _(KIND_LABEL[v])
    if name == "cmd" and v in COMMANDS:
        return _(COMMANDS[v])
    if name == "msg":
        return explain(v)
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


def latest(evs, kind_: str, arg: str) -> str | None:
    """The newest event line of a kind naming `arg` among its values, in the viewer's language (the
    UB partition's line names the cut-off instances; a KV transfer waiting for a path does not)."""
    ev = next((e for e in reversed(list(evs or ())) if e.get("kind") == kind_ and arg in (e.get("args") or {})),
              None)
    return line(ev) if ev else None
