"""Every module of twin/ imports on its own (no import circles hidden by import order, no name used
that only another module's import brought in), and the core package never imports the UI libraries.
One fresh process imports each module in turn with every twin module forgotten before it (the
third-party libraries stay loaded: they are not what is checked), instead of one process a module."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for p in (ROOT / "twin").rglob("*.py"))
EACH_ALONE = """
import importlib, json, sys, traceback
failed = {}
for module in sys.argv[1:]:
    for name in [n for n in sys.modules if n == "twin" or n.startswith("twin.")]:
        del sys.modules[name]
    try:
        importlib.import_module(module)
    except BaseException:
        failed[module] = traceback.format_exc(limit=-4)
print(json.dumps(failed))
"""


def test_every_module_is_listed():
    assert {"twin.engine.core", "twin.engine.metrics", "twin.model.config", "twin.predict.perf",
            "twin.engine.scheduling.base"} <= set(MODULES)


@pytest.mark.slow
def test_every_module_imports_alone():
    r = subprocess.run([sys.executable, "-c", EACH_ALONE, *MODULES], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.splitlines()[-1]) == {}


def test_the_simulation_core_never_imports_the_ui():
    code = ("import sys, twin.engine, twin.live.session, twin.cli.run, twin.predict.perf; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dash', 'plotly')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
