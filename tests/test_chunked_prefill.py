"""Chunked prefill (the "chunked-fifo" prefill batching policy, twin.engine.pools.PrefillInstance): a dozen
whole-context prompts on the paper deployment's six prefill instances do not hold a short prompt's
first token behind them; the long prompts still finish, with the same tokens made, and an abandoned
request (External.abort) leaves the engine with nothing held. Times are the twin's (sim seconds)."""
from __future__ import annotations

import numpy as np
import pytest

from twin.engine import Engine
from twin.engine.external import External
from twin.engine.handover import hand_over
from twin.engine.requests import DONE
from twin.serve.engine_proc import PREFILL_CHUNK

LONG = 131_000


def _run(chunk: int, abort: int | None = None, hand_over_at: float | None = None) -> tuple[dict, Engine, int | None]:
    eng = Engine("default", seed=1, policies={"prefill_batching": {"name": "chunked-fifo", "chunk_tokens": chunk}}
                 if chunk else None)
    ext = External.attach(eng)
    for k in range(12):
        ext.inject(0.0, LONG, 2, np.arange(k * 300, k * 300 + 256) + (1 << 40), k)
    ext.inject(1.0, 1000, 2, np.array([7 << 40]), "short")
    first: dict = {}
    t, rid = 0.0, None
    while len(first) < (12 if abort is not None else 13) and t < 120:
        eng.advance(0.05)
        t += 0.05
        if hand_over_at is not None and t >= hand_over_at:
            hand_over(eng, eng.prefill[0], "test", "scale-in")    # its batch of chunks finishes, the rest moves
            hand_over_at = None
        if abort is not None and t >= 0.5 and rid is None:
            rid = ext._rid[abort]
            assert ext.abort(abort) and not ext.abort(abort)
        for key, when, made, end, *_ in ext.events:
            if made and key not in first:
                first[key] = when
        ext.events = []
    return first, eng, rid


@pytest.mark.parametrize("chunk", [0, PREFILL_CHUNK])
def test_a_short_prompt_is_not_held_behind_whole_context_prompts(chunk):
    first, eng, _ = _run(chunk)
    short = first["short"] - 1.0
    longs = sorted(first[k] for k in range(12))
    if chunk:
        assert short < 0.1, short                     # one chunk's wait at most, not a whole prompt's
        assert len(longs) == 12 and longs[-1] < 60    # and the long ones all get their first token
    else:
        assert short > 5.0, short                     # without chunks: behind a whole long prompt
    eng.advance(5.0)
    assert eng.req.audit()["completed"] == 13          # every one served to its end
    assert [i.queued_tokens for i in eng.prefill] == [0] * 6 and not any(i.done for i in eng.prefill)


def test_an_aborted_long_prompt_leaves_the_engine_holding_nothing():
    """Aborted mid-prefill (in a batch of chunks or queued between them): no first token, no chunk
    after the one in progress, and nothing of it held once that ends."""
    first, eng, rid = _run(PREFILL_CHUNK, abort=3)
    eng.advance(5.0)
    assert 3 not in first and len(first) == 12
    assert eng.req.state[rid] >= DONE and all(rid not in i.done and rid not in i.queue for i in eng.prefill)
    assert eng.req.audit()["in_flight"] == 0 and [i.queued_tokens for i in eng.prefill] == [0] * 6


def test_a_long_prompt_on_an_instance_handed_over_mid_prompt_is_finished_elsewhere():
    first, eng, _ = _run(PREFILL_CHUNK, hand_over_at=2.0)
    eng.advance(5.0)
    assert len(first) == 13 and eng.req.audit()["completed"] == 13
    held = eng.prefill[0]
    assert not held.queue and not held.done and held.queued_tokens == 0
