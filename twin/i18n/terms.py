"""One term per concept: the termbase (`terms.toml`), the unit helper and the check that finds a
second rendering of a term.

The room reads TTFT on Overview, in the glossary and in a lesson; if each says it differently it
looks like three things. `problems()` scans every Chinese msgstr (zh catalog), every English msgid
(with its source line) and every text line of the lesson and glossary files for the forbidden
variants of `terms.toml` and names file:line, the variant and the term to use.

    unit("tok/s", "zh")  -> "词元/秒"      unit("ms", "en") -> "ms"
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from twin.i18n import LANGS, check_lang, po_path

TERMS_FILE = Path(__file__).resolve().parent / "terms.toml"
ROOT = Path(__file__).resolve().parents[2]
LESSON_DIR = ROOT / "twin" / "lessons" / "data"
LESSON_TEXT = re.compile(r'^\s*(title|summary|goal|predict|notice|answer|term|text)\s*=\s*"')
_KEYS = {"en", "zh", "en_allowed", "zh_allowed", "en_forbidden", "zh_forbidden", "unit", "en_case"}
# not words of the text: %(name)s placeholders, %% and `code spans` (commands, identifiers)
_NOT_TEXT = re.compile(r"%\(\w+\)[sdfgr]|%%|`[^`]*`")


class TermError(ValueError):
    """A termbase entry that breaks the format, or a unit the termbase does not know."""


@dataclass(frozen=True)
class Term:
    id: str
    en: str
    zh: str
    forbidden: dict          # lang -> tuple of compiled patterns
    allowed: dict            # lang -> tuple of strings (documentation only)
    unit: bool = False

    def use(self, lang: str) -> str:
        return self.en if lang == "en" else self.zh


@dataclass(frozen=True)
class Hit:
    where: str               # file:line (or file and what it is, for catalog data without lines)
    lang: str
    variant: str
    term: Term
    at: int = 0              # offset of the variant in the text

    def __str__(self) -> str:
        return f"{self.where}: {self.lang} {self.variant!r} -> use {self.term.use(self.lang)!r} ({self.term.id})"


def parse(data: dict, source: str = "terms.toml") -> dict[str, Term]:
    """Terms by id from the termbase's TOML data; TermError names the entry and field that is wrong."""
    out = {}
    for tid, d in (data.get("term") or {}).items():
        where = f"{source}: term.{tid}"
        if not isinstance(d, dict):
            raise TermError(f"{where}: allowed a table of {', '.join(sorted(_KEYS))}")
        if unknown := set(d) - _KEYS:
            raise TermError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; allowed {', '.join(sorted(_KEYS))}")
        for k in ("en", "zh"):
            if not isinstance(d.get(k), str) or not d[k].strip():
                raise TermError(f"{where}: field {k!r} missing or empty; allowed a non-empty string")
        forbidden, allowed = {}, {}
        for lang in LANGS:
            flags = 0 if lang != "en" or d.get("en_case") else re.IGNORECASE
            pats = []
            for p in d.get(f"{lang}_forbidden", []):
                try:
                    pats.append(re.compile(p, flags))
                except re.error as exc:
                    raise TermError(f"{where}: {lang}_forbidden {p!r} is not a regular expression ({exc})") from None
            forbidden[lang], allowed[lang] = tuple(pats), tuple(d.get(f"{lang}_allowed", []))
        out[tid] = Term(tid, d["en"], d["zh"], forbidden, allowed, bool(d.get("unit", False)))
    if not out:
        raise TermError(f"{source}: no [term.<id>] tables")
    return out


@lru_cache(maxsize=1)
def terms() -> dict[str, Term]:
    return parse(tomllib.loads(TERMS_FILE.read_text(encoding="utf-8")), TERMS_FILE.name)


def units() -> dict[str, Term]:
    """The unit terms by their English symbol (the key of `unit`)."""
    return {t.en: t for t in terms().values() if t.unit}


def is_unit(symbol: str) -> bool:
    return symbol in units()


def unit(symbol: str, lang: str) -> str:
    """A unit as `lang` writes it (the termbase's unit rule): unit("ms", "zh") -> "毫秒"; "" stays ""."""
    lang = check_lang(lang)
    if symbol == "":
        return ""
    if (t := units().get(symbol)) is None:
        raise TermError(f"unit {symbol!r} is not in {TERMS_FILE.name}; allowed {', '.join(sorted(units()))}")
    return t.use(lang)


def find(text: str, lang: str, where: str, table: dict[str, Term] | None = None) -> list[Hit]:
    """Forbidden variants in one text of `lang` (placeholders and code spans left out)."""
    text = _NOT_TEXT.sub(lambda m: " " * len(m.group(0)), text)      # same length: offsets hold
    return sorted((Hit(where, lang, m.group(0), t, m.start()) for t in (table or terms()).values()
                   for p in t.forbidden[lang] for m in p.finditer(text)), key=lambda h: h.at)


def po_strings(path: Path):
    """(line, text) pieces of every msgstr of a .po file but the header's, one per physical line, so
    a hit names its line. A variant wrapped across two lines is found on the joined text."""
    msgid, entry, state = "", [], None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines() + [""], 1):
        if raw.startswith("msgid "):
            state, msgid = "id", _unquote(raw.split(" ", 1)[1])
        elif raw.startswith(("msgstr ", "msgstr[")):
            state, entry = "str", [(n, _unquote(raw.split(" ", 1)[1]))]
        elif raw.startswith('"') and state:
            if state == "id":
                msgid += _unquote(raw)
            else:
                entry.append((n, _unquote(raw)))
        else:
            if state == "str" and msgid:          # msgid "" is the header: metadata, not text
                yield entry
            state = None


def _unquote(s: str) -> str:
    s = s.strip()[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def scan_po(path: Path, lang: str, table=None) -> list[Hit]:
    """Variants in every msgstr of a catalog, named by the line they start on."""
    out = []
    for entry in po_strings(path):
        text, starts = "", []
        for n, s in entry:
            starts.append((len(text), n))
            text += s
        for h in find(text, lang, "", table):
            line = max(n for off, n in starts if off <= h.at)
            out.append(Hit(f"{_rel(path)}:{line}", lang, h.variant, h.term, h.at))
    return out


def scan_lessons(directory: Path | None = None, table=None) -> list[Hit]:
    """English variants in the text lines of the lesson and glossary files."""
    out = []
    for p in sorted((directory or LESSON_DIR).glob("*.toml")):
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if LESSON_TEXT.match(line):
                out += find(line.split("=", 1)[1], "en", f"{_rel(p)}:{n}", table)
    return out


def scan_msgids(template, table=None) -> list[Hit]:
    """English variants in the msgids of the code (named by source line) and of the catalog data;
    the lessons' msgids are left to `scan_lessons`, which names their lines."""
    out = []
    for m in template:
        if not m.id or all(loc[0].startswith("twin/lessons/data") for loc in m.locations):
            continue
        loc = m.locations[0]
        where = f"{loc[0]}:{loc[1]}" if loc[1] else f"{loc[0]} ({'; '.join(m.auto_comments)})"
        out += find(m.id, "en", where, table)
    return out


def problems(template) -> list[Hit]:
    """Every second rendering of a term: zh msgstrs, English msgids of `template` (twin.cli.texts.template(),
    which this package never imports: it reads the lessons and the engine's fault files),
    lesson and glossary text."""
    return scan_po(po_path("zh"), "zh") + scan_msgids(template) + scan_lessons()


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)
