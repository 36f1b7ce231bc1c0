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
30 ns an access): a prompt holds a few to a few hundred blocks, where one numpy call costs as much
as ten Python steps, and a promotion can demote a block later in the same prompt. walk() is a
prompt's lookup and store in one loop with find/move/put inlined: 5.8-6.5 us of CPU for a diurnal
prompt of 8 blocks, hashing included, against 12.3-12.6 us through the methods (the 57,418 prompts
of 200 simulated s replayed). Bulk work (queue building, a server's failure, resizing) is
vectorised.
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
        """(slot of key on server s1 - 1 or -1, first free slot on its probe path). find() and put()
        are the one-block forms of what walk() inlines (kept for direct use and its tests)."""
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

    def walk(self, ids: list, ps: list, ring: list, per_hit: list | None, per_new: list | None,
             cap: int, spill) -> tuple[int, int, int]:
        """One prompt's blocks in order (ids; ps = id * MIX mod 2^64, whose top RING_BITS bits
        index `ring`, the owning server of each ring slot). Unless per_hit is None, its cached
        prefix is looked up: each hit becomes the most recently used, an SSD hit moves to DRAM,
        per_hit[server] counts them. Unless per_new is None, every block from the first miss on
        (from the start without a lookup) that is not cached is put in its server's DRAM as the
        most recently used (cached ones are left as they are), per_new[server] counts them.
        spill(s1) runs whenever a DRAM holds more than cap blocks. Returns (DRAM hits, SSD hits,
        new blocks). find(), move() and put() inlined: this loop is most of the EMS's cost."""
        K, P, T, mask, shift, count, clock = self.K, self.P, self.T, self.mask, self.shift, self.count, self.clock
        rs = RING_SHIFT
        hits = ssd = new = used = 0
        first = -1                     # free slot of the first miss, found by the lookup
        todo = zip(ids, ps)
        if per_hit is not None:
            for k, p in todo:
                s = ring[p >> rs]
                s1, h = s + 1, p >> shift
                q = P[h]
                while q:               # 0: empty slot, the end of the probe path
                    if q >> 1 == s1 and K[h] == k:
                        break
                    h = (h + 1) & mask
                    q = P[h]
                else:                  # a miss: its slot is the path's first deleted or empty one
                    h = p >> shift
                    while P[h] > 0:
                        h = (h + 1) & mask
                    first = h
                    break
                T[h] = clock
                clock += 1
                per_hit[s] += 1
                hits += 1
                if q & 1:              # tier bit: an SSD hit is promoted
                    ssd += 1
                    dram = q - 1
                    P[h] = dram
                    count[q] -= 1
                    count[dram] += 1
                    if count[dram] > cap:
                        self.clock = clock
                        spill(s1)
                        clock = self.clock
            if first < 0 or per_new is None:
                self.clock = clock
                return hits - ssd, ssd, 0
            # the hit prefix is still cached (a lookup drops nothing: each promotion frees the SSD
            # slot its spill's demotion takes), so the store starts at the first miss
            todo = zip(ids[hits:], ps[hits:])
        for k, p in todo:
            s = ring[p >> rs]
            if first >= 0:
                h, first = first, -1
                if P[h] == 0:
                    used += 1
            else:
                h = p >> shift
                q = P[h]
                if q:
                    s1, free = s + 1, -1
                    while q:
                        if q >> 1 == s1 and K[h] == k:
                            break
                        if q < 0 and free < 0:
                            free = h
                        h = (h + 1) & mask
                        q = P[h]
                    if q:              # cached: left as it is
                        continue
                    if free >= 0:
                        h = free
                    else:
                        used += 1
                else:
                    used += 1
            dram = 2 * s + 2
            K[h] = k
            P[h] = dram
            T[h] = clock
            clock += 1
            count[dram] += 1
            per_new[s] += 1
            new += 1
            if count[dram] > cap:
                self.clock = clock
                spill(s + 1)
                clock = self.clock
        self.clock = clock
        self.used += used
        return hits - ssd, ssd, new

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
        """The place's oldest slots, oldest first: its k smallest stamps (k = half of it:
        each build scans the whole table, so fewer, longer queues cost less; an eighth cost 2-3x
        more CPU in the DRAM-full diurnal windows)."""
        sl = np.flatnonzero(self.place == code)
        if not len(sl):
            raise RuntimeError(f"EMS index: place {code} is empty but counted {self.count[code]}")
        k = min(len(sl), max(QUEUE_MIN, len(sl) // 2))
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
