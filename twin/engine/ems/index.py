"""Compact exact-LRU index of the EMS cache: which (block id, server) is cached, in which tier.

One open-addressing hash table (linear probing) over numpy arrays holds every cached block of
every server: its id (int64), its place (int16: 2 * (server + 1) + tier, tier 0 = DRAM, 1 = SSD;
0 = empty slot, -1 = deleted) and its last-touch stamp (int32, from one clock that only grows;
renumbered 0, 1, ... in order before it passes 2^31 - 1). That is 14 bytes a slot at a load of
0.3-0.6 (a resize doubles), 23-47 bytes a block, against 130-145 in per-server OrderedDicts (a
Python int key, a list node, the dict's entry and index).

LRU stays exact without a linked list: within a (server, tier) the least recently used block is the
one with the smallest stamp. Eviction reads a queue of that place's oldest slots (its k smallest
stamps, sorted); a queued slot whose stamp or place has changed since was touched, moved or freed,
and is skipped: every block touched after the queue was built is newer than everything in it, so
the first valid entry is always the true LRU block. A spent queue is refilled by one scan of the
table that also refills every other nearly spent one (DRAM fills evenly over the servers, so their
queues run out together). The queues share one int32 buffer, a segment per place.

A prompt's lookup and store, spills included (DRAM's LRU demoted to SSD, SSD's LRU dropped), is one
call of the numba-compiled `_walk`. Replaying the 120,034 prompts (8 blocks each) of 600 simulated
diurnal seconds took 9.5 us of CPU a prompt in the Python loop this replaced and 2.1 us here; the
717,629 of 3,600 s (DRAM full from ~700 s: ~3.7 demotions a prompt, a 2^23-slot table) 15.9 us and
5.5 us. Of a call, ~0.85 us is numba's dispatch of 12 arguments and ~45 ns each hit block. The walk
returns to Python only for rare steps, then resumes: a resize or a renumbering before it starts,
and a place's first queue (its segment, with those of its tier). Resizes (compiled too), a server's
failure and the tests' one-block operations (find/put/move/drop/lru: the compiled steps the walk
uses) are called from Python. Costs of numba: the first compile ~2.6 s of CPU, cached on disk after
(loading ~0.3 s); importing it and its LLVM adds ~115 MB of resident memory to the process.
"""
from __future__ import annotations

import numpy as np

from twin.engine.compiled import kernel

_MIX = 0x9E3779B97F4A7C15        # Fibonacci hashing (the EMS ring's multiplier: one product serves both)
_M64 = (1 << 64) - 1
_MIX_U64 = np.uint64(_MIX)
RING_BITS = 16                   # EMS ring slots: 2^16, indexed by a product's top bits
RING_SHIFT = 64 - RING_BITS
_RING_SHIFT_U64 = np.uint64(RING_SHIFT)
MAX_LOAD = 0.6                   # used slots (live + deleted) per slot before a resize
QUEUE_MIN = 256                  # eviction queue: at least this many oldest slots per build
REFILL_MAX = 1 << 21             # blocks gathered at most per queue refill (16 MB of scratch)
NO_LIMIT = 1 << 62               # a capacity of None (unlimited), as an int64
STAMP_MAX = (1 << 31) - 1        # stamps are int32: renumbered 0.. (same order) before passing this

# st, the index's scalars and its walks' counters (one int64 array: one argument to pass)
(CLOCK, USED, MASK, SHIFT, DRAM_CAP, SSD_CAP, BLOCK_TOKENS, STAMP_LIMIT,
 LOOKUPS, HIT_BLOCKS, MISS_BLOCKS, DRAM_HITS, SSD_HITS, HIT_TOKENS, MISS_TOKENS, STORED, DEMOTED, DROPPED,
 R_SPILL, R_I, R_PHASE, R_HITS, R_SSD, R_NEW, N_ST) = range(25)
COUNTERS = slice(LOOKUPS, DROPPED + 1)
# codes, one row per place code: its block count and its eviction queue (qbuf rows [head, end) of
# the segment [base, base + cap))
COUNT, QHEAD, QEND, QBASE, QCAP = range(5)
LOOKUP, STORE = 1, 2             # walk modes (bits)
NEED_RESIZE, NEED_RENUMBER, NEED_QUEUE = -1, -2, -3   # a walk's first result when it stops for Python


class BlockIndex:
    """Cached blocks of `n_servers` servers, two tiers each; counts per place in `count`.
    dram_cap / ssd_cap: blocks per server and tier (None: unlimited) that walks keep to."""

    def __init__(self, n_servers: int, bits: int = 12, dram_cap: int | None = None,
                 ssd_cap: int | None = None, block_tokens: int = 1):
        self.codes = np.zeros((2 * n_servers + 2, 5), dtype=np.int64)
        self.count = self.codes[:, COUNT]        # blocks per place code (index = code)
        self.st = np.zeros(N_ST, dtype=np.int64)
        self.st[DRAM_CAP] = NO_LIMIT if dram_cap is None else min(dram_cap, NO_LIMIT)
        self.st[SSD_CAP] = NO_LIMIT if ssd_cap is None else min(ssd_cap, NO_LIMIT)
        self.st[BLOCK_TOKENS] = block_tokens
        self.st[STAMP_LIMIT] = STAMP_MAX
        self.qbuf = np.zeros((0, 2), dtype=np.int32)   # queued (slot, stamp) pairs, all places
        self.qtop = 0                                  # qbuf rows allocated to segments
        self._alloc(bits)

    # ---- storage --------------------------------------------------------------------------------
    def _alloc(self, bits: int) -> None:
        self.bits, self.size = bits, 1 << bits
        self.mask, self.shift = self.size - 1, 64 - bits
        self.keys = np.zeros(self.size, dtype=np.int64)
        self.place = np.zeros(self.size, dtype=np.int16)
        self.stamp = np.zeros(self.size, dtype=np.int32)
        self.st[MASK], self.st[SHIFT], self.st[USED] = self.mask, self.shift, 0
        self.codes[:, QHEAD] = self.codes[:, QEND]     # queued slots moved: every queue empty
        self._arrays()

    def _arrays(self) -> None:
        """The state a walk takes, in its argument order (remade when an array is replaced)."""
        self.args = (self.keys, self.place, self.stamp, self.codes, self.qbuf, self.st)

    def home(self, key: int) -> int:
        return ((key & _M64) * _MIX & _M64) >> self.shift

    @property
    def live(self) -> int:
        return int(self.count.sum())

    @property
    def clock(self) -> int:
        return int(self.st[CLOCK])

    def reserve(self, n: int) -> bool:
        """Make room for n inserts without a resize in between; True if the slots moved."""
        if self.st[USED] + n <= MAX_LOAD * self.size:
            return False
        bits = self.bits               # the smallest size at which the load is at most 0.45
        while self.live + n > 0.75 * MAX_LOAD * (1 << bits):
            bits += 1
        self._rehash(bits)
        return True

    def _rehash(self, bits: int) -> None:
        """Move the live entries into a new table (compiled: the 11 resizes of the 3,600-s
        diurnal day took 0.43 s of CPU, 0.74 s in the vectorised form it replaced)."""
        keys, place, stamp = self.keys, self.place, self.stamp
        self.args = None                         # release the old arrays with these
        self._alloc(bits)
        self.st[USED] = _insert_all(self.keys, self.place, self.stamp, keys, place, stamp, self.shift, self.mask)
        del keys, place, stamp

    def _renumber(self) -> None:
        """Stamps back to 0, 1, ... in their order (the clock runs over int32 after ~2e9 touches,
        some 200 simulated hours of the diurnal day); every queue emptied (its stamps are old)."""
        live = np.flatnonzero(self.place > 0)
        live = live[np.argsort(self.stamp[live])]
        self.stamp[live] = np.arange(len(live), dtype=np.int32)
        self.st[CLOCK] = len(live)
        self.codes[:, QHEAD] = self.codes[:, QEND]

    # ---- one-block operations (the walk's compiled steps, for direct use and tests) --------------
    def find(self, key: int, s1: int, h: int) -> tuple[int, int]:
        """(slot of key on server s1 - 1 or -1, first free slot on its probe path from h)."""
        return _find(self.keys, self.place, self.mask, h, key, s1)

    def put(self, slot: int, key: int, code: int) -> None:
        """A new block at a free slot (from find), most recently used in its place."""
        _put(self.keys, self.place, self.stamp, self.codes, self.st, slot, key, code)

    def move(self, slot: int, code: int) -> None:
        """Touch a block: most recently used, in place `code` (a promotion or demotion if new)."""
        _move(self.place, self.stamp, self.codes, self.st, slot, code)

    def drop(self, slot: int) -> None:
        _drop(self.place, self.codes, slot)

    def lru(self, code: int) -> int:
        """Slot of the least recently used block in place `code` (which must hold one)."""
        if self.count[code] <= 0:
            raise ValueError(f"EMS index: place {code} holds no block")
        slot = _lru(self.codes, self.qbuf, self.place, self.stamp, code)
        if slot < 0:
            self._queue(code)
            slot = _lru(self.codes, self.qbuf, self.place, self.stamp, code)
        if slot < 0:
            raise RuntimeError(f"EMS index: place {code} is empty but counted {self.count[code]}")
        return slot

    # ---- a prompt -------------------------------------------------------------------------------
    def walk(self, ids: np.ndarray, tokens: int, mode: int, ring: np.ndarray, per_hit: np.ndarray,
             per_new: np.ndarray) -> tuple[int, int, int]:
        """One prompt's blocks (int64 ids) in order; ring[top RING_BITS bits of id * MIX] is the
        owning server (-1: none live). With LOOKUP in mode its cached prefix is looked up: each
        hit becomes the most recently used, an SSD hit moves to DRAM, per_hit[server] counts
        them. With STORE every block from the first miss on (from the start without a lookup)
        that is not cached is put in its server's DRAM as the most recently used (cached ones are
        left as they are), per_new[server] counts them. A DRAM over capacity demotes its LRU
        blocks to SSD, an SSD over capacity drops its LRU. Returns (prefix blocks, hit tokens
        (at most `tokens`), new blocks); the counters in st add them up."""
        while True:
            r = _walk(ids, tokens, mode, ring, per_hit, per_new, *self.args)
            if r[0] >= 0:
                return r
            self.unstop(r[0], r[1], len(ids))

    def unstop(self, code: int, place: int, n: int) -> None:
        """What a walk of `n` blocks that stopped for Python (`code`, a NEED_*; `place`, the place
        whose queue a NEED_QUEUE needs) needs before it is called again (it resumes where it stopped)."""
        if code == NEED_RESIZE:
            self.reserve(n)
        elif code == NEED_RENUMBER:
            self._renumber()
        elif self.codes[place, QCAP] == 0:
            self._queue(place)
        else:                          # a refill found nothing: the counts are wrong
            raise RuntimeError(f"EMS index: place {place} is empty but counted {self.count[place]}")

    def _queue(self, code: int) -> None:
        """Fill place `code`'s eviction queue, first giving it its qbuf segment, and with it every
        place of its tier when that has a capacity (DRAM fills evenly over the servers: one scan
        then fills them all, not one each; 192 scans cost 1.3 s of CPU in the 3,600-s day)."""
        if self.codes[code, QCAP] == 0:
            cap = int(self.st[SSD_CAP if code % 2 else DRAM_CAP])
            todo = [code] if cap >= NO_LIMIT else [c for c in range(2 + code % 2, len(self.codes), 2)
                                                    if self.codes[c, QCAP] == 0]
            n = [max(int(self.count[c]), cap + 1 if cap < NO_LIMIT else 0) for c in todo]
            self._segments(todo, [min(m, max(QUEUE_MIN, m // 2)) for m in n])
        _refill(self.place, self.stamp, self.codes, self.qbuf, code)

    def _segments(self, places: list, sizes: list) -> None:
        """qbuf segments for these places (k = half the blocks a place holds when it needs its
        queue, at least QUEUE_MIN: each refill scans the whole table, so fewer, longer queues cost
        less; an eighth cost 2-3x more CPU in the DRAM-full diurnal windows; a later, longer queue
        is cut to its segment). The buffer grows by a quarter or more."""
        need = self.qtop + sum(sizes)
        if need > len(self.qbuf):
            buf = np.zeros((max(need, len(self.qbuf) * 5 // 4), 2), dtype=np.int32)
            buf[:self.qtop] = self.qbuf[:self.qtop]
            self.qbuf = buf
            self._arrays()
        for c, k in zip(places, sizes):
            self.codes[c, QBASE], self.codes[c, QCAP] = self.qtop, k
            self.codes[c, QHEAD] = self.codes[c, QEND] = self.qtop
            self.qtop += k

    def clear_server(self, s1: int) -> int:
        """Drop every block of server s1 - 1; returns how many."""
        gone = (self.place >> 1) == s1
        n = int(gone.sum())
        self.place[gone] = -1
        for code in (2 * s1, 2 * s1 + 1):
            self.codes[code, COUNT] = 0
            self.codes[code, QHEAD] = self.codes[code, QEND]
        return n


# ---- compiled steps -------------------------------------------------------------------------------
@kernel
def _insert_all(keys, place, stamp, okeys, oplace, ostamp, shift, mask):
    """Insert the live entries of an old table into an empty one; returns how many."""
    n, sh = 0, np.uint64(shift)
    for i in range(len(oplace)):
        if oplace[i] > 0:
            h = np.int64((np.uint64(okeys[i]) * _MIX_U64) >> sh)
            while place[h] != 0:
                h = (h + 1) & mask
            keys[h], place[h], stamp[h] = okeys[i], oplace[i], ostamp[i]
            n += 1
    return n


@kernel
def _find(keys, place, mask, h, key, s1):
    free = -1
    while True:
        p = place[h]
        if p == 0:                     # an empty slot ends the probe path
            return -1, (h if free < 0 else free)
        if p >> 1 == s1 and keys[h] == key:
            return h, free
        if p < 0 and free < 0:
            free = h
        h = (h + 1) & mask


@kernel
def _put(keys, place, stamp, codes, st, slot, key, code):
    if place[slot] == 0:
        st[USED] += 1
    keys[slot], place[slot], stamp[slot] = key, code, st[CLOCK]
    st[CLOCK] += 1
    codes[code, COUNT] += 1


@kernel
def _move(place, stamp, codes, st, slot, code):
    old = place[slot]
    if old != code:
        codes[old, COUNT] -= 1
        codes[code, COUNT] += 1
        place[slot] = code
    stamp[slot] = st[CLOCK]
    st[CLOCK] += 1


@kernel
def _drop(place, codes, slot):
    codes[place[slot], COUNT] -= 1
    place[slot] = -1


@kernel
def _lru(codes, qbuf, place, stamp, code):
    """The first still-valid queued slot of place `code`, or -1 when its queue is spent."""
    i, end = codes[code, QHEAD], codes[code, QEND]
    while i < end:
        slot = qbuf[i, 0]
        i += 1
        if place[slot] == code and stamp[slot] == qbuf[i - 1, 1]:
            codes[code, QHEAD] = i
            return slot
    codes[code, QHEAD] = i
    return -1


@kernel
def _refill(place, stamp, codes, qbuf, code):
    """Rebuild the eviction queue of place `code` (which has its segment) and, in the same scan
    of the table, of every place whose queue is nearly spent (under a quarter of its segment
    left), up to REFILL_MAX blocks: each gets its k oldest slots, oldest first, as
    stamp << 32 | slot sorted (stamps are unique: a place's k smallest are one set)."""
    nc = codes.shape[0]
    start = np.full(nc, -1, dtype=np.int64)
    start[code], total = 0, codes[code, COUNT]
    for c in range(nc):
        n = codes[c, COUNT]
        if c != code and codes[c, QCAP] > 0 and n > 0 and total + n <= REFILL_MAX \
                and 4 * (codes[c, QEND] - codes[c, QHEAD]) < codes[c, QCAP]:
            start[c] = total
            total += n
    buf = np.empty(total, dtype=np.int64)
    fill = start.copy()
    for slot in range(len(place)):
        p = place[slot]
        if p > 0 and start[p] >= 0:
            buf[fill[p]] = (np.int64(stamp[slot]) << 32) | slot
            fill[p] += 1
    for c in range(nc):
        if start[c] < 0:
            continue
        m = fill[c] - start[c]
        k = min(m, max(QUEUE_MIN, m // 2), codes[c, QCAP])
        seg = buf[start[c]:fill[c]]
        _smallest(seg, k)
        b = codes[c, QBASE]
        for j in range(k):
            qbuf[b + j, 0] = seg[j] & 0xFFFFFFFF
            qbuf[b + j, 1] = seg[j] >> 32
        codes[c, QHEAD], codes[c, QEND] = b, b + k


@kernel
def _smallest(a, k):
    """Sort the k smallest values of `a` into a[:k], ascending, with a max-heap (np.partition and
    np.sort would add 5 s of CPU to the walk's first compile; this adds little)."""
    for i in range(k // 2 - 1, -1, -1):
        _sift(a, i, k)
    for j in range(k, len(a)):
        if a[j] < a[0]:
            a[0] = a[j]
            _sift(a, 0, k)
    for end in range(k - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        _sift(a, 0, end)


@kernel
def _sift(a, i, n):
    """Restore the max-heap a[:n] below position i."""
    x = a[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and a[c + 1] > a[c]:
            c += 1
        if a[c] <= x:
            break
        a[i] = a[c]
        i = c
    a[i] = x


@kernel
def _lru_or_refill(codes, qbuf, place, stamp, code):
    """_lru, refilling the queue once when it is spent; -1 when the place has no segment yet."""
    slot = _lru(codes, qbuf, place, stamp, code)
    if slot < 0 and codes[code, QCAP] > 0:
        _refill(place, stamp, codes, qbuf, code)
        slot = _lru(codes, qbuf, place, stamp, code)
    return slot


@kernel
def _spill(s1, place, stamp, codes, qbuf, st):
    """Bring server s1 - 1 within capacity: demote DRAM's LRU to SSD (dropped when SSD has no
    room), drop SSD's LRU. Returns -1, or the place whose queue needs its first segment (nothing
    of that step done: calling again after it carries on exactly)."""
    dram, ssd = 2 * s1, 2 * s1 + 1
    while True:
        if codes[ssd, COUNT] > st[SSD_CAP]:
            slot = _lru_or_refill(codes, qbuf, place, stamp, ssd)
            if slot < 0:
                return ssd
            _drop(place, codes, slot)
            st[DROPPED] += 1
        elif codes[dram, COUNT] > st[DRAM_CAP]:
            slot = _lru_or_refill(codes, qbuf, place, stamp, dram)
            if slot < 0:
                return dram
            if st[SSD_CAP] > 0:
                _move(place, stamp, codes, st, slot, ssd)
                st[DEMOTED] += 1
            else:
                _drop(place, codes, slot)
                st[DROPPED] += 1
        else:
            return -1


@kernel
def _walk(ids, tokens, mode, ring, per_hit, per_new, keys, place, stamp, codes, qbuf, st):
    """BlockIndex.walk. Returns (NEED_RESIZE, 0, 0) before changing anything when a store could
    overfill the table, (NEED_QUEUE, code, 0) when a spill needs place code's queue rebuilt (the
    walk's position saved in st: the next call resumes it)."""
    n, mask, shift = len(ids), st[MASK], np.uint64(st[SHIFT])
    if st[R_SPILL]:                    # resume: finish the spill, then go on from block i
        i, phase, hits, ssd, new = st[R_I], st[R_PHASE], st[R_HITS], st[R_SSD], st[R_NEW]
        need = _spill(st[R_SPILL], place, stamp, codes, qbuf, st)
        if need >= 0:
            return NEED_QUEUE, need, 0
        st[R_SPILL] = 0
    else:
        if mode & STORE and st[USED] + n > MAX_LOAD * (mask + 1):
            return NEED_RESIZE, 0, 0
        if st[CLOCK] + 4 * n > st[STAMP_LIMIT]:    # a walk ticks at most 3n: touches, puts, demotions
            return NEED_RENUMBER, 0, 0
        i, hits, ssd, new = 0, 0, 0, 0
        phase = LOOKUP if mode & LOOKUP else STORE
    first = -1                         # free slot of the first miss, found by the lookup
    while i < n:
        k = ids[i]
        p = np.uint64(k) * _MIX_U64
        s = ring[np.int64(p >> _RING_SHIFT_U64)]
        s1, h = s + 1, np.int64(p >> shift)
        if phase == LOOKUP:
            if s < 0:
                phase = STORE
                continue
            slot, free = _find(keys, place, mask, h, k, s1)
            if slot < 0:               # the first miss: the store starts here
                first, phase = free, STORE
                continue
            tier = place[slot] & 1     # an SSD hit (tier 1) is promoted to DRAM
            _move(place, stamp, codes, st, slot, 2 * s1)
            per_hit[s] += 1
            hits += 1
            ssd += tier
        else:
            if not mode & STORE:
                break
            if s < 0:
                i += 1
                continue
            if first >= 0:
                slot, first = first, -1
            else:
                slot, free = _find(keys, place, mask, h, k, s1)
                if slot >= 0:          # cached: left as it is
                    i += 1
                    continue
                slot = free
            _put(keys, place, stamp, codes, st, slot, k, 2 * s1)
            per_new[s] += 1
            new += 1
        i += 1
        if codes[2 * s1, COUNT] > st[DRAM_CAP]:
            need = _spill(s1, place, stamp, codes, qbuf, st)
            if need >= 0:
                st[R_SPILL], st[R_I], st[R_PHASE], st[R_HITS], st[R_SSD], st[R_NEW] = s1, i, phase, hits, ssd, new
                return NEED_QUEUE, need, 0
    ht = 0
    if mode & LOOKUP:
        ht = min(hits * st[BLOCK_TOKENS], tokens)
        st[LOOKUPS] += 1
        st[HIT_BLOCKS] += hits
        st[MISS_BLOCKS] += n - hits
        st[DRAM_HITS] += hits - ssd
        st[SSD_HITS] += ssd
        st[HIT_TOKENS] += ht
        st[MISS_TOKENS] += tokens - ht
    st[STORED] += new
    return hits, ht, new
