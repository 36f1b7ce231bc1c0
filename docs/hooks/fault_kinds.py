"""The fault-kind reference page, generated at build time from the registry
(`twin.engine.faults.kinds`) and the random-failure catalog (`twin/catalog/faults.toml`): every kind,
what it targets, its fields with their bounds, whether it stops or slows its part, how it is
detected and how it ends. A kind declared in the registry shows here at the next `make docs`.
MkDocs hook (`mkdocs.yml` `hooks:`); `render()` is also what the test reads."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/fault-kinds.md"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole page as Markdown."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from twin.cli.faults import kinds_listing
    lines = ["# Fault kinds", "",
             "Generated at build time from the fault-kind registry (`twin/engine/faults/kinds.py`), which the "
             "fault files, the engine, the random-failure model, the Failures page and "
             "`python -m twin faults --kinds --json` all read. Every fault also takes `kind`, `target`, "
             "`at_s` and `duration_s`; a field a kind does not list is refused. *Gray* kinds keep the part "
             "running, slowly. Random-failure rates (MTBF per part, hours) are the catalog's "
             "(`twin/catalog/faults.toml`, each a cited figure or a labelled assumption); gray ones are drawn "
             "only when a fault file asks (`random = {hours_per_sim_s = 1, gray = true}`). How to write a "
             "fault file: [break parts and replay faults](../how-to/faults.md).", "",
             "| kind | stops or slows | targets (e.g.) | fields | what happens | how it ends | detected by "
             "| random MTBF (h) |", "|---|---|---|---|---|---|---|---|"]
    for k in kinds_listing():
        fields = "; ".join(f"`{f['name']}`: {f['allowed']}, default {f['default']:g}" for f in k["fields"]) or "—"
        health = ", ".join(f"{a} × {v}" if v != "flap" else f"{a} down and up" for a, v in (k["health"] or {}).items())
        what = "stops" if k["stops"] else f"slows ({health})"
        mtbf = f"{k['mtbf_hours']:,.0f}" if k["mtbf_hours"] else "—"
        lines.append(f"| `{k['name']}` | {what} | {', '.join(k['targets'])} (`{k['example']}`) | {_cell(fields)} "
                     f"| {_cell(k['help'])} | {_cell(k['recover'])} | {k['detect']} | {mtbf} |")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    """MkDocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File
    files.append(File.generated(config, PAGE, content=render()))
    return files
