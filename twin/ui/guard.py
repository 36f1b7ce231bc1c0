"""Callback payload checks and the client identity, shared by app.py and the pages.

Everything a callback receives comes from the browser and may be forged: these helpers turn a
value of the wrong type, size or range into "absent" (or a ControlError the page shows), so a bad
payload never reaches the engine. `on_error` is the app-wide last resort: a callback that still
raises is answered with a message in the page and one log line (no HTTP 500, no traceback).
"""
from __future__ import annotations

import logging
import math
import re

import dash
import flask

from twin import session as S

log = logging.getLogger(__name__)

MAX_TEXT = 200                 # longest free-text field accepted (ids, times, tokens)
_ID = re.compile(r"^[A-Za-z0-9_.:/=+-]{1,200}$")


def client(secret) -> tuple[str, str | None]:
    """(client id, remote address) of the browser behind this callback (see session.client_id)."""
    addr = flask.request.remote_addr if flask.has_request_context() else None
    return S.client_id(secret, addr), addr


def choice(v) -> str | None:
    """The twin a tab views: "shared" or a sandbox id; anything else means the shared twin."""
    return v if isinstance(v, str) and (v == S.SHARED or re.match(r"^sb-[0-9a-f]{1,32}$", v)) else None


def token(v) -> dict | None:
    """The unlocked-token store: {"token": str, "ok": bool} or nothing."""
    if isinstance(v, dict) and isinstance(v.get("token"), str) and len(v["token"]) <= MAX_TEXT:
        return {"token": v["token"], "ok": v.get("ok") is True}
    return None


def tok(v) -> str | None:
    t = token(v)
    return t["token"] if t else None


def viewer(v) -> str | None:
    """The anonymous display id (shown in the shared log, so short and plain)."""
    return v if isinstance(v, str) and re.match(r"^[A-Za-z0-9]{1,12}$", v) else None


def actor(viewer_v, token_v, secret) -> dict:
    """who / token / client of a shared action, from the browser's stores (each checked)."""
    t, name = token(token_v), viewer(viewer_v)
    who = f"viewer {name}" if name else "viewer"
    return {"who": f"instructor ({who})" if t and t["ok"] else who, "token": tok(token_v),
            "client": client(secret)[0]}


def text(v, maxlen: int = MAX_TEXT) -> str | None:
    """A free-text field: a short string (numbers are turned into their text), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return repr(v) if math.isfinite(v) else None
    return v if isinstance(v, str) and len(v) <= maxlen else None


def ident(v) -> str | None:
    """A topology or option id (letters, digits and / - _ . : = +)."""
    return v if isinstance(v, str) and _ID.match(v) else None


def number(v) -> float | None:
    """A finite number (or numeric text), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and len(v) <= 40:
        try:
            v = float(v)
        except ValueError:
            return None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def store(v) -> dict:
    """A page's own cursor store: a dict, or empty (a full redraw) if it was tampered with."""
    return v if isinstance(v, dict) else {}


def on_error(err: Exception):
    """App-wide on_error: the viewer sees a one-line message; the log gets one line (no traceback)."""
    try:
        where = dash.ctx.triggered_id
    except Exception:   # no callback context
        where = "?"
    log.warning("callback %s refused a payload: %s: %s", str(where)[:80], type(err).__name__,
                " ".join(str(err).split())[:200])
    try:
        from .lang import _     # here: lang imports teach, which imports this module
        dash.set_props("ctl-msg", {"children": _("Not applied: the request carried values this page does "
                                                 "not accept; reload the page if it persists"),
                                   "className": "ctl-msg msg-error"})
    except Exception:   # no callback context (called directly): nothing to show
        pass
    return None
