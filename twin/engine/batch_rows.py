"""Compiled passes over the request rows of a batch: a prefill batch's start and end, the sequences
a decode instance admits or finishes.

Each touches a few rows of several request columns; as numpy operations that is a dozen calls of
~0.5 us each on a handful of ids (or a Python loop per id), as one compiled loop it is one call.
Each pass gives the numbers the numpy operations gave (ids in flight are in the window: row =
id - base).
"""
from __future__ import annotations

import numpy as np

from twin.engine.compiled import FLOAT64, INT64, kernel

from twin.engine.requests import DECODING, PREFILL


@kernel(signature=f"({INT64}, int64, float64, {INT64}, {FLOAT64}, {INT64}, {INT64}, {INT64})")
def started(ids, base, now, state, prefill_start, inputs, generated, sizes):
    """A prefill batch starts at `now`: its prompts go PREFILL, and `sizes` gets the tokens each
    prefills (a requeued request's prompt and the tokens it made but the first, again). Returns
    (prompt tokens, tokens to prefill, their sum of squares), exact integers."""
    prompts = total = square = 0
    for i in range(len(ids)):
        r = ids[i] - base
        state[r] = PREFILL
        prefill_start[r] = now
        prompt, redo = inputs[r], generated[r] - 1
        size = prompt + redo if redo > 0 else prompt
        sizes[i] = size
        prompts += prompt
        total += size
        square += size * size
    return prompts, total, square


@kernel(signature=f"({INT64}, int64, float64, {FLOAT64}, {FLOAT64}, {FLOAT64}, {INT64}, {INT64}, {INT64}, {INT64})")
def prefilled(ids, base, now, prefill_end, progress, first_token, generated, inputs, output, order):
    """A prefill batch's prompts ended at `now` (each client hears of it: `progress`): a requeued
    request keeps the first token it
    streamed and the tokens it made (at least the first). `order` gets the ids to send to decode,
    in batch order, then those done (one output token), in batch order. Returns (prompt tokens,
    ids to send, their prompt tokens)."""
    prompts = sent = n_send = 0
    for i in range(len(ids)):
        r = ids[i] - base
        prefill_end[r] = now
        progress[r] = now
        if np.isnan(first_token[r]):
            first_token[r] = now
        if generated[r] < 1:
            generated[r] = 1
        prompts += inputs[r]
        if output[r] > 1:
            order[n_send] = ids[i]
            n_send += 1
            sent += inputs[r]
    k = n_send
    for i in range(len(ids)):
        if output[ids[i] - base] <= 1:
            order[k] = ids[i]
            k += 1
    return prompts, n_send, sent


@kernel(signature=f"({INT64}, int64, {INT64}, {INT64}, {INT64}, {INT64}, {INT64}, {FLOAT64}, int64, {INT64})")
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


@kernel(signature=f"({INT64}, int64, {INT64}, {INT64}, {INT64})")
def finish(ids, base, inputs, output, generated):
    """Finished sequences have made all their output (generated = output); returns their final
    contexts (input + output) summed."""
    need = 0
    for i in range(len(ids)):
        r = ids[i] - base
        generated[r] = output[r]
        need += inputs[r] + output[r]
    return need
