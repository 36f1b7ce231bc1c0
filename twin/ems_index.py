"""Compact exact-LRU index of the EMS cache: which (block id, server) is cached, in which tier.

One open-addressing hash table (linear probing) over numpy arrays holds every cached block of
every server: its id (int64), its place (int16: 2 * (server + 1) + tier, tier 0 = DRAM, 1 = SSD;
0 = empty slot, -1 = deleted) and its last-touch stamp (int64, from one clock that only grows).
That is 18 bytes a slot at a load of 0.3-0.6 (a resize doubles), 30-60 bytes a block, against 130-145 in
per-server OrderedDicts (a Python int key, a list node, the dict's entry and index).

LRU stays exact without a linked list: within a (server, tier) the least recently used block is the
one with the smallest stamp. Eviction reads a queue of that place's oldest slots, built when needed
by one vector step (the k smallest stamps, sorted); a queued slot whose stamp or place has changed
since was touched, moved or freed, and is skipped: every block touched after the queue was built is
newer than everything in it, so the first valid entry is always the true LRU block.

Per-block operations (probe, touch, insert) run in Python over memoryviews of the arrays (about
20 ns an access): a prefill batch holds a few to a few hundred blocks, where one numpy call costs
as much as ten Python steps. Bulk work (queue building, a server's failure, resizing) is vectorised.
"""
from __future__ import annotations

import numpy as np

_MIX = 0x9E3779B97F4A7C15        # Fibonacci hashing (the EMS ring's multiplier: one product serves both)
_M64 = (1 << 64) - 1
_MIX_U64 = np.uint64(_MIX)
RING_BITS = 16                   # EMS ring slots: 2^16, indexed by a product's top bits
RING_SHIFT = 64 - RING_BITS
MAX_LOAD = 0.6                   # used slots (live + deleted) per slot before a resize
REHASH_CHUNK = 1 << 18           # old slots moved per vector step of a resize
QUEUE_MIN = 256                  # eviction queue: at least this many oldest slots per build


class BlockIndex:
    """Cached blocks of `n_servers` servers, two tiers each; counts per place in `count`."""

    def __init__(self, n_servers: int, bits: int = 12):
        self.count = [0] * (2 * n_servers + 2)   # blocks per place code (index = code)
        self.clock = 0                           # next stamp
        self._queues: dict[int, list] = {}       # code -> [slots, stamps, position]
        self._alloc(bits)

    # ---- storage --------------------------------------------------------------------------------
    def _alloc(self, bits: int) -> None:
        self.bits, self.size = bits, 1 << bits
        self.mask, self.shift = self.size - 1, 64 - bits
        self._shift_u64 = np.uint64(self.shift)
        self.keys = np.zeros(self.size, dtype=np.int64)
        self.place = np.zeros(self.size, dtype=np.int16)
        self.stamp = np.zeros(self.size, dtype=np.int64)
        self.used = 0                            # live + deleted slots
        self._views()

    def _views(self) -> None:
        self.K, self.P, self.T = memoryview(self.keys), memoryview(self.place), memoryview(self.stamp)
        self._queues.clear()                     # slots moved

    def home(self, key: int) -> int:
        return ((key & _M64) * _MIX & _M64) >> self.shift

    @property
    def live(self) -> int:
        return sum(self.count)

    def reserve(self, n: int) -> bool:
        """Make room for n inserts without a resize in between; True if the slots moved."""
        if self.used + n <= MAX_LOAD * self.size:
            return False
        bits = self.bits               # the smallest size at which the load is at most 0.45
        while self.live + n > 0.75 * MAX_LOAD * (1 << bits):
            bits += 1
        self._rehash(bits)
        return True

    def _rehash(self, bits: int) -> None:
        """Move the live entries into a new table, a chunk of old slots at a time (so the
        moment's extra memory is the new table and one chunk, not a copy of the old)."""
        keys, place, stamp, queues = self.keys, self.place, self.stamp, self._queues
        self.K = self.P = self.T = None          # release the views of the old arrays
        self._alloc(bits)
        for c in range(0, len(keys), REHASH_CHUNK):
            live = np.flatnonzero(place[c:c + REHASH_CHUNK] > 0) + c
            self._place_all(keys[live], place[live], stamp[live])
        del keys, place, stamp, queues

    def _place_all(self, keys: np.ndarray, place: np.ndarray, stamp: np.ndarray) -> None:
        """Insert distinct (key, server) entries into a table that holds none of them: every
        pending entry tries its current slot; of those meeting at a free slot the first wins; the
        rest move one slot on (linear probing, vectorised)."""
        h = ((keys.view(np.uint64) * _MIX_U64) >> np.uint64(self.shift)).astype(np.int64)
        pend = np.arange(len(keys))
        while len(pend):
            hp = h[pend]
            free = self.place[hp] <= 0
            slots, first = np.unique(hp[free], return_index=True)
            win = pend[free][first]
            self.keys[slots], self.place[slots], self.stamp[slots] = keys[win], place[win], stamp[win]
            lost = np.ones(len(pend), dtype=bool)
            lost[np.flatnonzero(free)[first]] = False
            pend = pend[lost]
            h[pend] = (h[pend] + 1) & self.mask
        self.used += len(keys)

    # ---- per-block operations ---------------------------------------------------------------------
    def find(self, key: int, s1: int, h: int) -> tuple[int, int]:
        """(slot of key on server s1 - 1 or -1, first free slot on its probe path)."""
        K, P, mask, free = self.K, self.P, self.mask, -1
        while True:
            p = P[h]
            if p == 0:
                return -1, (h if free < 0 else free)
            if p >> 1 == s1 and K[h] == key:
                return h, free
            if p < 0 and free < 0:
                free = h
            h = (h + 1) & mask

    def put(self, slot: int, key: int, code: int) -> None:
        """A new block at a free slot (from find), most recently used in its place."""
        if self.P[slot] == 0:
            self.used += 1
        self.K[slot], self.P[slot], self.T[slot] = key, code, self.clock
        self.clock += 1
        self.count[code] += 1

    def move(self, slot: int, code: int) -> None:
        """Touch a block: most recently used, in place `code` (a promotion or demotion if new)."""
        old = self.P[slot]
        if old != code:
            self.count[old] -= 1
            self.count[code] += 1
            self.P[slot] = code
        self.T[slot] = self.clock
        self.clock += 1

    def drop(self, slot: int) -> None:
        self.count[self.P[slot]] -= 1
        self.P[slot] = -1

    def prefix(self, ids: list, ps: list, ring: list, per: list, cap: float, spill) -> tuple[int, int, int]:
        """Walk a prompt's blocks until the first miss (ids; ps = id * MIX mod 2^64, whose top
        RING_BITS bits index `ring`, the owning server of each ring slot). Hits become the most
        recently used, SSD hits move to DRAM (spill(s1) when that DRAM holds more than cap);
        per[server] counts the hits. Returns (DRAM hits, SSD hits, free slot for the first miss or
        -1). find() and move() inlined: this loop is most of the EMS's cost."""
        K, P, T, mask, shift, count, clock = self.K, self.P, self.T, self.mask, self.shift, self.count, self.clock
        n_dram = n_ssd = 0
        for k, p in zip(ids, ps):
            s = ring[p >> RING_SHIFT]
            s1, h, free = s + 1, p >> shift, -1
            while True:
                q = P[h]
                if q == 0:
                    self.clock = clock
                    return n_dram, n_ssd, (h if free < 0 else free)
                if q >> 1 == s1 and K[h] == k:
                    break
                if q < 0 and free < 0:
                    free = h
                h = (h + 1) & mask
            T[h] = clock
            clock += 1
            per[s] += 1
            dram = 2 * s1
            if q == dram:
                n_dram += 1
                continue
            n_ssd += 1
            P[h] = dram
            count[q] -= 1
            count[dram] += 1
            if count[dram] > cap:
                self.clock = clock
                spill(s1)
                clock = self.clock
        self.clock = clock
        return n_dram, n_ssd, -1

    def insert(self, ids: list, ps: list, ring: list, per: list, cap: float, spill, first: int = -1) -> int:
        """Put each block not cached into its server's DRAM as the most recently used (cached
        ones are left as they are); per[server] counts the new ones; returns how many. `first`:
        a free slot for ids[0], known to be absent (from prefix()). find() and put() inlined."""
        K, P, T, mask, shift, count, clock = self.K, self.P, self.T, self.mask, self.shift, self.count, self.clock
        new = used = 0
        for k, p in zip(ids, ps):
            s = ring[p >> RING_SHIFT]
            s1 = s + 1
            if first >= 0:
                h, first = first, -1
            else:
                h, free = p >> shift, -1
                while True:
                    q = P[h]
                    if q == 0:
                        if free >= 0:
                            h = free
                        break
                    if q >> 1 == s1 and K[h] == k:
                        h = -1
                        break
                    if q < 0 and free < 0:
                        free = h
                    h = (h + 1) & mask
                if h < 0:
                    continue
            dram = 2 * s1
            if P[h] == 0:
                used += 1
            K[h], P[h], T[h] = k, dram, clock
            clock += 1
            count[dram] += 1
            new += 1
            per[s] += 1
            if count[dram] > cap:
                self.clock = clock
                spill(s1)
                clock = self.clock
        self.clock = clock
        self.used += used
        return new

    def lru(self, code: int) -> int:
        """Slot of the least recently used block in place `code` (which must hold one)."""
        q = self._queues.get(code)
        P, T = self.P, self.T
        while True:
            if q is None or q[2] >= len(q[0]):
                q = self._queues[code] = self._oldest(code)
            slot, st = q[0][q[2]], q[1][q[2]]
            q[2] += 1
            if P[slot] == code and T[slot] == st:
                return slot

    def _oldest(self, code: int) -> list:
        """The place's oldest slots, oldest first: its k smallest stamps (k = an eighth of it)."""
        sl = np.flatnonzero(self.place == code)
        if not len(sl):
            raise RuntimeError(f"EMS index: place {code} is empty but counted {self.count[code]}")
        k = min(len(sl), max(QUEUE_MIN, len(sl) // 8))
        if k < len(sl):
            sl = sl[np.argpartition(self.stamp[sl], k - 1)[:k]]
        sl = sl[np.argsort(self.stamp[sl])]
        return [memoryview(sl), memoryview(self.stamp[sl]), 0]

    def clear_server(self, s1: int) -> int:
        """Drop every block of server s1 - 1; returns how many."""
        gone = (self.place >> 1) == s1
        n = int(gone.sum())
        self.place[gone] = -1
        for code in (2 * s1, 2 * s1 + 1):
            self.count[code] = 0
            self._queues.pop(code, None)
        return n
