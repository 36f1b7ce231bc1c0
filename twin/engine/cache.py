"""The EMS prefix cache as the engine uses it: which CPUs serve it, and one lookup per prefill batch.

A request's blocks are entered into EMS as soon as its batch starts (the KV is being made; later
lookups share it), so requests replayed in any order reach the in-order ideal hit ratio when
capacity is unlimited; the write traffic is counted with it.
"""
from __future__ import annotations

import numpy as np

from ..ems import EMS
from ..topology import parse


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


def server_nodes(ems: EMS | None) -> dict[str, int]:
    """EMS server id -> its node number (from the topology's id grammar)."""
    return {s: parse(s)["node"] for s in ems.servers} if ems is not None else {}


def lookup(ems: EMS | None, req, ids: np.ndarray, cur, acct, slot: int) -> np.ndarray:
    """Prefix hits per request (tokens; at least one token is left to compute), stored in
    `req.cached`; hit and write counts go to the interval `cur` and the accounting `acct`."""
    if ems is None:
        return np.zeros(len(ids), dtype=np.int64)
    rows = req.rows(ids)
    out = np.array(_lookup(ems, req, req.block_lo.a[rows].tolist(), req.block_hi.a[rows].tolist(),
                           req.input.a[rows].tolist(), cur, acct, slot), dtype=np.int64)
    req.cached.a[rows] = out
    return out


def lookup_one(ems: EMS | None, req, rid: int, cur, acct, slot: int) -> int:
    """lookup() of a one-request batch in plain Python numbers (no arrays but its block ids)."""
    if ems is None:
        return 0
    r = rid - req.base
    lo, hi, inp = req.block_lo.a.item(r), req.block_hi.a.item(r), req.input.a.item(r)
    if hi <= lo:                                       # no blocks: no lookup
        req.cached.a[r] = 0
        return 0
    base = req.block_base                              # positions are absolute (window)
    hit, ht, new = ems.lookup_store_one(req.block_ids[lo - base:hi - base], inp,
                                        acct.ems_hit[slot], acct.ems_new[slot])
    cur.lookups_blocks += hi - lo
    cur.hit_blocks += hit
    cur.lookup_tokens += inp
    cur.hit_tokens += ht
    if hit:
        cur.hit_requests += 1
    acct.cache_writes(new)
    cached = req.cached.a[r] = min(ht, inp - 1)
    return cached


def _lookup(ems: EMS, req, lo: list, hi: list, inp: list, cur, acct, slot: int) -> list:
    """The batch's prompts (block positions [lo, hi), `inp` tokens) looked up and stored."""
    sel = [j for j in range(len(lo)) if hi[j] > lo[j]]  # requests without blocks: no lookup
    cached = [0] * len(lo)
    if sel:
        ptr = [0]
        for j in sel:
            ptr.append(ptr[-1] + hi[j] - lo[j])
        bids, base = req.block_ids, req.block_base     # positions are absolute (window)
        blocks = (bids[lo[sel[0]] - base:hi[sel[0]] - base] if len(sel) == 1
                  else np.concatenate([bids[lo[j] - base:hi[j] - base] for j in sel]))
        tokens = [inp[j] for j in sel]
        r = ems.lookup_store(blocks, ptr, tokens, acct.ems_hit[slot], acct.ems_new[slot])
        cur.lookups_blocks += ptr[-1]
        cur.hit_blocks += sum(r.prefix_blocks)
        cur.lookup_tokens += sum(tokens)
        cur.hit_tokens += sum(r.hit_tokens)
        cur.hit_requests += sum(1 for h in r.prefix_blocks if h)
        for j, ht, t in zip(sel, r.hit_tokens, tokens):
            cached[j] = min(ht, t - 1)
        acct.cache_writes(r.new_blocks)
    return cached
