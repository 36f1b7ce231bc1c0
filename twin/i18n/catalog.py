"""Keep the catalogs in step with the code: extract, update, check.

Messages come from `_("...")` and `N_("...")` calls in every Python module of the app (`sources()`:
app.py, pages/ and the whole `twin` package, found, not listed: a list kept by hand missed
twin/engine/faults/rows.py, issue 36), extracted with Babel's Python extractor, and from the lessons
and glossary data (`twin.lessons.messages`). The
template `messages.pot` holds them all; each language's `messages.po` keeps its translations
across updates (no fuzzy matching: a changed English text needs a fresh translation).

    python -m twin.i18n update    # rewrite the template and merge it into en and zh
    python -m twin.i18n check     # exit 1 listing msgids missing from a catalog or untranslated in zh,
                                  # and every second rendering of a term (terms.py)
    python -m twin.i18n terms     # only the terms

To convert another page: wrap its user-visible strings in `_()`, run `update`, translate the new
entries in zh, and add the page to the rendered-text test.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_file
from babel.messages.pofile import read_po, write_po

from twin.lessons import messages

from twin.i18n import BABEL_LOCALE, DOMAIN, LANGS, LOCALE_DIR, po_path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_GLOBS = ("app.py", "pages/*.py", "twin/**/*.py")     # every module of the package, the pages and the shell
KEYWORDS = {"_": None, "N_": None}
DATA = "twin/catalog"               # where the catalog data's texts (data_texts) are said to come from
POT = LOCALE_DIR / f"{DOMAIN}.pot"
_NAMES = re.compile(r"%\((\w+)\)s")


def sources(root: Path | None = None) -> list[str]:
    """Every Python file under `root` (the repository) that SOURCE_GLOBS matches, relative, sorted."""
    root = ROOT if root is None else root
    return sorted({p.relative_to(root).as_posix() for g in SOURCE_GLOBS for p in root.glob(g)
                   if "__pycache__" not in p.parts})


def extract(root: Path | None = None) -> Catalog:
    """The template: every msgid of the sources (under `root`, the repository) and of the lesson
    data, with where it occurs."""
    root = ROOT if root is None else root
    cat = Catalog(project="CloudMatrix Twin", charset="utf-8")
    for rel in sources(root):
        for lineno, msg, _comments, _ctx in extract_from_file("python", root / rel, keywords=KEYWORDS):
            if isinstance(msg, str) and msg:
                cat.add(msg, locations=[(rel, lineno)])
    for msg, where in messages():
        cat.add(msg, locations=[("twin/lessons/data", None)], auto_comments=[where])
    for msg, where in data_texts():
        cat.add(msg, locations=[(DATA, None)], auto_comments=[where])
    return cat


def data_texts() -> list[tuple[str, str]]:
    """(text, where) of the catalog data shown on the dashboard: scenario, deployment and fault-demo
    descriptions."""
    from twin.model.config import CATALOG_DIR
    from twin.engine.faults import describe, load_fault_file
    out = []
    for kind in ("scenario", "deployment"):
        data = tomllib.loads((CATALOG_DIR / f"{kind}s.toml").read_text())
        out += [(s["description"], f"{kind} {name}") for name, s in data.items()
                if isinstance(s, dict) and s.get("description")]
    for p in sorted((CATALOG_DIR / "faults").glob("*.toml")):
        if text := describe(p, load_fault_file(p)):
            out.append((text, f"fault demo {p.stem}"))
    return out


def read(lang: str) -> Catalog:
    with po_path(lang).open("rb") as fh:
        return read_po(fh, locale=BABEL_LOCALE[lang])


def _write(cat: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        write_po(fh, cat, width=100, omit_header=False, sort_output=True, include_lineno=False)


def update() -> dict[str, int]:
    """Rewrite the template and merge it into every catalog; returns untranslated counts per language."""
    tmpl = extract()
    _write(tmpl, POT)
    counts = {}
    for lang in LANGS:
        cat = read(lang) if po_path(lang).exists() else Catalog(locale=BABEL_LOCALE[lang])
        cat.update(tmpl, no_fuzzy_matching=True)
        cat.project, cat.fuzzy = tmpl.project, False
        cat.obsolete.clear()
        _write(cat, po_path(lang))
        counts[lang] = sum(1 for m in cat if m.id and not m.string)
    return counts


def problems(tmpl: Catalog | None = None) -> list[str]:
    """What is wrong with the catalogs now: msgids in the code or data but not in a catalog, zh
    entries without a translation, and placeholder mismatches (Babel's python-format checker)."""
    tmpl = extract() if tmpl is None else tmpl
    out = []
    for lang in LANGS:
        cat = read(lang)
        for m in tmpl:
            if m.id and m.id not in cat:
                out.append(f"{lang}: not in the catalog: {m.id[:70]!r}")
        if lang != "en":
            out += [f"{lang}: untranslated: {m.id[:70]!r}" for m in cat if m.id and not m.string]
        for msg, errors in cat.check():
            out += [f"{lang}: {msg.id[:50]!r}: {e}" for e in errors if not _data(msg)]
        out += [f"{lang}: {m.id[:50]!r}: {e}" for m, e in _format_errors(cat)]
    return out


def _data(m) -> bool:
    """A text of the catalog data (`data_texts`): shown as it is, never %-formatted, so a '%' in it
    is a percent sign, not a placeholder."""
    return bool(m.locations) and all(loc[0] == DATA for loc in m.locations)


def _format_errors(cat: Catalog):
    """Messages with placeholders whose text cannot be %-formatted (e.g. a lone '%' before a
    character, which Babel's checker lets through): they would fail when shown."""
    for m in cat:
        if m.id and m.python_format and not _data(m):
            names = _NAMES.findall(m.id)
            for text in (m.id, m.string or m.id):
                try:
                    text % {n: "1" for n in names}
                except (ValueError, TypeError, KeyError) as exc:
                    yield m, f"cannot be formatted: {exc}"
