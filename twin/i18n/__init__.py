"""Languages of the dashboard: gettext catalogs (Babel) and locale-aware numbers.

The catalogs are `locale/<lang>/LC_MESSAGES/messages.po`, the files translators edit (msgid =
the English text). They are compiled to the gettext binary form in memory on first use (Babel's
`write_mo`), so there is no build step and no stale `.mo` file on a fresh machine. English is the
source language: an untranslated or unknown message shows its msgid.

    _ = gettext("zh"); _("Lessons")          -> "课程"
    number(1943.2, "zh", 1)                  -> "1,943.2"

`python -m twin.i18n update` re-extracts every message (see `catalog.py`) into the template and the
catalogs; `check` says what is missing. This package never imports dash.
"""
from __future__ import annotations

import gettext as _gettext
import io
from functools import lru_cache
from pathlib import Path
from typing import Callable

from babel import Locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal, format_percent

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "messages"
LANGS = ("en", "zh")              # English (source) and Simplified Chinese
DEFAULT = "en"
HTML_LANG = {"en": "en", "zh": "zh"}             # the <html lang> value (BCP 47)
BABEL_LOCALE = {"en": "en_US", "zh": "zh_Hans_CN"}
NAMES = {"en": "English", "zh": "中文"}          # each language named in itself (the toggle)


class LangError(ValueError):
    """An unknown language code; the message lists the allowed ones."""


def check_lang(value) -> str:
    """A language code from a URL, cookie or store: 'en' or 'zh' (case and region tolerated:
    'zh-CN', 'ZH'), else LangError naming the allowed codes."""
    if isinstance(value, str):
        code = value.strip().lower().replace("_", "-").split("-")[0]
        if code in LANGS:
            return code
    shown = str(value)[:24] if value is not None else "(empty)"
    raise LangError(f"lang = {shown!r}: allowed {' or '.join(LANGS)}")


def lang_or_default(value) -> str:
    """check_lang, falling back to English (for values that are only preferences, e.g. a cookie)."""
    try:
        return check_lang(value)
    except LangError:
        return DEFAULT


def po_path(lang: str) -> Path:
    return LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


@lru_cache(maxsize=len(LANGS))
def translations(lang: str) -> _gettext.NullTranslations:
    """The gettext translations of `lang`, compiled from its .po in memory (once per process)."""
    lang = check_lang(lang)
    path = po_path(lang)
    if not path.exists():
        return _gettext.NullTranslations()
    with path.open("rb") as fh:
        cat = read_po(fh, locale=BABEL_LOCALE[lang])
    buf = io.BytesIO()
    write_mo(buf, cat, use_fuzzy=False)
    buf.seek(0)
    return _gettext.GNUTranslations(buf)


def gettext(lang: str) -> Callable[[str], str]:
    """The `_` function of a language: _(msgid) -> translated text (msgid if untranslated)."""
    return translations(lang).gettext


def number(value, lang: str, digits: int = 0) -> str:
    """A number in the locale's format with exactly `digits` decimals; '–' if missing."""
    if value is None or value != value:
        return "–"
    fmt = "#,##0" + ("." + "0" * digits if digits > 0 else "")
    return format_decimal(value, format=fmt, locale=BABEL_LOCALE[check_lang(lang)])


def percent(fraction, lang: str, digits: int = 0) -> str:
    """A fraction (0.79) as a locale percentage ('79%')."""
    if fraction is None or fraction != fraction:
        return "–"
    fmt = "#,##0" + ("." + "0" * digits if digits > 0 else "") + "%"
    return format_percent(fraction, format=fmt, locale=BABEL_LOCALE[check_lang(lang)])


def language_name(lang: str) -> str:
    """The language's own name from CLDR (e.g. '中文'), for screen readers and titles."""
    return Locale.parse(BABEL_LOCALE[check_lang(lang)]).get_display_name() or NAMES[lang]


def N_(msgid: str) -> str:
    """Mark an English text for extraction without translating it (engine and model code that
    must not depend on the viewer: the UI translates it with `_` where it is shown)."""
    return msgid


class Said(str):
    """An English line that keeps its catalog template and values (made by `said`): the CLI, logs
    and JSON see the English; the dashboard shows it in the viewer's language (`twin.ui.eventtext`)."""
    template: str = ""
    args: dict = {}


def said(template: str, /, **args) -> Said:
    """`template % args` as a `Said`. A value may itself be a Said, or a list of them (joined by ", ")."""
    s = Said(template % {k: ", ".join(v) if isinstance(v, list) else v for k, v in args.items()})
    s.template, s.args = template, args
    return s


from twin.i18n.terms import unit  # noqa: E402  (terms imports the helpers above)
