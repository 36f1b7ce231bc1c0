"""The compact EMS index gives exactly what per-server OrderedDicts give (LRU per tier, promotions,
demotions, drops, failures), checked against a small reference model over random traffic."""
from collections import OrderedDict

import numpy as np
import pytest

from twin.engine.ems.pool import EMS
from twin.engine.ems.index import STAMP_LIMIT, BlockIndex


class Reference:
    """The EMS semantics written plainly: per server, an OrderedDict per tier (LRU first)."""

    def __init__(self, ems: EMS, dram_cap: float, ssd_cap: float):
        self.ems, self.dram_cap, self.ssd_cap = ems, dram_cap, ssd_cap
        self.dram = {s: OrderedDict() for s in ems.servers}
        self.ssd = {s: OrderedDict() for s in ems.servers}

    def _spill(self, s):
        while len(self.dram[s]) > self.dram_cap:
            k, _ = self.dram[s].popitem(last=False)
            if self.ssd_cap > 0:
                self.ssd[s][k] = None
                if len(self.ssd[s]) > self.ssd_cap:
                    self.ssd[s].popitem(last=False)

    def lookup(self, ids):
        hits = ssd_hits = 0
        for k in ids:
            s = self.ems.server_of(k)
            if s is None:
                break
            if k in self.dram[s]:
                self.dram[s].move_to_end(k)
            elif k in self.ssd[s]:
                del self.ssd[s][k]
                self.dram[s][k] = None
                ssd_hits += 1
                self._spill(s)
            else:
                break
            hits += 1
        return hits, ssd_hits

    def store(self, ids):
        new = 0
        for k in ids:
            s = self.ems.server_of(k)
            if s is None or k in self.dram[s] or k in self.ssd[s]:
                continue
            self.dram[s][k] = None
            new += 1
            self._spill(s)
        return new

    def fail(self, s):
        self.dram[s].clear()
        self.ssd[s].clear()

    def resident(self):
        return {s: (list(self.dram[s]), list(self.ssd[s])) for s in self.dram}


def _resident(ems: EMS) -> dict:
    """Blocks per server and tier in LRU order, read from the index (stamps order them)."""
    ix = ems._blocks
    out = {}
    for i, s in enumerate(ems.servers):
        tiers = []
        for code in (2 * i + 2, 2 * i + 3):
            sl = np.flatnonzero(ix.place == code)
            tiers.append(ix.keys[sl[np.argsort(ix.stamp[sl])]].tolist())
        out[s] = tuple(tiers)
    return out


@pytest.mark.parametrize("dram,ssd", [(5, 3), (12, 0), (0, 4), (0, 0), (None, None), (3, None)])
def test_index_matches_the_ordereddict_reference(dram, ssd):
    servers = [f"s{i}" for i in range(4)]
    ems = EMS(servers, dram, ssd, 1.0, block_tokens=4)
    ref = Reference(ems, float("inf") if dram is None else dram, float("inf") if ssd is None else ssd)
    rng = np.random.default_rng(11)
    for step in range(3000):
        ids = rng.integers(0, 90, int(rng.integers(1, 9))) * 7919 - 300_000   # negatives too
        op = rng.random()
        if op < 0.45:
            evicted = ems.stats()["evicted_blocks"]
            r = ems.lookup(ids)
            assert (r.prefix_blocks, r.ssd_blocks) == ref.lookup(ids.tolist()), step
            assert ems.stats()["evicted_blocks"] == evicted     # lookup_store relies on it
        elif op < 0.9:
            assert ems.store(ids).new_blocks == ref.store(ids.tolist()), step
        elif op < 0.95:
            s = servers[int(rng.integers(0, 4))]
            if ems.fail_server(s):
                ref.fail(s)
            ref.fail(s)
        else:
            ems.restore_server(servers[int(rng.integers(0, 4))])
        if step % 97 == 0:
            assert _resident(ems) == ref.resident(), step
    assert _resident(ems) == ref.resident()
    st = ems.stats()
    assert st["resident_blocks"] == sum(len(a) + len(b) for a, b in ref.resident().values())


def test_index_grows_and_keeps_every_block_and_its_order():
    """Tens of thousands of blocks force several resizes; LRU order survives them (an eviction
    after growth takes the oldest block)."""
    ems = EMS(["a", "b"], 10_000.0, 0.0, 1.0)
    ids = np.arange(50_000, dtype=np.int64) * 3 + 1
    ems.store(ids)
    assert ems._blocks.size >= 1 << 16
    st = ems.stats()
    assert st["resident_blocks"] == 50_000 - st["evicted_blocks"]
    left = {k for k in ids.tolist() if ems.lookup([k]).prefix_blocks}
    dropped = [k for k in ids.tolist() if k not in left]
    # each server kept its 10,000 newest: the evicted are the oldest of each server
    for s in ("a", "b"):
        mine = [k for k in ids.tolist() if ems.server_of(k) == s]
        assert [k for k in mine if k not in left] == mine[:len(mine) - 10_000]
    assert len(dropped) == st["evicted_blocks"] == 30_000


def test_lru_queue_skips_touched_blocks():
    ix = BlockIndex(1)
    for k in range(600):
        slot, free = ix.find(k, 1, ix.home(k))
        ix.put(free, k, 2)
    first = ix.lru(2)                       # builds the queue: oldest first
    assert ix.keys[first] == 0
    ix.move(first, 2)                       # touched: now the newest
    assert ix.keys[ix.lru(2)] == 1
    for k in range(1, 600):
        ix.drop(ix.find(k, 1, ix.home(k))[0])
    assert ix.keys[ix.lru(2)] == 0 and ix.count[2] == 1


@pytest.mark.parametrize("dram,ssd", [(5, 3), (12, 0), (0, 4), (None, None)])
def test_one_prompt_walk_matches_lookup_then_store_in_the_reference(dram, ssd):
    """lookup_store_one (lookup and store in one walk, the store starting at the first miss's
    slot; prompts of 12 blocks or more hashed by numpy) against the reference's lookup then store,
    with failures leaving deleted slots on probe paths."""
    servers = [f"s{i}" for i in range(4)]
    ems = EMS(servers, dram, ssd, 1.0, block_tokens=4)
    ref = Reference(ems, float("inf") if dram is None else dram, float("inf") if ssd is None else ssd)
    rng = np.random.default_rng(5)
    per_hit, per_new = [0] * 4, [0] * 4
    want_hit, want_new = [0] * 4, [0] * 4
    for step in range(2500):
        if rng.random() < 0.04:
            s = servers[int(rng.integers(0, 4))]
            ems.fail_server(s)
            ref.fail(s)
            continue
        if rng.random() < 0.04:
            ems.restore_server(servers[int(rng.integers(0, 4))])
            continue
        ids = rng.integers(0, 120, int(rng.integers(1, 20))) * 7919 - 300_000
        tokens = 4 * len(ids) - int(rng.integers(0, 4))
        hits, ssd_hits = ref.lookup(ids.tolist())
        for k in ids[:hits].tolist():
            want_hit[ems.servers.index(ems.server_of(k))] += 1
        new = 0
        for k in ids[hits:].tolist():                  # the reference's store, a block at a time
            if ref.store([k]):
                new += 1
                want_new[servers.index(ems.server_of(k))] += 1
        got = ems.lookup_store_one(ids, tokens, per_hit, per_new)
        assert got == (hits, min(4 * hits, tokens), new), step
        if step % 89 == 0:
            assert _resident(ems) == ref.resident(), step
    assert _resident(ems) == ref.resident()
    assert (per_hit, per_new) == (want_hit, want_new)
    st = ems.stats()
    assert st["ssd_hit_blocks"] > 0 or not ssd


@pytest.mark.parametrize("dram,ssd", [(5, 3), (12, 0)])
def test_stamps_renumbered_near_their_limit_keep_every_block_and_its_order(dram, ssd):
    """Stamps are int32, renumbered 0, 1, ... in order before the clock passes a limit (2^31 - 1;
    500 here, so every ~40 prompts): the cached blocks, their LRU order, spills and counters are
    exactly those of an index that never renumbers."""
    servers = [f"s{i}" for i in range(4)]
    a, b = (EMS(servers, dram, ssd, 1.0, block_tokens=4) for _ in range(2))
    a._blocks.st[STAMP_LIMIT] = 500
    per = [np.zeros(4, dtype=np.int64) for _ in range(4)]
    rng = np.random.default_rng(7)
    for step in range(2000):
        ids = rng.integers(0, 120, int(rng.integers(1, 20))) * 7919 - 300_000
        tokens = 4 * len(ids)
        assert a.lookup_store_one(ids, tokens, per[0], per[1]) == b.lookup_store_one(ids, tokens, per[2], per[3])
        if step % 97 == 0:
            assert _resident(a) == _resident(b), step
    assert _resident(a) == _resident(b) and a.stats() == b.stats()
    assert np.array_equal(per[0], per[2]) and np.array_equal(per[1], per[3])
    assert a._blocks.clock < 500 < b._blocks.clock and a.stats()["demoted_blocks" if ssd else "evicted_blocks"] > 1000
