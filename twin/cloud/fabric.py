"""What the models of a MaaS day share: the EMS pool and the links of the fabric.

EMS pool: one twin.engine.ems.pool.EMS over the servers of the day's system holds every model's KV
blocks in one LRU with one capacity (the models' deployment quotas, `ems_dram_fraction`, added up:
what the quotas held, now shared). A model's keys are its own: its block ids sit in a key range of
its own (`KEY_SHIFT`), so one model's prompt never hits another model's blocks. The pool keeps
blocks as pages of one size: a model's block holds the tokens whose KV fills a page (`PAGE_TOKENS`
tokens of the model with the least KV per token), so a block of any model takes the same share of
the capacity, and one model's blocks can evict another's.

Fabric: the engines of a day run on clocks of their own, in lockstep (twin.cloud.maas), so their KV
flows cannot share one max-min solve. They share the links at the control step's grain instead:
after each step every model's KV bytes (KvTransfers.sent) are put on the topology's routes between
the physical nodes of its groups (die k of one node to die k of the other, each route split as its
max flow splits it), and for the next step each instance's transfer bandwidth is scaled by the share
the other models left on the links its last step's routes crossed (the smallest 1 - others' GB/s /
capacity), at least MIN_LEFT. A model's own flows still share its links flow by flow, as in a
single-model run.
"""
from __future__ import annotations

import numpy as np

from twin.model.config import CatalogError, catalog
from twin.engine.ems.pool import EMS
from twin.topology import topology

PAGE_TOKENS = 512     # the scenario's default block size (twin.engine.scenario.Scenario.block_size)
MIN_BLOCK = 16        # the scenario's smallest block size (Scenario.block_size)
KEY_SHIFT = 48        # model i's keys start at (i + 1) << KEY_SHIFT (synthetic ids stay far below 2^48)
MIN_LEFT = 0.5        # assumption: max-min fairness leaves an instance at least half of a link others load


def block_tokens(kv_bytes: dict[str, float]) -> dict[str, int]:
    """Each model's block size in tokens: as many as fill one page (its KV bytes per token given)."""
    page = PAGE_TOKENS * min(kv_bytes.values())
    out = {m: int(page // b) for m, b in kv_bytes.items()}
    for m, n in out.items():
        if n < MIN_BLOCK:
            raise CatalogError(f"maas: {m} holds {n} tokens in a {page / 1e6:.1f} MB EMS page "
                               f"(allowed: at least {MIN_BLOCK}; its KV per token is over "
                               f"{PAGE_TOKENS // MIN_BLOCK}x the smallest model's)")
    return out


class ModelEms:
    """One model's view of the shared pool, what its engine reads as `eng.ems`: its own keys and
    block size; servers, health and statistics are the pool's."""

    def __init__(self, pool: EMS, index: int, block_tokens: int, kv_bytes: float):
        self.pool, self.offset = pool, (index + 1) << KEY_SHIFT
        self.block_tokens, self.block_bytes = block_tokens, block_tokens * kv_bytes
        self.servers = pool.servers
        for name in ("up", "live_mask", "fail_server", "restore_server", "stats", "resident_bytes"):
            setattr(self, name, getattr(pool, name))

    def lookup_store_one(self, blocks: np.ndarray, tokens: int, per_hit, per_new) -> tuple[int, int, int]:
        """EMS.lookup_store_one of the model's keys and block size."""
        self._own_blocks()
        return self.pool.lookup_store_one(blocks + self.offset, tokens, per_hit, per_new)

    def walk_state(self) -> tuple:
        """EMS.walk_state with the model's key offset, the pool set to its block size."""
        self._own_blocks()
        ring, _, index = self.pool.walk_state()
        return ring, self.offset, index

    def _own_blocks(self) -> None:
        if self.pool.block_tokens != self.block_tokens:
            self.pool.set_block_tokens(self.block_tokens)


def shared_ems(system: str, deployments: dict[str, str], kv_bytes: dict[str, float],
               blocks: dict[str, int]) -> dict[str, ModelEms]:
    """One pool for the models (their deployments, KV bytes per token and block sizes), a view each."""
    cat = catalog()
    sysm = cat.system(system)
    cpu = cat.chip(sysm.cpu)
    deps = {m: cat.deployment(d) for m, d in deployments.items()}
    fraction = sum(d.ems_dram_fraction for d in deps.values())
    if fraction > 1:
        raise CatalogError(f"maas: the models' ems_dram_fraction add up to {fraction:g} of the EMS servers' "
                           f"DRAM (allowed: at most 1)")
    nodes = max(d.ems_nodes for d in deps.values())
    servers = topology(system).cpu_ids[:nodes * sysm.cpus_per_node]
    page = PAGE_TOKENS * min(kv_bytes.values())
    pool = EMS(list(servers), cpu.dram_gb * 1e9 * fraction, cpu.ssd_gb * 1e9, page, block_tokens=PAGE_TOKENS)
    return {m: ModelEms(pool, i, blocks[m], kv_bytes[m]) for i, m in enumerate(deployments)}


class Fabric:
    """The links of one plane of the day's system and the GB/s each model's KV transfers put on them."""

    def __init__(self, system: str, plane: str):
        self.topo = topology(system)
        self.plane = plane
        self.dies_per_node = len(self.topo.die_ids) // catalog().system(system).nodes
        self._links: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.load: dict[str, np.ndarray] = {}     # model -> GB/s per link over the last step

    def links(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """The links node a's dies reach node b's over (die k to die k), and the share of a's
        bytes to b that each carries."""
        key = (a, b)
        got = self._links.get(key)
        if got is None:
            ids, k = self.topo.die_ids, self.dies_per_node
            eids, share = [], []
            for d in range(k):
                r = self.topo.route(ids[a * k + d], ids[b * k + d], self.plane)
                for path, gbps in zip(r.path_eids, r.flow_gbps):
                    path = path[path >= 0]
                    eids.extend(path.tolist())
                    share.extend([gbps / r.bandwidth_gbps / k] * len(path))
            got = self._links[key] = (np.array(eids, dtype=np.int64), np.array(share))
        return got

    def step(self, sent: dict[str, list[tuple[int, int, list[int], list[int], float]]],
             dt: float) -> dict[str, dict[int, float]]:
        """Each model's transfers of the last `dt` seconds (src slot, dst slot, their physical
        nodes, bytes) on the links; returns per model and instance slot the share of its
        bandwidth the other models leave it (slots that sent or received nothing: 1)."""
        cap = self.topo.capacity
        touched: dict[str, dict[int, list[np.ndarray]]] = {}
        for m, rows in sent.items():
            load, mine = np.zeros(len(cap)), touched.setdefault(m, {})
            for src, dst, src_nodes, dst_nodes, nbytes in rows:
                each = nbytes / dt / 1e9 / (len(src_nodes) * len(dst_nodes))
                for a in src_nodes:
                    for b in dst_nodes:
                        if a == b:
                            continue
                        eids, share = self.links(a, b)
                        np.add.at(load, eids, share * each)
                        mine.setdefault(src, []).append(eids)
                        mine.setdefault(dst, []).append(eids)
            self.load[m] = load
        total = sum(self.load[m] for m in sent)
        left = {}
        for m, slots in touched.items():
            others = total - self.load[m]
            free = np.where(cap > 0, 1 - others / np.where(cap > 0, cap, 1), 1.0)
            left[m] = {s: max(MIN_LEFT, float(free[np.concatenate(e)].min())) for s, e in slots.items()}
        return left
