"""Start, cancel and read a page's background job of the job pool (Explorer's sweep, the Region page's
run). The pages differ in their forms and their words, not in how a refusal, a queued job, a cancel or
another browser's job id reads: that is kept here once, so the two cannot drift apart."""
from __future__ import annotations

from typing import Callable

import dash
from dash import Input, Output, State, no_update

from twin.live import jobs
from twin.model.config import CatalogError
from twin.ui import guard
from twin.ui.errors import explain

MAX_MESSAGE = 300        # characters of a refusal shown under the form


def viewer(secret) -> str:
    """The id the job pool knows this browser by (its jobs are its own)."""
    return guard.client(secret)[0]


def view(job_id, secret) -> dict | None:
    """This browser's job (another browser's id, or a forged one, reads as absent)."""
    return jobs.pool().view(guard.ident(job_id), viewer(secret))


def start(submit: Callable[..., str], form: tuple, secret, queued: str) -> tuple:
    """(job id, message, message class, tick disabled) of pressing Start: `submit(*form, viewer,
    addr)` checks the form and queues the job; a ValueError or CatalogError (a jobs.JobRefused is
    a ValueError) reads as one line under the form and leaves the job and the tick as they were."""
    try:
        job = submit(*form, *guard.client(secret))
    except (ValueError, CatalogError) as exc:
        return no_update, " ".join(explain(exc).split())[:MAX_MESSAGE], "ctl-msg msg-error", no_update
    return job, queued, "ctl-msg msg-ok", False


def cancel(job_id, secret, cancelled: str, none: str) -> tuple[str, str]:
    """(message, class) of pressing Cancel: `cancelled` if this browser's queued or running job was
    cancelled, else `none` (no such job of this browser)."""
    if jobs.pool().cancel(guard.ident(job_id), viewer(secret)):
        return cancelled, "ctl-msg msg-ok"
    return none, "ctl-msg msg-error"


def callbacks(prefix: str, fields: tuple[str, ...], submit: Callable[..., str], queued: Callable[[], str],
              cancelled: Callable[[], str], none: Callable[[], str]) -> tuple[Callable, Callable]:
    """Declare a page's Start and Cancel callbacks over its ids `{prefix}-start`, `-cancel`, `-job`,
    `-msg` and `-tick`; Start submits the values of `{prefix}-{field}` for `fields` in order. The
    texts are functions, so they are read in the viewer's language. Returns (on_start, on_cancel),
    called as on_start(n_clicks, *values, secret) and on_cancel(n_clicks, job id, secret)."""
    @dash.callback(
        Output(f"{prefix}-job", "data"), Output(f"{prefix}-msg", "children"), Output(f"{prefix}-msg", "className"),
        Output(f"{prefix}-tick", "disabled"), Input(f"{prefix}-start", "n_clicks"),
        *(State(f"{prefix}-{f}", "value") for f in fields), State("ctl-secret", "data"),
        prevent_initial_call=True,
    )
    def on_start(_n, *values):
        *form, secret = values
        return start(submit, tuple(form), secret, queued())

    @dash.callback(
        Output(f"{prefix}-msg", "children", allow_duplicate=True),
        Output(f"{prefix}-msg", "className", allow_duplicate=True),
        Input(f"{prefix}-cancel", "n_clicks"), State(f"{prefix}-job", "data"), State("ctl-secret", "data"),
        prevent_initial_call=True,
    )
    def on_cancel(_n, job_id, secret):
        return cancel(job_id, secret, cancelled(), none())

    return on_start, on_cancel
