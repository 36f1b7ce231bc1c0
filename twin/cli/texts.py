"""The texts the translation catalogs hold besides the `_()` calls of the code: the lessons' and the
glossary's, and the catalog data's shown on the dashboard (scenario, deployment and fault-demo descriptions, system
names).
Gathered here, on the command line's floor, because they come from the lessons, the engine and the
model; twin.i18n sits below them all and is handed the texts."""
from __future__ import annotations

import tomllib

from twin.i18n.catalog import DATA, extract

LESSON_DATA = "twin/lessons/data"


def data_texts() -> list[tuple[str, str]]:
    """(text, where) of the catalog data shown on the dashboard: scenario, deployment and fault-demo
    descriptions, system names."""
    from twin.engine.faults import describe, load_fault_file
    from twin.model.config import CATALOG_DIR
    out = []
    for kind in ("scenario", "deployment"):
        data = tomllib.loads((CATALOG_DIR / f"{kind}s.toml").read_text())
        out += [(s["description"], f"{kind} {name}") for name, s in data.items()
                if isinstance(s, dict) and s.get("description")]
    systems = tomllib.loads((CATALOG_DIR / "systems.toml").read_text())
    out += [(s["name"], f"system {name}") for name, s in systems.items() if isinstance(s, dict) and s.get("name")]
    for p in sorted((CATALOG_DIR / "faults").glob("*.toml")):
        if text := describe(p, load_fault_file(p)):
            out.append((text, f"fault demo {p.stem}"))
    return out


def texts() -> list[tuple[str, str, str]]:
    """(text, location, where) of every data text: lessons and glossary, then the catalog data."""
    from twin.lessons import messages
    return [(m, LESSON_DATA, w) for m, w in messages()] + [(m, DATA, w) for m, w in data_texts()]


def template(root=None):
    """The catalogs' template: the code's msgids under `root` (the repository) and every data text."""
    return extract(texts(), root)
