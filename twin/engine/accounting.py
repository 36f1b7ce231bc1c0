"""Traffic, goodput and windows: what each batch puts on the planes, and the windows reports use.

Traffic is added up between groups of nodes (group = instance slot, or n_slots + node) on the hot
path, one scalar add per batch, and spread evenly over the groups' node pairs once per interval
(`flush`). The bytes of one step's MoE all-to-all come from `twin.model.rules.a2a_step_bytes`, the same
rule the predictor times; the MTP tokens per step from `twin.model.rules.draft_tokens`.
The fault table's goodput and SLO columns both use `fault_windows` (one definition).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from twin.model import rules

BEFORE_S = 60.0   # "before" a fault = the minute before it (or the fault's length, if shorter)
A2A_MEMO = 4096   # all-to-all bytes memoised per step shape, cleared when this full (speed only)


def fault_windows(at_s: float, end_s: float, interval_s: float,
                  next_at: float | None = None) -> tuple[tuple[float, float], tuple[float, float]]:
    """(before, during) windows of a fault from `at_s` to `end_s`: intervals ending in (t0, t1].
    "During" stops where the next fault struck (`next_at`), so a later fault's effect never counts
    as an earlier one's."""
    if next_at is not None and next_at > at_s:
        end_s = min(end_s, next_at)
    span = max(end_s - at_s, interval_s)
    return (at_s - min(span, BEFORE_S), at_s), (at_s, end_s)


def mean_in(t: np.ndarray, v: np.ndarray, window: tuple[float, float]) -> float | None:
    """Mean of v over the intervals ending in (t0, t1], to 2 decimals; None ("not measured", never
    NaN in JSON or a page) when no interval ended in that window (or all its values are NaN)."""
    t0, t1 = window
    sel = (t > t0) & (t <= t1 + 1e-9)
    vals = v[sel]
    vals = vals[~np.isnan(vals)]
    return round(float(vals.mean()), 2) if len(vals) else None


def rise_in(t: np.ndarray, v: np.ndarray, window: tuple[float, float]) -> float | None:
    """How much v rose across the window: the mean of its second half over the mean of its first,
    minus 1, to 3 decimals (0.25: a quarter higher by the end). None when a half held no interval
    or the first half's mean is not positive. A fault's "before" that is still rising was measured
    while the twin warmed up, so comparing it with "during" says nothing about the fault."""
    t0, t1 = window
    mid = (t0 + t1) / 2
    first, second = mean_in(t, v, (t0, mid)), mean_in(t, v, (mid, t1))
    if first is None or second is None or first <= 0:
        return None
    return round(second / first - 1.0, 3) + 0.0      # + 0.0: never "-0"


class Accounting:
    """Per-interval traffic of one engine's instances, handed to `metrics.cur`."""

    def __init__(self, metrics, instances: list, n_nodes: int, dep, model, moe_layers: int,
                 kv_bytes: float, servers: list[str], server_node: dict[str, int], block_bytes: float):
        self.metrics, self.dep, self.model = metrics, dep, model
        self.moe_layers, self.kv_bytes, self.block_bytes = moe_layers, kv_bytes, block_bytes
        self.drafts = rules.draft_tokens(model.mtp_modules, dep.mtp, dep.mtp_draft_steps)
        self._ep = {pool: getattr(dep, pool).ep for pool in ("prefill", "decode")}
        self._cache_plane = "ub" if dep.cache_plane == "ub" else "vpc"
        n_groups = len(instances) + n_nodes
        self._spread = np.zeros((n_groups, n_nodes))
        for inst in instances:
            self._spread[inst.slot, inst.nodes] = 1.0 / len(inst.nodes)
        self._spread[len(instances) + np.arange(n_nodes), np.arange(n_nodes)] = 1.0
        self._n_groups = n_groups
        self._srv_node = np.zeros((len(servers), n_nodes))       # server -> its node
        for i, s in enumerate(servers):
            self._srv_node[i, server_node[s]] = 1.0
        self.n_slots = len(instances)
        self._reset_groups()
        self._a2a: dict[tuple, float] = {}   # (pool, tokens, dies) -> bytes of a step

    def _reset_groups(self) -> None:
        """Bytes between groups: UB in a dict of the (src, dst) pairs that carried any (a few
        dozen of the 63 x 63 on the 384-NPU deployment; the same float sums per pair as a
        full matrix, without building one from Python lists each interval), RDMA in plain lists.
        EMS blocks per instance slot and server: sent for hits, written (int64 rows added to by
        the EMS walk), views of one array summed per node in one product."""
        self._g_ub: dict[tuple[int, int], float] = {}
        n = self._n_groups
        self._g_rdma = ([0.0] * n, [0.0] * n)       # bytes out of, into each group
        self._ems_blocks = np.zeros((2 * self.n_slots, len(self._srv_node)), dtype=np.int64)
        self.ems_hit, self.ems_new = self._ems_blocks[:self.n_slots], self._ems_blocks[self.n_slots:]

    def flush(self) -> None:
        """Hand the interval's totals between groups to `metrics.cur` and start the next
        interval's: they are spread over node pairs (`spread`) only if that interval's traffic is
        read (a bench never reads it; spreading every interval was a fifth of closing one)."""
        self.metrics.cur.traffic = partial(self.spread, self._g_ub, self._ems_blocks, self._g_rdma)
        self._reset_groups()

    def spread(self, g_ub_pairs: dict, ems_blocks: np.ndarray, g_rdma: tuple) -> tuple:
        """UB bytes between nodes, RDMA bytes out of and into each node: groups' totals spread
        evenly over the groups' nodes. EMS blocks are summed per (slot, node) as counts, then
        turned into bytes: the same floats as summing each server's bytes (a block is a whole
        number of bytes, so every sum is exact)."""
        sp = self._spread
        g_ub = np.zeros((self._n_groups, self._n_groups))
        for (src, dst), nbytes in g_ub_pairs.items():      # a few dozen pairs
            g_ub[src, dst] = nbytes
        if len(self._srv_node):
            k = self.n_slots
            by_node = ems_blocks @ self._srv_node * self.block_bytes     # (hit, new) x slot x node
            g_ub[k:, :k] += by_node[:k].T       # node's servers -> slot (hits)
            g_ub[:k, k:] += by_node[k:]         # slot -> node's servers (writes)
        out, into = g_rdma
        if not any(out):            # no RDMA bytes on most deployments (none out, none in)
            return sp.T @ g_ub @ sp, np.zeros(sp.shape[1]), np.zeros(sp.shape[1])
        return sp.T @ g_ub @ sp, np.array(out) @ sp, np.array(into) @ sp

    def node_traffic(self, src: int, dst: int, nbytes: float, plane: str = "ub") -> None:
        """Bytes between two traffic groups."""
        if plane == "ub":
            g, key = self._g_ub, (src, dst)
            g[key] = g.get(key, 0.0) + nbytes
        else:
            self._g_rdma[0][src] += nbytes
            self._g_rdma[1][dst] += nbytes

    def a2a_bytes(self, pool: str, tokens_per_die: float, dies: int) -> float:
        """UB bytes of one step's MoE dispatch + combine over all MoE layers."""
        m = self.model
        return rules.a2a_step_bytes(self._ep[pool], m.top_k, tokens_per_die, dies,
                                    self.moe_layers, m.dispatch_bytes_per_token, m.combine_bytes_per_token)

    def _step_a2a(self, pool: str, tokens: float, dies: int) -> float:
        """a2a_bytes of a step of `tokens` over `dies`, memoised: most steps repeat a few shapes
        (batch sizes, prompt lengths), and the rule costs four calls."""
        key = (pool, tokens, dies)
        a2a = self._a2a.get(key)
        if a2a is None:
            if len(self._a2a) >= A2A_MEMO:
                self._a2a.clear()
            a2a = self._a2a[key] = self.a2a_bytes(pool, tokens / dies, dies)
        return a2a

    def prefill(self, inst, new_tokens: float, cached_tokens: float) -> None:
        dies = len(inst.dies)
        a2a = self._step_a2a("prefill", new_tokens, dies)
        loaded = cached_tokens * self.kv_bytes
        cur = self.metrics.cur
        if self._cache_plane == "ub":
            cur.plane_bytes["ub"] += a2a + loaded
        else:
            cur.plane_bytes["ub"] += a2a
            cur.plane_bytes["vpc"] += loaded
        cur.cache_bytes += loaded
        g, key = self._g_ub, (inst.slot, inst.slot)          # node_traffic(), once per batch
        g[key] = g.get(key, 0.0) + a2a

    def decode(self, inst, n: int) -> None:
        a2a = self._step_a2a("decode", (1 + self.drafts) * n, len(inst.dies))
        cur = self.metrics.cur
        cur.plane_bytes["ub"] += a2a
        cur.batch_samples += n / inst.npus
        cur.batch_steps += 1
        self.node_traffic(inst.slot, inst.slot, a2a)

    def kv_transfer(self, src, dst, nbytes: float, plane: str) -> None:
        self.metrics.cur.plane_bytes[plane] += nbytes
        self.node_traffic(src.slot, dst.slot, nbytes, plane)

    def cache_writes(self, new_blocks: int) -> None:
        self.metrics.cur.plane_bytes[self._cache_plane] += new_blocks * self.block_bytes
