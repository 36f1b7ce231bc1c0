"""The answer to a control, on the page that sent it (twin.engine.commands.Ticket).

A callback that sends an action (`Twin.send`) shows `sent(...)`: "Not applied: why" for a refusal
at the edge, "... applied at t = ..." once the engine accepted it, or, while the engine thread has
not answered yet, "... sent; waiting for the twin's answer" with the ticket kept in a page store.
`follow(...)` declares the callback that, on the page's next beats (a ticket answered bumps the
twin's status revision, so the beat changes), replaces that line with the engine's answer: applied
at t = ..., or refused with the engine's reason, in the viewer's language.
"""
from __future__ import annotations

import dash
from dash import Input, Output, State, no_update

from twin.ui import guard
from twin.ui.errors import explain
from twin.ui.lang import _
from twin.ui.polling import twin_for

WAIT_S = 0.4          # a callback waits this long for the engine thread (it answers within one 0.2 s loop)
MAX_WHAT = 600        # characters of the sender's wording kept in the browser until the answer


def _where(tw, t) -> str:
    at = f"{t:,.1f}" if t is not None else "?"
    return (_("applied to the shared twin at t = %(t)s s") if tw.shared
            else _("applied to your sandbox at t = %(t)s s")) % {"t": at}


def refused(why) -> tuple[str, str]:
    """(text, class) of a control refused: at the edge, by the engine, or before it was sent (`why`:
    the reason, or the exception that carries it)."""
    return _("Not applied: %(why)s") % {"why": explain(why)}, "ctl-msg msg-error"


def line(tw, ticket, what: str) -> tuple[str, str]:
    """(text, class) of the message line for an answered or pending ticket."""
    if ticket.refused:
        return refused(ticket.reason)
    if ticket.accepted:
        return f"{what} — {_where(tw, ticket.t)}", "ctl-msg msg-ok"
    return _("%(what)s — sent; waiting for the twin's answer") % {"what": what}, "ctl-msg msg-wait"


def sent(tw, ticket, what, store: str) -> tuple[str, str]:
    """The message line right after sending (`what` in the viewer's language, or a callable giving
    it, called only if the ticket was not refused); a ticket still pending goes to `store`."""
    if not ticket.done:
        ticket.wait(WAIT_S)
    if ticket.refused:
        return line(tw, ticket, "")
    what = what() if callable(what) else what
    if not ticket.done:
        dash.set_props(store, {"data": {"id": ticket.id, "what": what[:MAX_WHAT]}})
    return line(tw, ticket, what)


def follow(msg: str, store: str, beat: Input) -> None:
    """Declare the callback that shows the answer to the ticket in `store` on the line `msg`."""
    @dash.callback(Output(msg, "children", allow_duplicate=True), Output(msg, "className", allow_duplicate=True),
                   Output(store, "data", allow_duplicate=True),
                   beat, State(store, "data"), State("ctl-twin", "data"), prevent_initial_call=True)
    def answer(_beat, data, choice):
        return answered(data, choice)


def answered(data, choice) -> tuple:
    """(text, class, store) once the ticket in `data` is answered; no_update while it is pending."""
    data = guard.store(data)
    tid, what = data.get("id"), guard.text(data.get("what"), MAX_WHAT)
    if type(tid) is not int or what is None:
        return no_update, no_update, no_update
    tw = twin_for(choice)[0]
    ticket = tw.ticket(tid)
    if ticket is None:                  # another twin is viewed now, or the answer is long gone
        return no_update, no_update, None
    if not ticket.done:
        return no_update, no_update, no_update
    return (*line(tw, ticket, what), None)
