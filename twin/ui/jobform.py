"""Start, follow and cancel a page's background job of the job pool (Explorer's sweep, the Region
run, Cloud's comparison, Compare's engine runs, a fault's what-if). The pages differ in their forms
and their words, not in how a refusal, a queued job, its progress, a cancel or another browser's job
id reads: that is kept here once, so they cannot drift apart. A page keeps its job in a store, as
the id or as a dict holding it under "job"."""
from __future__ import annotations

from typing import Callable

import dash
from dash import Input, Output, State, html, no_update

from twin.live import jobs
from twin.model.config import CatalogError
from twin.ui import guard
from twin.ui.errors import explain
from twin.ui.lang import _

MAX_MESSAGE = 300        # characters of a refusal shown under the form
ACTIVE = ("queued", "running")


def buttons(prefix: str, start_label: str) -> list:
    """The form's Start and Cancel, with the ids `callbacks` declares (`{prefix}-start`, `-cancel`)."""
    return [html.Button(start_label, id=f"{prefix}-start", className="btn btn-primary", n_clicks=0),
            html.Button(_("Cancel"), id=f"{prefix}-cancel", className="btn", n_clicks=0)]


def status(prefix: str) -> list:
    """The job's message line and progress bar (`{prefix}-msg`, `-progress`, `-progress-text`)."""
    return [html.Div(id=f"{prefix}-msg", className="ctl-msg", role="status"),
            html.Div([html.Progress(id=f"{prefix}-progress", value="0", max="1"),
                      html.Span(id=f"{prefix}-progress-text", className="hint")], className="ctl-row")]


def viewer(secret) -> str:
    """The id the job pool knows this browser by (its jobs are its own)."""
    return guard.client(secret)[0]


def job_id(store) -> str | None:
    """The job id a page's store holds (the id, or {"job": id}); None if absent or forged."""
    return guard.ident(store.get("job") if isinstance(store, dict) else store)


def view(store, secret) -> dict | None:
    """This browser's job (another browser's id, or a forged one, reads as absent)."""
    return jobs.pool().view(job_id(store), viewer(secret))


def start(submit: Callable[..., object], form: tuple, secret, queued: str | Callable[[object], str]) -> tuple:
    """(job store, message, message class, tick disabled) of pressing Start: `submit(*form, viewer,
    addr)` checks the form, queues the job and returns what the page keeps of it; `queued` is the
    message (or gives it from that). A ValueError or CatalogError (a jobs.JobRefused is a
    ValueError) reads as one line under the form and leaves the job and the tick as they were."""
    try:
        job = submit(*form, *guard.client(secret))
    except (ValueError, CatalogError) as exc:
        return no_update, *refusal(exc), no_update
    return job, queued(job) if callable(queued) else queued, "ctl-msg msg-ok", False


def refusal(exc) -> tuple[str, str]:
    """(message, class) of a form or job refused: its reason on one bounded line."""
    return " ".join(explain(exc).split())[:MAX_MESSAGE], "ctl-msg msg-error"


def progress(job: dict, counted: str) -> tuple[str, str, str]:
    """(bar value, bar max, text) of a job's progress bar: its place in the queue while queued;
    `counted` ("3 of 8 runs") and the CPU it used while running; `counted` once it ended."""
    total = str(job["total"])
    if job["state"] == "queued":
        return "0", total, _("queued: %(pos)s in line, about %(s)s s of work ahead; estimated %(cost)s CPU-s") % {
            "pos": job["position"], "s": f"{job['wait_s']:,.0f}", "cost": f"{job['cost_s']:,.0f}"}
    if job["state"] == "running":
        return str(job["done"]), total, counted + " · " + _("%(used)s of at most %(cap)s CPU-s") % {
            "used": f"{job['cpu_s']:,.0f}", "cap": f"{job['ceiling_s']:,.0f}"}
    if job["state"] == "done":
        return total, total, counted + " — " + _("done")
    return str(job["done"]), total, counted


def ended(job: dict, cancelled: str, failed: str) -> tuple[str, str]:
    """(message, class) of a job that was cancelled (`cancelled`) or failed (`failed`, with
    %(why)s for the reason)."""
    if job["state"] == "cancelled":
        return cancelled, "ctl-msg msg-ok"
    return failed % {"why": explain(job["message"])}, "ctl-msg msg-error"


def cancel(store, secret, cancelled: str, none: str) -> tuple[str, str]:
    """(message, class) of pressing Cancel: `cancelled` if this browser's queued or running job was
    cancelled, else `none` (no such job of this browser)."""
    if jobs.pool().cancel(job_id(store), viewer(secret)):
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
