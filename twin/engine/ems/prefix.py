"""The EMS prefix cache as the engine uses it: which CPUs serve it, and one lookup per prefill batch.

A request's blocks are entered into EMS as soon as its batch starts (the KV is being made; later
lookups share it), so requests replayed in any order reach the in-order ideal hit ratio when
capacity is unlimited; the write traffic is counted with it.
"""
from __future__ import annotations

import numpy as np

from twin.engine.compiled import INT64, INTS, kernel
from twin.engine.ems.index import LOOKUP, STORE, _walk
from twin.engine.ems.pool import EMS
from twin.engine.requests import I_BLOCK_HI, I_BLOCK_LO, I_CACHED, I_INPUT
from twin.topology import parse


def build_ems(scenario, dep, system, cpu_chip, cpu_ids: list[str], kv_bytes: float) -> EMS | None:
    """The deployment's EMS over the CPUs of its first `ems_nodes` nodes (None without CPUs)."""
    servers = cpu_ids[: dep.ems_nodes * system.cpus_per_node]
    if not servers or cpu_chip is None:
        return None
    if scenario.cache_capacity == "unlimited":
        dram, ssd = None, None
    elif scenario.cache_capacity == "default":
        dram = cpu_chip.dram_gb * 1e9 * dep.ems_dram_fraction
        ssd = cpu_chip.ssd_gb * 1e9
    else:
        dram, ssd = float(scenario.cache_capacity) / len(servers), 0.0
    return EMS(list(servers), dram, ssd, scenario.block_size * kv_bytes, block_tokens=scenario.block_size)


def reports(ems: EMS | None) -> dict:
    """Snapshot field: the EMS cache's statistics ({} without EMS)."""
    return {"cache": lambda: dict(ems.stats()) if ems else {}}


def server_nodes(ems: EMS | None) -> dict[str, int]:
    """EMS server id -> its node number (from the topology's id grammar)."""
    return {s: parse(s)["node"] for s in ems.servers} if ems is not None else {}


def lookup(ems: EMS | None, req, ids: np.ndarray, cur, acct, slot: int) -> int:
    """The batch's prefix hits in tokens (each request's, at least one token short of its prompt,
    stored in `req.cached`); hit and write counts go to the interval `cur` and the accounting
    `acct`. The batch's prompts are looked up and stored one after the other, in batch order, in
    one compiled pass (`_walk_rows`) that returns to Python only when a walk stops for the index
    (it grows, renumbers or rebuilds a queue: `BlockIndex.unstop`), and resumes there."""
    if ems is None:
        return 0
    per_hit, per_new = acct.ems_hit[slot], acct.ems_new[slot]
    acc = np.zeros(N_ACC, np.int64)
    done = 0
    while True:
        ring, offset, index = ems.walk_state()
        done, code, place = _walk_rows(ids, done, req.base, req.ints, req.block_ids, req.block_base, offset, ring,
                                       per_hit, per_new, *index.args, acc)
        if done == len(ids):
            break
        r = ids.item(done) - req.base
        index.unstop(code, place, req.block_hi.a.item(r) - req.block_lo.a.item(r))
    cached, new, looked, hit_blocks, tokens, hit_tokens, hit_requests = acc.tolist()
    cur.lookups_blocks += looked
    cur.hit_blocks += hit_blocks
    cur.lookup_tokens += tokens
    cur.hit_tokens += hit_tokens
    cur.hit_requests += hit_requests
    acct.cache_writes(new)             # once per batch: the same float sum as before
    return cached


N_ACC = 7   # the walks' sums: hit tokens kept, new blocks, blocks looked up, hit blocks, tokens looked
#             up, hit tokens, prompts with a hit


@kernel(signature=f"({INT64}, int64, int64, {INTS}, {INT64}, int64, int64, int32[::1], {INT64}, {INT64}, "
                  f"{INT64}, int16[::1], int32[::1], int64[:, ::1], int32[:, ::1], {INT64}, {INT64})")
def _walk_rows(ids, start, base, ints, blocks, block_base, offset, ring, per_hit, per_new, keys, place, stamp,
               codes, qbuf, st, acc):
    """lookup()'s walks: each request of ids[start:] in turn looks up and stores its blocks
    (blocks[block_lo - block_base:block_hi - block_base] of its row, plus `offset`, a model's keys
    in a shared pool); a request without blocks has no walk and no hit. Its hit tokens kept (at
    most one short of its prompt) go to its `cached` row, its counts into `acc` (N_ACC). Returns
    (how far it got, the stop's code, its place): all of ids, or the index of the request whose
    walk stopped for Python (nothing of it counted; the walk resumes when called again)."""
    for i in range(start, len(ids)):
        r = ids[i] - base
        lo, hi, inp = ints[I_BLOCK_LO, r], ints[I_BLOCK_HI, r], ints[I_INPUT, r]
        if hi <= lo:                                   # no blocks: no lookup
            ints[I_CACHED, r] = 0
            continue
        own = blocks[lo - block_base:hi - block_base]
        hit, ht, w = _walk(own + offset if offset else own, inp, LOOKUP | STORE, ring, per_hit, per_new,
                           keys, place, stamp, codes, qbuf, st)
        if hit < 0:
            return i, hit, ht
        c = min(ht, inp - 1)
        ints[I_CACHED, r] = c
        acc[0] += c
        acc[1] += w
        acc[2] += hi - lo
        acc[3] += hit
        acc[4] += inp
        acc[5] += ht
        if hit:
            acc[6] += 1
    return len(ids), 0, 0
