"""EMS (Elastic Memory Service): the context cache of KV blocks pooled over the CPU servers' DRAM.

Facts from ref 3 "EMS" (Zuo et al., arXiv 2506.12708v2; docs/reference/sources.md): keys (block hash ids, which are prefix
hashes) are spread over servers by consistent hashing; each server has a DRAM tier over an SSD tier,
LRU in each; prefill looks up the prompt's prefix and loads the hit blocks over UB. Here the cache is
real state (which block is where), so hit ratios come from the workload, not from a parameter.

Consistent hashing: each server owns `vnodes` points on a 64-bit ring (blake2b of "name#v"); a key
sits at (key * golden ratio) mod 2**64 and belongs to the next live point clockwise. The ring is
quantised to 2**16 slots (an int32 array; -1 when every server is down), so finding a key's server
is one multiply and one index. Failing a server changes only the slots it owned. Which block is
cached where, the LRU order of each server's tiers and the lookup counters live in one compact index
(`ems_index.BlockIndex`, 23-47 bytes a block). A prompt's lookup and store is one compiled walk
(one product per id gives the ring slot and the index slot): ~2 us of CPU for a diurnal prompt of
8 blocks, against ~9.5 us in the Python loop it replaced. A batch is its prompts in turn (most
diurnal batches hold one prompt). Per-server block counts go to int64 arrays (the engine's
accounting rows); lists are accepted by lookup_store, copied in and out.
"""
from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b

import numpy as np

from twin.engine.ems import index
from twin.engine.ems.index import _MIX, LOOKUP, RING_BITS, RING_SHIFT, STORE, BlockIndex

_GOLDEN = _MIX   # Fibonacci hashing: spreads sequential ids evenly over the ring (and the index)
_M64 = (1 << 64) - 1


class UnknownServerError(KeyError):
    """A server name the EMS does not have; the message lists valid names."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class LookupResult:
    """prefix_blocks = dram_blocks + ssd_blocks usable from the start of the prompt; per_server_bytes
    is what each server must send (the engine turns it into UB transfer time)."""

    prefix_blocks: int
    dram_blocks: int
    ssd_blocks: int
    hit_tokens: int
    per_server_bytes: dict[str, float]


@dataclass(frozen=True)
class StoreResult:
    new_blocks: int
    per_server_bytes: dict[str, float]


@dataclass(frozen=True)
class BatchResult:
    """lookup_store() of a prefill batch: per prompt, prefix hit blocks and hit tokens."""

    prefix_blocks: list[int]
    hit_tokens: list[int]
    new_blocks: int


def _capacity_blocks(where: str, value, block_bytes: float) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value >= 0:
        raise ValueError(f"EMS: {where} = {value!r}: must be a number of bytes >= 0, or None for unlimited")
    return int(value // block_bytes)


class EMS:
    """Block-level EMS cache over named CPU servers; capacities are per server, in bytes."""

    def __init__(self, servers: list[str], dram_bytes_per_server: float | None,
                 ssd_bytes_per_server: float | None, block_bytes: float, vnodes: int = 64,
                 block_tokens: int = 512):
        names = list(servers)
        if not names or len(set(names)) != len(names) or not all(isinstance(s, str) and s for s in names):
            raise ValueError(f"EMS: servers = {names[:8]!r}: must be a non-empty list of distinct, "
                             f"non-empty names")
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, (int, float, np.number)) \
                or not 0 < block_bytes < float("inf"):
            raise ValueError(f"EMS: block_bytes = {block_bytes!r}: must be a number of bytes > 0")
        if isinstance(vnodes, bool) or not isinstance(vnodes, int) or not 1 <= vnodes <= 4096:
            raise ValueError(f"EMS: vnodes = {vnodes!r}: must be an integer from 1 to 4096")
        if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
            raise ValueError(f"EMS: block_tokens = {block_tokens!r}: must be an integer >= 1")
        self.servers = tuple(names)
        self.block_bytes = float(block_bytes)
        self.block_tokens = block_tokens
        self._index = {n: i for i, n in enumerate(names)}
        self._blocks = BlockIndex(len(names), dram_cap=_capacity_blocks("dram_bytes_per_server",
                                                                        dram_bytes_per_server, block_bytes),
                                  ssd_cap=_capacity_blocks("ssd_bytes_per_server", ssd_bytes_per_server,
                                                           block_bytes), block_tokens=block_tokens)
        self._live = [True] * len(names)
        points = [(int.from_bytes(blake2b(f"{n}#{v}".encode(), digest_size=8).digest(), "big"), i)
                  for i, n in enumerate(names) for v in range(vnodes)]
        points.sort()
        self._ring_pos = np.array([p for p, _ in points], dtype=np.uint64)
        self._ring_owner = np.array([i for _, i in points], dtype=np.int64)
        self._rebuild_ring()
        self.reset_stats()
        # load the compiled walk now (~0.3 s from numba's disk cache, once a process; a walk of no
        # blocks in mode 0 changes nothing), not inside the first prefill batch of a run
        z = np.zeros(len(names), dtype=np.int64)
        self._blocks.walk(np.zeros(0, dtype=np.int64), 0, 0, self._ring, z, z)

    def _rebuild_ring(self) -> None:
        """The ring's owner per slot (int32; all -1 when every server is down)."""
        self._live_mask = np.array(self._live)
        live = self._live_mask[self._ring_owner]
        pos, owner = self._ring_pos[live], self._ring_owner[live]
        if len(pos) == 0:
            self._ring = np.full(1 << RING_BITS, -1, dtype=np.int32)
            return
        slot_start = np.arange(1 << RING_BITS, dtype=np.uint64) << np.uint64(RING_SHIFT)
        self._ring = owner[np.searchsorted(pos, slot_start, side="left") % len(pos)].astype(np.int32)

    def server_of(self, block_id: int) -> str | None:
        """The live server that owns a key (None when every server is down)."""
        s = int(self._ring[((int(block_id) * _GOLDEN) & _M64) >> RING_SHIFT])
        return self.servers[s] if s >= 0 else None

    def reset_stats(self) -> None:
        """Zero the counters; cache contents stay."""
        self._blocks.st[index.COUNTERS] = 0
        self._lost = 0

    def _per_server(self, per: np.ndarray) -> dict[str, float]:
        bb = self.block_bytes
        return {self.servers[i]: c * bb for i, c in enumerate(per.tolist()) if c}

    def _walk(self, block_ids, tokens: int, mode: int, per_hit, per_new) -> tuple[int, int, int]:
        """BlockIndex.walk over this EMS's ring."""
        return self._blocks.walk(np.asarray(block_ids, dtype=np.int64), tokens, mode, self._ring,
                                 per_hit, per_new)

    def lookup(self, block_ids, tokens: int | None = None) -> LookupResult:
        """Longest prefix of the blocks that is cached (a KV block is usable only after all earlier
        ones). Hits move to the MRU end; SSD hits are promoted to DRAM. `tokens` is the prompt length
        (default: full blocks), used for token statistics and hit_tokens."""
        arr = np.asarray(block_ids, dtype=np.int64)
        per = np.zeros(len(self.servers), dtype=np.int64)
        total = len(arr) * self.block_tokens if tokens is None else int(tokens)
        ssd = self._blocks.st[index.SSD_HITS]
        hit, ht, _ = self._walk(arr, total, LOOKUP, per, per)
        ssd = int(self._blocks.st[index.SSD_HITS] - ssd)
        return LookupResult(hit, hit - ssd, ssd, ht, self._per_server(per))

    def store(self, block_ids) -> StoreResult:
        """Insert the blocks not yet cached (new blocks go to DRAM); cached ones are left as they are."""
        per = np.zeros(len(self.servers), dtype=np.int64)
        new = self._walk(block_ids, 0, STORE, per, per)[2]
        return StoreResult(new, self._per_server(per))

    def lookup_store(self, block_ids: np.ndarray, ptr: list[int], tokens: list[int],
                     per_hit, per_new) -> BatchResult:
        """A prefill batch: for each prompt in turn (blocks block_ids[ptr[i]:ptr[i+1]], `tokens[i]`
        tokens), look up its prefix and then store its blocks, exactly as lookup() then store() per
        prompt. per_hit[s] / per_new[s] (one entry per server, `servers` order: int64 arrays, or
        lists, updated at the end) are increased by the blocks server s sends for hits / receives
        as new: the caller sums them over many batches."""
        arr = np.asarray(block_ids, dtype=np.int64)
        ph, pn = np.asarray(per_hit, dtype=np.int64), np.asarray(per_new, dtype=np.int64)
        hits, hit_tokens, new = [], [], 0
        for i in range(len(ptr) - 1):
            h, ht, w = self._walk(arr[int(ptr[i]):int(ptr[i + 1])], int(tokens[i]), LOOKUP | STORE, ph, pn)
            hits.append(h)
            hit_tokens.append(ht)
            new += w
        for given, got in ((per_hit, ph), (per_new, pn)):
            if given is not got:       # a list: copied in and out
                given[:] = got.tolist()
        return BatchResult(hits, hit_tokens, new)

    def lookup_store_one(self, blocks: np.ndarray, tokens: int, per_hit, per_new) -> tuple[int, int, int]:
        """lookup_store() of one prompt (blocks: an int64 array; per_hit, per_new: int64 arrays,
        or lists through lookup_store); returns (prefix blocks, hit tokens, new blocks)."""
        if type(per_hit) is not np.ndarray:
            r = self.lookup_store(blocks, [0, len(blocks)], [tokens], per_hit, per_new)
            return r.prefix_blocks[0], r.hit_tokens[0], r.new_blocks
        return self._blocks.walk(blocks, tokens, LOOKUP | STORE, self._ring, per_hit, per_new)

    def walk_state(self) -> tuple:
        """What a compiled walk of prompts takes (twin.engine.ems.prefix): the ring, the key offset
        (0: the pool's own keys) and the block index (its arrays are replaced when it grows)."""
        return self._ring, 0, self._blocks

    def set_block_tokens(self, n: int) -> None:
        """Tokens a block holds in the lookups that follow (hit tokens count them): a pool shared by
        models whose blocks hold different numbers of tokens (twin.cloud.fabric) sets it per model."""
        self.block_tokens = self._blocks.st[index.BLOCK_TOKENS] = n

    def _server(self, name: str) -> int:
        if name not in self._index:
            sample = ", ".join(self.servers[:8]) + (f", ... ({len(self.servers)} in all)"
                                                    if len(self.servers) > 8 else "")
            raise UnknownServerError(f"EMS: unknown server {name!r} (valid: {sample})")
        return self._index[name]

    def fail_server(self, name: str) -> int:
        """The server's blocks are lost and its keys re-map to the next live servers on the ring
        (where they miss until stored again). Returns the number of blocks lost; no-op if already down."""
        s = self._server(name)
        if not self._live[s]:
            return 0
        lost = self._blocks.clear_server(s + 1)
        self._live[s] = False
        self._lost += lost
        self._rebuild_ring()
        return lost

    def up(self, name: str) -> bool:
        """Whether the server is in service (not failed nor taken out)."""
        return self._live[self._server(name)]

    def live_mask(self) -> np.ndarray:
        """In service or not, per server (in `servers` order; a copy of the one kept as the ring changes)."""
        return self._live_mask.copy()

    def restore_server(self, name: str) -> None:
        """The server rejoins empty and takes its keys back; copies written elsewhere while it was down
        become unreachable and age out of those servers' LRU. No-op if it is up."""
        s = self._server(name)
        if not self._live[s]:
            self._live[s] = True
            self._rebuild_ring()

    def resident_bytes(self) -> tuple[float, float]:
        """(DRAM, SSD) bytes held over all servers: what every interval records (stats() builds
        a dict per server as well)."""
        count = self._blocks.count.tolist()
        return sum(count[2::2]) * self.block_bytes, sum(count[3::2]) * self.block_bytes

    def stats(self) -> dict:
        bb, count = self.block_bytes, self._blocks.count.tolist()
        (lookups, hit_blocks, miss_blocks, dram_hits, ssd_hits, hit_tokens, miss_tokens, stored,
         demoted, dropped) = self._blocks.st[index.COUNTERS].tolist()
        looked = hit_blocks + miss_blocks
        tokens = hit_tokens + miss_tokens
        dram, ssd = count[2::2], count[3::2]
        per_server = {n: {"live": self._live[i], "dram_bytes": dram[i] * bb, "ssd_bytes": ssd[i] * bb}
                      for i, n in enumerate(self.servers)}
        return {
            "lookups": lookups,
            "hit_blocks": hit_blocks, "miss_blocks": miss_blocks,
            "dram_hit_blocks": dram_hits, "ssd_hit_blocks": ssd_hits,
            "hit_tokens": hit_tokens, "miss_tokens": miss_tokens,
            "block_hit_ratio": hit_blocks / looked if looked else 0.0,
            "token_hit_ratio": hit_tokens / tokens if tokens else 0.0,
            "stored_blocks": stored,
            "demoted_blocks": demoted, "evicted_blocks": dropped, "lost_blocks": self._lost,
            "dram_bytes": sum(dram) * bb, "ssd_bytes": sum(ssd) * bb,
            "resident_blocks": sum(dram) + sum(ssd),
            "live_servers": sum(self._live),
            "per_server": per_server,
        }


@dataclass(frozen=True)
class ModelCache:
    """Model-weight load times (reference section 3 "Model caching": 671B INT8 model, 8 instances,
    object storage at 2.5 GB/s; cold ~2,560 s with no cache, ~320 s with EMS, warm ~5 s).

    Sources: "ems" = warm start from the EMS pool over UB; "obs" = cold start through EMS (object
    storage read once, instances fill from EMS); "no_cache" = every instance reads object storage,
    sharing its bandwidth. Times scale linearly with model_bytes."""

    model_bytes: float = 671e9      # section 2: 671B parameters; section 2: INT8 = 1 byte each
    instances: int = 8              # section 3 Model caching: 8 instances
    obs_bytes_per_s: float = 2.5e9  # section 3 Model caching: object storage at 2.5 GB/s
    # [D] the paper's ~320 s per copy vs 671 GB / 2.5 GB/s = 268 s: effective 84% of nominal
    obs_efficiency: float = 671e9 / 2.5e9 / 320
    # [D] warm start ~5 s for 671 GB from EMS: ~134 GB/s
    ems_bytes_per_s: float = 671e9 / 5

    def __post_init__(self):
        for name in ("model_bytes", "obs_bytes_per_s", "obs_efficiency", "ems_bytes_per_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"ModelCache: {name} = {v!r}: must be a number > 0")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or self.instances < 1:
            raise ValueError(f"ModelCache: instances = {self.instances!r}: must be an integer >= 1")

    def load_time_s(self, source: str) -> float:
        obs_copy = self.model_bytes / (self.obs_bytes_per_s * self.obs_efficiency)
        times = {"ems": self.model_bytes / self.ems_bytes_per_s, "obs": obs_copy,
                 "no_cache": obs_copy * self.instances}
        if source not in times:
            raise ValueError(f"ModelCache.load_time_s: source = {source!r}: must be one of {', '.join(times)}")
        return times[source]
