"""Compiled passes over the request rows of a batch: a prefill batch's start and end, the sequences
a decode instance admits or finishes.

Each touches a few rows of several request columns; as numpy operations that is a dozen calls of
~0.5 us each on a handful of ids (or a Python loop per id), as one compiled loop it is one call.
Each pass gives the numbers the numpy operations gave (ids in flight are in the window: row =
id - base).
"""
from __future__ import annotations

import numpy as np

from twin.engine.compiled import FLOATS, INT64, INTS, kernel

from twin.engine.requests import (DECODING, F_FIRST_TOKEN, F_PREFILL_END, F_PREFILL_START, F_PROGRESS, I_GENERATED,
                                   I_INPUT, I_INSTANCE, I_OUTPUT, I_STATE, PREFILL)


@kernel(signature=f"({INT64}, int64, float64, {INTS}, {FLOATS}, {INT64})")
def started(ids, base, now, ints, floats, sizes):
    """A prefill batch starts at `now`: its prompts go PREFILL, and `sizes` gets the tokens each
    prefills (a requeued request's prompt and the tokens it made but the first, again). Returns
    (prompt tokens, tokens to prefill, their sum of squares), exact integers."""
    prompts = total = square = 0
    for i in range(len(ids)):
        r = ids[i] - base
        ints[I_STATE, r] = PREFILL
        floats[F_PREFILL_START, r] = now
        prompt, redo = ints[I_INPUT, r], ints[I_GENERATED, r] - 1
        size = prompt + redo if redo > 0 else prompt
        sizes[i] = size
        prompts += prompt
        total += size
        square += size * size
    return prompts, total, square


@kernel(signature=f"({INT64}, int64, float64, {INTS}, {FLOATS}, {INT64})")
def prefilled(ids, base, now, ints, floats, order):
    """A prefill batch's prompts ended at `now` (each client hears of it: `progress`): a requeued
    request keeps the first token it streamed and the tokens it made (at least the first). `order`
    gets the ids to send to decode, in batch order, then those done (one output token), in batch
    order. Returns (prompt tokens, ids to send, their prompt tokens)."""
    prompts = sent = n_send = 0
    for i in range(len(ids)):
        r = ids[i] - base
        floats[F_PREFILL_END, r] = now
        floats[F_PROGRESS, r] = now
        if np.isnan(floats[F_FIRST_TOKEN, r]):
            floats[F_FIRST_TOKEN, r] = now
        if ints[I_GENERATED, r] < 1:
            ints[I_GENERATED, r] = 1
        prompts += ints[I_INPUT, r]
        if ints[I_OUTPUT, r] > 1:
            order[n_send] = ids[i]
            n_send += 1
            sent += ints[I_INPUT, r]
    k = n_send
    for i in range(len(ids)):
        if ints[I_OUTPUT, ids[i] - base] <= 1:
            order[k] = ids[i]
            k += 1
    return prompts, n_send, sent


@kernel(signature=f"({INT64}, int64, {INTS}, {FLOATS}, int64, {INT64})")
def admit(ids, base, ints, floats, idx, left):
    """Mark `ids` DECODING on instance `idx` and write the tokens each has still to make into
    `left`. Returns (their KV need, input + output, summed; their context, input + generated,
    summed; how many have no first token yet)."""
    need = ctx = no_first = 0
    for i in range(len(ids)):
        r = ids[i] - base
        n = ints[I_INPUT, r] + ints[I_OUTPUT, r]
        need += n
        left[i] = ints[I_OUTPUT, r] - ints[I_GENERATED, r]
        ctx += n - left[i]
        ints[I_STATE, r] = DECODING
        ints[I_INSTANCE, r] = idx
        if np.isnan(floats[F_FIRST_TOKEN, r]):
            no_first += 1
    return need, ctx, no_first


@kernel(signature=f"({INT64}, int64, {INTS})")
def finish(ids, base, ints):
    """Finished sequences have made all their output (generated = output); returns their final
    contexts (input + output) summed."""
    need = 0
    for i in range(len(ids)):
        r = ids[i] - base
        ints[I_GENERATED, r] = ints[I_OUTPUT, r]
        need += ints[I_INPUT, r] + ints[I_OUTPUT, r]
    return need
