"""The twin's compiled kernels: every numba-compiled loop is declared with `kernel`, and listed here.

A kernel is written as plain Python over numpy arrays and compiled by numba (`njit`, cached on disk,
so a new process loads it in ~0.3 s instead of compiling for ~2.6 s). The kernels stay next to the
arrays they walk (the request table, batch rows, step timing, the EMS index); `KERNELS` lists them.

Plain-Python mode: `NUMBA_DISABLE_JIT=1` runs every kernel as the Python it is written in, 2-3x
slower and with the same results bit for bit; `tests/test_compiled.py` checks that with
`bench --fingerprint`. Use it to step through a kernel in a debugger or to profile it line by line.
"""
from __future__ import annotations

import sys
import warnings

import numba

PLAIN = bool(numba.config.DISABLE_JIT)
KERNELS: list = []        # every kernel, compiled or (in plain mode) the Python function itself
INT64, FLOAT64 = "int64[::1]", "float64[::1]"     # the arrays of signatures: contiguous, as numpy makes them
INTS, FLOATS = "int64[:, ::1]", "float64[:, ::1]"  # the request table's columns (twin.engine.requests)

if PLAIN:   # the EMS index's hash mixes wrap around in uint64 on purpose, as the compiled code does
    warnings.filterwarnings("ignore", "overflow encountered in scalar multiply", RuntimeWarning)


def kernel(fn=None, *, signature: str | None = None):
    """Compile `fn` with numba (or leave it Python in plain mode) and list it in KERNELS.

    With `signature` (a hot kernel, called per batch or step with the same types every time), the
    first call binds the kernel's name in its module to the compiled code's own entry: later calls
    skip numba's choice of a compiled version by the arguments' types (~0.05 us an argument, 3-4%
    of a diurnal run over the kernels that take one). The entry converts what it is given unchecked
    (an array of another dtype would be misread), so the first call checks the arguments against
    `signature`, and tests/test_compiled.py runs the fingerprint scenarios against plain Python."""
    if fn is None:
        return lambda f: kernel(f, signature=signature)
    compiled = numba.njit(cache=True)(fn)
    KERNELS.append(compiled)
    if signature is None or PLAIN:
        return compiled
    entry = None

    def first(*args):
        nonlocal entry
        if entry is None:
            entry = compiled.compile(signature)
            want = next(types for types, done in compiled.overloads.items() if done.entry_point is entry)
            got = tuple(numba.typeof(a) for a in args)
            if len(got) != len(want) or any(g != w and not (isinstance(g, numba.types.Number) and
                                                            isinstance(w, numba.types.Number))
                                             for g, w in zip(got, want)):
                entry = None
                raise TypeError(f"kernel {fn.__name__}: arguments {got}; its signature takes {want}")
            setattr(sys.modules[fn.__module__], fn.__name__, entry)    # what its callers find from now on
        return entry(*args)
    return first
