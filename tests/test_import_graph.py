"""The module import graph of twin/, the pages and the Dash shell, read from the source (every import
statement, inside functions and `if TYPE_CHECKING:` blocks too): no import runs back up the floors
declared in twin/floors.py, there is no circle of any kind, and only the wiring imports `Engine`:
components see the engine through the protocols of twin.engine.ports. docs/hooks/floors.py draws the
floors from this graph."""
import ast
from pathlib import Path

import pytest

from twin.floors import floor_of

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "twin"
TOPS = ("twin", "pages", "app")     # the module trees the graph covers

# The wiring: modules that build an Engine (the package that exports it, and the commands, the live
# service and the tools that construct one). Anything else uses twin.engine.ports.
WIRING = {"twin.engine", "twin.live.runner", "twin.cli.run", "twin.cli.bench", "twin.cli.bench_turns",
          "twin.cli.fingerprint", "twin.explore.evaluate", "twin.explore.whatif", "twin.serve.engine_proc",
          "twin.explore.incident", "twin.explore.incidentjob",     # a gray incident's what-if runs
          "twin.cloud.live", "twin.cloud.maas", "twin.region.member"}



def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def modules() -> dict[str, Path]:
    files = [*PKG.rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]
    return {module_name(p): p for p in files}


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative levels resolved against `mod`)."""
    if not node.level:
        return node.module or ""
    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
    parts = parts[:len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def imports(mod: str, path: Path, known: set[str]) -> list[tuple[str, str]]:
    """(imported module, imported name or "") for every import in the module, resolved to modules of
    twin/: `from a import b` imports a.b when that is a module, else a (and the name b)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] in TOPS]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, path.name == "__init__.py", node)
            if base.split(".")[0] not in TOPS:
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, "") if sub in known else (base, a.name))
    return [(m, n) for m, n in out if m in known]


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module -> the modules it imports (its own package too: `from . import x` in a submodule whose
    package imports it is a circle), and module -> the names it imports from each module, as
    "module:name"."""
    mods = modules()
    known = set(mods)
    edges, names = {}, {}
    for mod, path in mods.items():
        found = imports(mod, path, known)
        edges[mod] = {m for m, _ in found if m != mod}
        names[mod] = {f"{m}:{n}" for m, n in found if n}
    return edges, names


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_type_only_and_function_level_imports():
    edges, names = graph()
    assert "twin.engine.ports" in edges["twin.engine.pools"]
    assert "twin.engine.core" in edges["twin.engine"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def back_up(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a module to a module on a higher floor, as "importer -> imported"."""
    return sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs if floor_of(b) > floor_of(a))


def test_every_module_stands_on_a_declared_floor():
    unplaced = []
    for mod in graph()[0]:
        try:
            floor_of(mod)
        except KeyError:
            unplaced.append(mod)
    assert unplaced == []


def test_no_import_runs_back_up_the_floors():
    assert back_up(graph()[0]) == []


def test_the_floor_check_sees_an_import_back_up_and_lets_commands_reach_down():
    edges = {"twin.engine.source": {"twin.live.tracestore", "twin.workload.resolve"},
             "twin.lessons.__main__": {"twin.cli.lesson_check"}, "pages.cloud": {"twin.ui.jobform", "app"}}
    assert back_up(edges) == ["twin.engine.source -> twin.live.tracestore"]
    with pytest.raises(KeyError):
        floor_of("twin.newpackage.thing")


def test_no_import_circle_among_modules():
    assert cycles(graph()[0]) == []


def test_only_the_wiring_imports_engine():
    _, names = graph()
    users = {mod for mod, got in names.items()
             if {"twin.engine:Engine", "twin.engine.core:Engine"} & got}
    users |= {mod for mod, edges in graph()[0].items() if "twin.engine.core" in edges}
    assert users <= WIRING, sorted(users - WIRING)
