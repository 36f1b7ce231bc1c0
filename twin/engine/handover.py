"""A planned hand-over: an instance leaves serving without losing the work it holds (the co-pool
scheduler lends serving groups to training this way; a fault restart, recovery.restart, requeues).

Prefill: the instance takes no new batch (held down under `key`, the batch in progress is not
interrupted and ends as usual, its KV going to decode); the requests still waiting in its queue
have not started, so they go to the other prefill instances with nothing recomputed.
Decode: the sequences it holds (running, waiting, landed) keep their KV and migrate to the other
decode instances over the KV plane, as a prefill's KV travels (transfer.py: their prompt plus the
tokens made so far); they resume where they stopped. Letting them finish in place would hold the
group for a whole reply (256 tokens x ~50 ms, 13 simulated s, half an hour of a compressed day's
clock) where moving the KV over UB takes milliseconds. Only the step in progress is lost (its
tokens are made again on the new instance).

`drained` says when the instance holds nothing any more: the switch clock starts then.
"""
from __future__ import annotations

import numpy as np

from twin.engine.ports import ExtensionHost
from twin.engine.requests import DONE

DRAIN_POLL_S = 0.01      # assumption: how often a draining group is checked (simulated s)


def hand_over(eng: ExtensionHost, inst, key: str, reason: str) -> dict:
    """Hold `inst` down under `key` and hand over what it holds; counts of what went where."""
    eng.catch_up()
    if inst.kind == "prefill":
        inst.hold(key, reason)                 # no new batch; the running one finishes
        waiting = list(inst.queue)
        inst.queue.clear()
        inst.queued_tokens = 0
        live = eng.live()[0]
        if not live:                           # nowhere else to go: keep them for its return
            inst.queue.extend(waiting)
            inst.queued_tokens = int(eng.req.input[np.array(waiting, dtype=np.int64)].sum()) if waiting else 0
            waiting = []
        for rid in waiting:
            eng.schedule_prefill(int(rid), live=live)
        return {"finishing": len(inst.running) if inst.busy else 0, "handed_over": len(waiting),
                "migrated": 0, "migrated_gb": 0.0, "ids": np.zeros(0, dtype=np.int64)}
    inst.fail(key, reason)                     # the step in progress is lost, nothing else
    return {"finishing": 0, "handed_over": 0, **migrate(eng, inst, inst.evict(queue=True))}


def migrate(eng: ExtensionHost, inst, ids: np.ndarray) -> dict:
    """Send the KV of decode sequences `ids` from `inst` to the live decode instances."""
    ids = ids[eng.req.state[ids] < DONE]          # in flight only
    if not len(ids):
        return {"migrated": 0, "migrated_gb": 0.0, "ids": ids}
    tokens = int((eng.req.input[ids] + eng.req.generated[ids]).sum())
    eng.kv.send(ids, inst, tokens)
    return {"migrated": len(ids), "migrated_gb": round(tokens * eng.kv_bytes / 1e9, 3), "ids": ids}


def drained(eng: ExtensionHost, inst, migrated: np.ndarray) -> bool:
    """True once `inst` holds no work: its batch ended (prefill), the KV of the sequences it
    migrated (`migrated`) has left it (decode)."""
    if inst.kind == "prefill":
        return not inst.busy
    return not any(np.intersect1d(ids, migrated).size for ids in eng.kv.transfers.values())
