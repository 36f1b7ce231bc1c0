"""Callback payload checks and the client identity, shared by app.py and the pages.

Everything a callback receives comes from the browser and may be forged: these helpers turn a
value of the wrong type, size or range into "absent" (or a ControlError the page shows), so a bad
payload never reaches the engine. `on_error` is the app-wide last resort: a callback that still
raises is answered with a message in the page and one log line (no HTTP 500, no traceback).
"""
from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
from functools import lru_cache

import dash
import flask

from twin.live import session

log = logging.getLogger(__name__)

MAX_TEXT = 200                 # longest free-text field accepted (ids, times, tokens)
_ID = re.compile(r"^[A-Za-z0-9_.:/=+-]{1,200}$")
PROXIES_ENV = "TWIN_TRUSTED_PROXIES"     # e.g. "127.0.0.1,10.0.0.0/8": the reverse proxies in front
MAX_FORWARDED = 1024                     # characters of X-Forwarded-For read (a chain of a few hops)
HOPS_ENV = "TWIN_PROXY_HOPS"             # how many trusted proxies in a row (nginx alone: 1)
MAX_HOPS = 8


@lru_cache(maxsize=4)
def _trusted(setting: str) -> tuple:
    """The networks named in TWIN_TRUSTED_PROXIES (entries that are not addresses are skipped)."""
    nets = []
    for part in setting.split(","):
        try:
            nets.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            if part.strip():
                log.warning("%s: %r is not an address or network; ignored", PROXIES_ENV, part.strip()[:60])
    return tuple(nets)


def _is_trusted(addr: str | None, nets: tuple) -> bool:
    try:
        ip = ipaddress.ip_address(addr or "")
    except ValueError:
        return False
    return any(ip in n for n in nets)


def trusted_proxy(addr: str | None) -> bool:
    """Whether `addr` is one of the reverse proxies named in TWIN_TRUSTED_PROXIES."""
    return _is_trusted(addr, _trusted(os.environ.get(PROXIES_ENV, "")))


def proxy_hops() -> int:
    """How many trusted proxies stand in a row in front of the app (TWIN_PROXY_HOPS, 1 to 8; 1 if unset
    or not such a number)."""
    v = os.environ.get(HOPS_ENV, "1").strip()
    return int(v) if v.isdigit() and 1 <= int(v) <= MAX_HOPS else 1


def remote_address() -> str | None:
    """The viewer's address, read right to left from the hop that connected: the direct peer; if it
    is a trusted proxy, the X-Forwarded-For entry it appended (the address that connected to it); if
    that one is a trusted proxy too, the entry before it, and so on, at most TWIN_PROXY_HOPS entries.
    An entry is believed only when the hop that delivered it is a trusted proxy, and never more
    entries than there are proxies, so a viewer whose own address lies in a trusted range cannot pass
    itself off as a proxy to forge an address. A malformed entry stops the walk at the hop that
    delivered it."""
    if not flask.has_request_context():
        return None
    addr = flask.request.remote_addr
    nets = _trusted(os.environ.get(PROXIES_ENV, ""))
    hops = [h.strip() for h in flask.request.headers.get("X-Forwarded-For", "")[:MAX_FORWARDED].split(",")]
    hops = [h for h in hops if h]
    for _ in range(proxy_hops()):
        if not hops or not _is_trusted(addr, nets):
            break
        try:
            addr = str(ipaddress.ip_address(hops.pop()))
        except ValueError:
            break
    return addr


def client(secret) -> tuple[str, str | None]:
    """(client id, remote address) of the browser behind this callback (see session.client_id):
    the one place the address is read."""
    addr = remote_address()
    return session.client_id(secret, addr), addr


def choice(v) -> str | None:
    """The twin a tab views: "shared" or a sandbox id; anything else means the shared twin."""
    return v if isinstance(v, str) and (v == session.SHARED or re.match(r"^sb-[0-9a-f]{1,32}$", v)) else None


def credential(v) -> str | None:
    """The credential in this tab's ctl-token store ({"credential": str, "ok": true}, written by a
    successful unlock: twin.live.gate), or None. The instructor token itself is never kept in a browser."""
    c = v.get("credential") if isinstance(v, dict) else None
    return c if isinstance(c, str) and len(c) <= MAX_TEXT else None


def unlocked(v) -> bool:
    """Whether this tab holds a credential the gate accepts (the instructor's controls are open)."""
    return session.sessions().locked and session.sessions().gate.check(credential(v))


def viewer(v) -> str | None:
    """The anonymous display id (shown in the shared log, so short and plain)."""
    return v if isinstance(v, str) and re.match(r"^[A-Za-z0-9]{1,12}$", v) else None


def actor(viewer_v, token_v, secret) -> dict:
    """who / credential / client of an action, from the browser's stores (each checked): the
    keyword arguments of Twin.control. "instructor" only with a credential the gate accepts."""
    name = viewer(viewer_v)
    who = f"viewer {name}" if name else "viewer"
    return {"who": f"instructor ({who})" if unlocked(token_v) else who, "credential": credential(token_v),
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
        from twin.ui.lang import _     # here: lang imports teach, which imports this module
        dash.set_props("ctl-msg", {"children": _("Not applied: the request carried values this page does "
                                                 "not accept; reload the page if it persists"),
                                   "className": "ctl-msg msg-error"})
    except Exception:   # no callback context (called directly): nothing to show
        pass
    return None
