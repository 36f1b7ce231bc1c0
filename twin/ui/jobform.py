"""Start, cancel and read a page's background job of the job pool (Explorer's sweep, the Region page's
run). The pages differ in their forms and their words, not in how a refusal, a queued job, a cancel or
another browser's job id reads: that is kept here once, so the two cannot drift apart."""
from __future__ import annotations

from typing import Callable

from dash import no_update

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
