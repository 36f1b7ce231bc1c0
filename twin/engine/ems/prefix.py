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
    `acct`. The batch's prompts are looked up and stored one after the other, in batch order:
    compiled (`_walk_rows`), but for a walk that stops for Python (the index grows, renumbers or
    rebuilds a queue), which `ems.lookup_store_one` walks before the compiled pass goes on."""
    if ems is None:
        return 0
    per_hit, per_new = acct.ems_hit[slot], acct.ems_new[slot]
    acc = np.zeros(N_ACC, np.int64)
    done = 0
    while True:
        ring, offset, arrays = ems.walk_state()        # (the index's arrays change as it grows)
        done += _walk_rows(ids[done:] if done else ids, req.base, req.ints, req.block_ids, req.block_base, offset, ring,
                           per_hit, per_new, *arrays, acc)
        if done == len(ids):
            break
        _walk_one(ems, req, ids.item(done), per_hit, per_new, acc)
        done += 1
    cached, new, looked, hit_blocks, tokens, hit_tokens, hit_requests = acc.tolist()
    cur.lookups_blocks += looked
    cur.hit_blocks += hit_blocks
    cur.lookup_tokens += tokens
    cur.hit_tokens += hit_tokens
    cur.hit_requests += hit_requests
    acct.cache_writes(new)             # once per batch: the same float sum as before
    return cached


N_ACC = 7   # the walks' sums (_add): hit tokens kept, new blocks, blocks looked up, hit blocks, tokens
#             looked up, hit tokens, prompts with a hit


@kernel
def _add(acc, lo, hi, inp, hit, ht, w):
    """One prompt's walk into the sums; returns its hit tokens kept (at least one short of it)."""
    c = min(ht, inp - 1)
    acc[0] += c
    acc[1] += w
    acc[2] += hi - lo
    acc[3] += hit
    acc[4] += inp
    acc[5] += ht
    if hit:
        acc[6] += 1
    return c


def _walk_one(ems, req, rid: int, per_hit, per_new, acc) -> None:
    """Request `rid`'s walk in Python (where the index's stops are handled), into the sums."""
    r = rid - req.base
    lo, hi, inp = req.block_lo.a.item(r), req.block_hi.a.item(r), req.input.a.item(r)
    hit, ht, w = ems.lookup_store_one(req.block_ids[lo - req.block_base:hi - req.block_base], inp, per_hit, per_new)
    req.cached.a[r] = _add(acc, lo, hi, inp, hit, ht, w)


@kernel(signature=f"({INT64}, int64, {INTS}, {INT64}, int64, int64, int32[::1], {INT64}, {INT64}, {INT64}, "
                  f"int16[::1], int32[::1], int64[:, ::1], int32[:, ::1], {INT64}, {INT64})")
def _walk_rows(ids, base, ints, blocks, block_base, offset, ring, per_hit, per_new, keys, place, stamp, codes, qbuf,
               st, acc):
    """lookup()'s walks: each request of `ids` in turn looks up and stores its blocks
    (blocks[block_lo - block_base:block_hi - block_base] of its row, plus `offset`, a model's keys
    in a shared pool); a request without blocks has no walk and no hit. Its hit tokens kept go to
    its `cached` row, its counts into `acc` (_add). Returns how many requests it walked: the rest,
    from the one whose walk stopped for Python (nothing of its walk counted), are the caller's."""
    for i in range(len(ids)):
        r = ids[i] - base
        lo, hi, inp = ints[I_BLOCK_LO, r], ints[I_BLOCK_HI, r], ints[I_INPUT, r]
        if hi <= lo:                                   # no blocks: no lookup
            ints[I_CACHED, r] = 0
            continue
        own = blocks[lo - block_base:hi - block_base]
        hit, ht, w = _walk(own + offset if offset else own, inp, LOOKUP | STORE, ring, per_hit, per_new,
                           keys, place, stamp, codes, qbuf, st)
        if hit < 0:
            return i
        ints[I_CACHED, r] = _add(acc, lo, hi, inp, hit, ht, w)
    return len(ids)
