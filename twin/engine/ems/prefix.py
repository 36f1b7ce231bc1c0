"""The EMS prefix cache as the engine uses it: which CPUs serve it, and one lookup per prefill batch.

A request's blocks are entered into EMS as soon as its batch starts (the KV is being made; later
lookups share it), so requests replayed in any order reach the in-order ideal hit ratio when
capacity is unlimited; the write traffic is counted with it.
"""
from __future__ import annotations

from twin.engine.ems.pool import EMS
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


def lookup(ems: EMS | None, req, ids: list[int], cur, acct, slot: int) -> int:
    """The batch's prefix hits in tokens (each request's, at least one token short of its prompt,
    stored in `req.cached`); hit and write counts go to the interval `cur` and the accounting
    `acct`. The batch's prompts are looked up and stored one after the other, in batch order."""
    if ems is None:
        return 0
    per_hit, per_new = acct.ems_hit[slot], acct.ems_new[slot]
    base, block_base, blocks = req.base, req.block_base, req.block_ids     # positions are absolute (window)
    lo_at, hi_at, inputs, hits = req.block_lo.a, req.block_hi.a, req.input.a, req.cached.a
    cached = new = 0
    for rid in ids:
        r = rid - base
        lo, hi, inp = lo_at.item(r), hi_at.item(r), inputs.item(r)
        if hi <= lo:                                   # no blocks: no lookup
            hits[r] = 0
            continue
        hit, ht, w = ems.lookup_store_one(blocks[lo - block_base:hi - block_base], inp, per_hit, per_new)
        cur.lookups_blocks += hi - lo
        cur.hit_blocks += hit
        cur.lookup_tokens += inp
        cur.hit_tokens += ht
        if hit:
            cur.hit_requests += 1
        c = hits[r] = min(ht, inp - 1)
        cached += c
        new += w
    acct.cache_writes(new)             # once per batch: the same float sum as before
    return cached
