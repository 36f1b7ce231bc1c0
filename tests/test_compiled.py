"""The compiled kernels' plain-Python mode (NUMBA_DISABLE_JIT=1) gives the same runs bit for bit."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import numpy as np

from twin.engine.compiled import INT64, KERNELS, PLAIN, kernel
from twin.cli.fingerprint import fingerprint

ROOT = Path(__file__).resolve().parent.parent
RUNS = (("default", 60, {}), ("diurnal", 40, {"random_faults": True}))   # EMS, KV transfer, faults
PLAIN_SKIPS = "not 0-4 and not 0-0"     # the EMS index cases without DRAM (parameter ids dram-ssd)


def _plain(code: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    cmd = [sys.executable, *args] if args else [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_every_kernel_is_compiled_here_and_listed():
    import twin.engine  # noqa: F401  (imports every module that declares a kernel)
    import twin.engine.ems.index  # noqa: F401
    assert not PLAIN and len([k for k in KERNELS if k.py_func.__module__.startswith("twin.")]) == 22
    assert all(type(k).__name__ == "CPUDispatcher" for k in KERNELS)


@kernel(signature=f"({INT64}, float64)")
def _bump(a, x):
    a[0] += x
    return a[0]


def test_a_hot_kernel_checks_its_first_call_then_calls_its_entry():
    """A kernel with a signature refuses a first call of other types (its entry would misread a
    float array as int64), then binds its name to the compiled entry (an int converts to float64)."""
    first = _bump
    with pytest.raises(TypeError, match=r"kernel _bump: arguments .*float64.*; its signature takes"):
        _bump(np.zeros(2), 1.0)
    assert globals()["_bump"] is first                 # not bound by a refused call
    a = np.zeros(2, dtype=np.int64)
    assert first(a, 2) == 2 and a.tolist() == [2, 0]
    assert globals()["_bump"] is not first and type(globals()["_bump"]).__name__ == "builtin_function_or_method"
    assert globals()["_bump"](a, 3.0) == 5


@pytest.mark.slow
def test_plain_python_mode_fingerprints_equal_the_compiled_ones():
    code = ("import json; from twin.cli.fingerprint import fingerprint; from twin.engine.compiled import PLAIN, KERNELS; "
            f"print(json.dumps([PLAIN, len(KERNELS)] + [fingerprint(n, d, **kw) for n, d, kw in {RUNS!r}]))")
    out = _plain(code)
    assert out.returncode == 0, out.stderr[-2000:]
    plain, n, *prints = json.loads(out.stdout.strip().splitlines()[-1])
    assert plain is True and n == 22
    assert prints == [fingerprint(n, d, **kw) for n, d, kw in RUNS]


@pytest.mark.slow
def test_kernel_equivalence_tests_pass_in_plain_mode():
    """The kernels' own reference tests (EMS index against a dict model, compiled passes against
    their Python references) run again with every kernel as Python: every test, each EMS case with
    DRAM (the DRAM-less ones, 112 of 222 s here as Python, run compiled in test_ems_index.py)."""
    out = _plain("", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", PLAIN_SKIPS, "tests/test_ems_index.py",
                 "tests/test_engine_fastpath.py", "tests/test_flows.py")
    assert out.returncode == 0, out.stdout[-3000:]
    assert re.search(r"\b\d+ passed, 3 deselected", out.stdout), out.stdout[-3000:]   # the skips name 3 cases
