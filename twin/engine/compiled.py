"""The twin's compiled kernels: every numba-compiled loop is declared with `kernel`, and listed here.

A kernel is written as plain Python over numpy arrays and compiled by numba (`njit`, cached on disk,
so a new process loads it in ~0.3 s instead of compiling for ~2.6 s). The kernels stay next to the
arrays they walk (the request table, batch rows, step timing, the EMS index); `KERNELS` lists them.

Plain-Python mode: `NUMBA_DISABLE_JIT=1` runs every kernel as the Python it is written in, 2-3x
slower and with the same results bit for bit; `tests/test_compiled.py` checks that with
`bench --fingerprint`. Use it to step through a kernel in a debugger or to profile it line by line.
"""
from __future__ import annotations

import warnings

import numba

PLAIN = bool(numba.config.DISABLE_JIT)
KERNELS: list = []        # every kernel, compiled or (in plain mode) the Python function itself

if PLAIN:   # the EMS index's hash mixes wrap around in uint64 on purpose, as the compiled code does
    warnings.filterwarnings("ignore", "overflow encountered in scalar multiply", RuntimeWarning)


def kernel(fn):
    """Compile `fn` with numba (or leave it Python in plain mode) and list it in KERNELS."""
    compiled = numba.njit(cache=True)(fn)
    KERNELS.append(compiled)
    return compiled
