"""Compiled passes over the request rows of sequences a decode instance admits or finishes.

A decode step touches a few rows of several request columns; as numpy operations that is a
dozen calls of ~0.5 us each on a handful of ids, as one compiled loop it is one call. Each pass
gives the integers the numpy operations gave (ids in flight are in the window: row = id - base).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .requests import DECODING


@njit(cache=True)
def admit(ids, base, inputs, output, generated, state, instance, first_token, idx, left):
    """Mark `ids` DECODING on instance `idx` and write the tokens each has still to make into
    `left`. Returns (their KV need, input + output, summed; their context, input + generated,
    summed; how many have no first token yet)."""
    need = ctx = no_first = 0
    for i in range(len(ids)):
        r = ids[i] - base
        n = inputs[r] + output[r]
        need += n
        left[i] = output[r] - generated[r]
        ctx += n - left[i]
        state[r] = DECODING
        instance[r] = idx
        if np.isnan(first_token[r]):
            no_first += 1
    return need, ctx, no_first


@njit(cache=True)
def finish(ids, base, inputs, output, generated):
    """Finished sequences have made all their output (generated = output); returns their final
    contexts (input + output) summed."""
    need = 0
    for i in range(len(ids)):
        r = ids[i] - base
        generated[r] = output[r]
        need += inputs[r] + output[r]
    return need
