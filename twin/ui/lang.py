"""UI text in the viewer's language: `_("...")` translates a catalog message into the language of
the current request (`?lang=`, else the `twin_lang` cookie, else English: `request_lang`), so layouts
and callbacks alike render in the viewer's language. `N_` only marks a module-level string for
extraction (`python -m twin.i18n update`); translate it with `_` where it is shown."""
from __future__ import annotations

import flask

from twin import i18n
from twin.i18n import terms

__all__ = ["N_", "_", "num", "unit", "unit_or_text", "title", "system_title", "request_lang"]

COOKIE = "twin_lang"
COOKIE_AGE_S = 365 * 86400


def request_lang() -> str:
    """The viewer's language for this request: `?lang=` on it, else the cookie, else English."""
    if not flask.has_request_context():
        return i18n.DEFAULT
    arg = flask.request.args.get("lang")
    if arg is not None:
        try:
            return i18n.check_lang(arg)
        except i18n.LangError:
            pass
    return i18n.lang_or_default(flask.request.cookies.get(COOKIE))


def _(msgid: str) -> str:
    """The message in the viewer's language ('' stays '': gettext would return the catalog header)."""
    return i18n.gettext(request_lang())(msgid) if msgid else msgid


def N_(msgid: str) -> str:
    return msgid


def num(value, digits: int = 0) -> str:
    """A number in the viewer's locale format (see `twin.i18n.number`)."""
    return i18n.number(value, request_lang(), digits)


def unit(symbol: str) -> str:
    """A unit in the viewer's language by the termbase's rule (`twin.i18n.terms`): "ms" -> "毫秒"."""
    return terms.unit(symbol, request_lang())


def unit_or_text(text: str) -> str:
    """An axis or card label that is either a unit ("tok/s") or a catalog message ("requests")."""
    return unit(text) if terms.is_unit(text) else _(text)


def title(name: str):
    """A page's browser-tab title in the viewer's language (Dash calls it on every navigation)."""
    return lambda **_kw: f"{_(name)} · CloudMatrix Twin"


def system_title(info) -> str:
    """A system's one-line title (`SystemInfo.title`, English from the engine) in the viewer's language."""
    if request_lang() == i18n.DEFAULT:
        return info.title
    s = info.topology.system
    args = {"name": info.name, "nodes": s.nodes, "npus": s.npus_per_node, "acc": info.accelerator,
            "subplanes": s.subplanes, "chip": s.accelerator.upper()}
    if info.supernode:
        return _("%(name)s: supernode of %(nodes)s nodes x %(npus)s %(acc)ss, %(subplanes)s UB sub-planes") % args
    return _("%(name)s: GPU cluster of %(nodes)s servers x %(npus)s %(chip)s GPUs, NVLink inside a server, "
             "RDMA between servers") % args
