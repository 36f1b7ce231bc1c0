"""Every module of twin/ imports on its own in a fresh process (no import circles hidden by import
order), and the core package never imports the UI libraries."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for p in (ROOT / "twin").rglob("*.py"))


def test_every_module_is_listed():
    assert {"twin.engine.core", "twin.engine.metrics", "twin.model.config", "twin.predict.perf",
            "twin.engine.scheduling.base"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone_in_a_fresh_process(module):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_simulation_core_never_imports_the_ui():
    code = ("import sys, twin.engine, twin.live.session, twin.cli.run, twin.predict.perf; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dash', 'plotly')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
