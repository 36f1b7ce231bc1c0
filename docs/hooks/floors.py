"""The house drawing, generated at build time from the floors declared in `twin/floors.py` and the
import graph `tests/test_import_graph.py` reads from the source: each floor, its packages and modules,
and how many imports go down, stay on the floor, or run back up (the test keeps that at 0).
MkDocs hook (`mkdocs.yml` `hooks:`); `render()` is also what a test may read."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = "explanation/floors.md"


def render() -> str:
    """The whole page as Markdown."""
    for p in (ROOT, ROOT / "tests"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    from test_import_graph import graph
    from twin.floors import FLOORS, floor_of
    edges = graph()[0]
    mods = [0] * len(FLOORS)
    down, side, up = [0] * len(FLOORS), [0] * len(FLOORS), [0] * len(FLOORS)
    for a, targets in edges.items():
        fa = floor_of(a)
        mods[fa] += 1
        for b in targets:
            fb = floor_of(b)
            (down if fb < fa else side if fb == fa else up)[fa] += 1
    width = max(len(" · ".join(f)) for f in FLOORS)
    drawing = []
    for i in reversed(range(len(FLOORS))):
        names = " · ".join(FLOORS[i])
        drawing += [f"  {i}  {names:<{width}}  {mods[i]:>3} modules   imports down {down[i]:>4}   "
                    f"on the floor {side[i]:>3}   back up {up[i]}"]
    lines = ["# The house: floors and imports", "",
             "Generated at build time from `twin/floors.py` (the floors, declared once) and the import graph "
             "of `twin/`, `pages/` and `app.py` that `tests/test_import_graph.py` reads from the source (imports "
             "inside functions and under `if TYPE_CHECKING:` count). A module imports from its own floor and "
             "the floors below; the test fails on any import that runs back up, so the last column stays 0. "
             "A package's `__main__` (`python -m twin.i18n`, `python -m twin.lessons`) is a command and stands "
             "on the top floor. The pages and the Dash shell (`app`) stand with the API and the dashboard's "
             "parts.", "",
             "```", *drawing, "```", "",
             f"Back up, in all: **{sum(up)}**. What came down to make it so: the engine opens a trace through "
             "`twin.workload.resolve`, where the live upload store registers itself, instead of importing the "
             "live service; the memory geometry the catalog check needs lives in `twin.model.memory`, not in "
             "the predictors; the lesson checks (`twin/cli/lesson_check.py`, `lesson_measure.py`, "
             "`plan_check.py`) stand with the commands; `twin.i18n` is handed the lesson and catalog texts "
             "(`twin/cli/texts.py`) and sits at the bottom, below everything that translates.", ""]
    return "\n".join(lines)


def on_files(files, config):
    """MkDocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File
    files.append(File.generated(config, PAGE, content=render()))
    return files
