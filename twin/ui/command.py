"""A page's command callback, the one shape every control shares: the browser stores that say who
acts and on which twin (ACTOR), a value refused before it is sent (`refused`: one line), and the
send, whose line says the engine's answer (`Actor.send`, through twin.ui.answer). Pages differ in
what they check and send, not in these, so a lock, a sandbox owner or a rate limit reads the same
on every page."""
from __future__ import annotations

from typing import Callable

from dash import State

from twin.ui import answer
from twin.ui import eventtext
from twin.ui import guard
from twin.ui.polling import twin_for

# the stores of the twin this tab views, its instructor credential, its display id and its secret,
# in the order Actor takes them
ACTOR = (State("ctl-twin", "data"), State("ctl-token", "data"), State("ctl-viewer", "data"),
         State("ctl-secret", "data"))
refused = answer.refused         # (text, class) of a value refused before it was sent
follow = answer.follow           # declares the callback that shows the engine's later answer


def said(ticket) -> str:
    """The engine's confirmation of an accepted command, in the viewer's language."""
    return eventtext.said(ticket.said)


class Actor:
    """The twin a callback acts on (`twin`) and who acts (`who`: Twin.send's keyword arguments), from
    the ACTOR stores, each checked (twin.ui.guard); `ticket` is the last command sent."""

    def __init__(self, choice, token, viewer, secret):
        self.twin = twin_for(choice)[0]
        self.who = guard.actor(viewer, token, secret)
        self.ticket = None

    def send(self, action: str, value, store: str, what: Callable = said) -> tuple[str, str]:
        """Send `action` and return the page's message line (`answer`)."""
        self.ticket = self.twin.send(action, value, **self.who)
        return self.answer(store, what)

    def answer(self, store: str, what: Callable = said) -> tuple[str, str]:
        """The message line of the last command sent: refused, applied (`what(ticket)`), or waiting,
        with the pending ticket kept in `store` until the engine answers."""
        ticket = self.ticket
        return answer.sent(self.twin, ticket, lambda: what(ticket), store)
