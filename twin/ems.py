"""EMS (Elastic Memory Service): the context cache of KV blocks pooled over the CPU servers' DRAM.

Facts from reference/cloudmatrix384.md section 3 "EMS": keys (block hash ids, which are prefix
hashes) are spread over servers by consistent hashing; each server has a DRAM tier over an SSD tier,
LRU in each; prefill looks up the prompt's prefix and loads the hit blocks over UB. Here the cache is
real state (which block is where), so hit ratios come from the workload, not from a parameter.

Consistent hashing: each server owns `vnodes` points on a 64-bit ring (blake2b of "name#v"); a key
sits at (key * golden ratio) mod 2**64 and belongs to the next live point clockwise. The ring is
quantised to 2**16 slots, so finding a key's server is one multiply and one list index, which keeps
per-block operations well under a microsecond. Failing a server changes only the slots it owned.
Which block is cached where, and the LRU order of each server's tiers, live in one compact index
(`ems_index.BlockIndex`, about 30-60 bytes a block). A prompt's ids are hashed once for its lookup
and its store (one product gives the ring slot and the index slot) and walked in one Python loop; a
batch is its prompts in turn (most diurnal batches hold one prompt of about 8 blocks).
"""
from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b

import numpy as np

from .ems_index import _MIX, RING_BITS, RING_SHIFT, BlockIndex

_GOLDEN = _MIX   # Fibonacci hashing: spreads sequential ids evenly over the ring (and the index)
_M64 = (1 << 64) - 1
_GOLDEN_U64 = np.uint64(_GOLDEN)
VECTOR_BLOCKS = 12   # from this many blocks a vector step hashes faster than Python (measured: 8, 16)


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


def _capacity_blocks(where: str, value, block_bytes: float) -> float:
    if value is None:
        return float("inf")
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
        self._dram_cap = _capacity_blocks("dram_bytes_per_server", dram_bytes_per_server, block_bytes)
        self._ssd_cap = _capacity_blocks("ssd_bytes_per_server", ssd_bytes_per_server, block_bytes)
        self._dram_cap_n = min(self._dram_cap, 1 << 62)      # an int: int-to-int compares are faster
        self._blocks = BlockIndex(len(names))
        self._live = [True] * len(names)
        points = [(int.from_bytes(blake2b(f"{n}#{v}".encode(), digest_size=8).digest(), "big"), i)
                  for i, n in enumerate(names) for v in range(vnodes)]
        points.sort()
        self._ring_pos = np.array([p for p, _ in points], dtype=np.uint64)
        self._ring_owner = np.array([i for _, i in points], dtype=np.int64)
        self._rebuild_slots()
        self.reset_stats()

    def _rebuild_slots(self) -> None:
        live = np.array(self._live)[self._ring_owner]
        pos, owner = self._ring_pos[live], self._ring_owner[live]
        if len(pos) == 0:
            self._slots = None
            return
        slot_start = np.arange(1 << RING_BITS, dtype=np.uint64) << np.uint64(RING_SHIFT)
        self._slots = owner[np.searchsorted(pos, slot_start, side="left") % len(pos)].tolist()

    def server_of(self, block_id: int) -> str | None:
        """The live server that owns a key (None when every server is down)."""
        if self._slots is None:
            return None
        return self.servers[self._slots[((int(block_id) * _GOLDEN) & _M64) >> RING_SHIFT]]

    def reset_stats(self) -> None:
        """Zero the counters; cache contents stay."""
        self._lookups = self._hit_blocks = self._miss_blocks = self._dram_hits = self._ssd_hits = 0
        self._hit_tokens = self._miss_tokens = self._stored = 0
        self._demoted = self._dropped = self._lost = 0

    def _spill(self, s1: int) -> None:
        """DRAM over capacity: demote its LRU blocks to SSD, dropping SSD's LRU when that is full."""
        ix, dram, ssd = self._blocks, 2 * s1, 2 * s1 + 1
        count = ix.count
        while count[dram] > self._dram_cap:
            slot = ix.lru(dram)
            if self._ssd_cap > 0:
                ix.move(slot, ssd)
                self._demoted += 1
                if count[ssd] > self._ssd_cap:
                    ix.drop(ix.lru(ssd))
                    self._dropped += 1
            else:
                ix.drop(slot)
                self._dropped += 1

    @staticmethod
    def _products(arr: np.ndarray, ids: list) -> list:
        """id * MIX mod 2^64 of each id (arr, as the list ids): its ring slot and its index home
        slot in one product. Plain Python below VECTOR_BLOCKS blocks, one vector step from there."""
        if len(ids) < VECTOR_BLOCKS:
            return [k * _GOLDEN & _M64 for k in ids]
        return (arr.view(np.uint64) * _GOLDEN_U64).tolist()

    def _walk(self, ids: list, ps: list, per_hit: list | None, per_new: list | None) -> tuple[int, int, int]:
        """One prompt (BlockIndex.walk): room for its blocks first when storing, so the slots
        found during the walk stay valid."""
        ix = self._blocks
        if per_new is not None:
            ix.reserve(len(ids))
        return ix.walk(ids, ps, self._slots, per_hit, per_new, self._dram_cap_n, self._spill)

    def _count_lookup(self, blocks: int, d: int, s: int, tokens: int) -> int:
        """Count a lookup of `blocks` blocks and `tokens` tokens with d DRAM and s SSD prefix
        hits; returns its hit tokens."""
        hit = d + s
        ht = min(hit * self.block_tokens, tokens)
        self._lookups += 1
        self._hit_blocks += hit
        self._miss_blocks += blocks - hit
        self._dram_hits += d
        self._ssd_hits += s
        self._hit_tokens += ht
        self._miss_tokens += tokens - ht
        return ht

    def _per_server(self, per: list) -> dict[str, float]:
        bb = self.block_bytes
        return {self.servers[i]: c * bb for i, c in enumerate(per) if c}

    def lookup(self, block_ids, tokens: int | None = None) -> LookupResult:
        """Longest prefix of the blocks that is cached (a KV block is usable only after all earlier
        ones). Hits move to the MRU end; SSD hits are promoted to DRAM. `tokens` is the prompt length
        (default: full blocks), used for token statistics and hit_tokens."""
        arr = np.asarray(block_ids, dtype=np.int64)
        per = [0] * len(self.servers)
        n_dram = n_ssd = 0
        if self._slots is not None and len(arr):
            ids = arr.tolist()
            n_dram, n_ssd, _ = self._walk(ids, self._products(arr, ids), per, None)
        total = len(arr) * self.block_tokens if tokens is None else int(tokens)
        ht = self._count_lookup(len(arr), n_dram, n_ssd, total)
        return LookupResult(n_dram + n_ssd, n_dram, n_ssd, ht, self._per_server(per))

    def store(self, block_ids) -> StoreResult:
        """Insert the blocks not yet cached (new blocks go to DRAM); cached ones are left as they are."""
        arr = np.asarray(block_ids, dtype=np.int64)
        per = [0] * len(self.servers)
        new = 0
        if self._slots is not None and len(arr):
            ids = arr.tolist()
            new = self._walk(ids, self._products(arr, ids), None, per)[2]
        self._stored += new
        return StoreResult(new, self._per_server(per))

    def lookup_store(self, block_ids: np.ndarray, ptr: list[int], tokens: list[int],
                     per_hit: list[int], per_new: list[int]) -> BatchResult:
        """A prefill batch: for each prompt in turn (blocks block_ids[ptr[i]:ptr[i+1]], `tokens[i]`
        tokens), look up its prefix and then store its blocks, exactly as lookup() then store() per
        prompt. per_hit[s] / per_new[s] (one entry per server, `servers` order) are increased by
        the blocks server s sends for hits / receives as new: the caller sums them over many batches."""
        arr = np.asarray(block_ids, dtype=np.int64)
        hits, hit_tokens, new = [], [], 0
        for i in range(len(ptr) - 1):
            h, ht, w = self.lookup_store_one(arr[int(ptr[i]):int(ptr[i + 1])], tokens[i], per_hit, per_new)
            hits.append(h)
            hit_tokens.append(ht)
            new += w
        return BatchResult(hits, hit_tokens, new)

    def lookup_store_one(self, blocks: np.ndarray, tokens: int, per_hit: list[int],
                         per_new: list[int]) -> tuple[int, int, int]:
        """lookup_store() of one prompt (blocks: an int64 array) in plain Python numbers;
        returns (prefix blocks, hit tokens, new blocks)."""
        d = s = new = 0
        ids = blocks.tolist()
        if self._slots is not None and ids:
            d, s, new = self._walk(ids, self._products(blocks, ids), per_hit, per_new)
        self._stored += new
        return d + s, self._count_lookup(len(ids), d, s, tokens), new

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
        self._rebuild_slots()
        return lost

    def restore_server(self, name: str) -> None:
        """The server rejoins empty and takes its keys back; copies written elsewhere while it was down
        become unreachable and age out of those servers' LRU. No-op if it is up."""
        s = self._server(name)
        if not self._live[s]:
            self._live[s] = True
            self._rebuild_slots()

    def stats(self) -> dict:
        bb, count = self.block_bytes, self._blocks.count
        looked = self._hit_blocks + self._miss_blocks
        tokens = self._hit_tokens + self._miss_tokens
        dram, ssd = count[2::2], count[3::2]
        per_server = {n: {"live": self._live[i], "dram_bytes": dram[i] * bb, "ssd_bytes": ssd[i] * bb}
                      for i, n in enumerate(self.servers)}
        return {
            "lookups": self._lookups,
            "hit_blocks": self._hit_blocks, "miss_blocks": self._miss_blocks,
            "dram_hit_blocks": self._dram_hits, "ssd_hit_blocks": self._ssd_hits,
            "hit_tokens": self._hit_tokens, "miss_tokens": self._miss_tokens,
            "block_hit_ratio": self._hit_blocks / looked if looked else 0.0,
            "token_hit_ratio": self._hit_tokens / tokens if tokens else 0.0,
            "stored_blocks": self._stored,
            "demoted_blocks": self._demoted, "evicted_blocks": self._dropped, "lost_blocks": self._lost,
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
