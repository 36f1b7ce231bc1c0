"""EMS context cache: prefix lookups, tiers, consistent hashing under failure, model-load times."""
import numpy as np
import pytest

from twin.engine.ems.pool import EMS, ModelCache, UnknownServerError
from twin.workload import TraceError, default_trace_path, ideal_hit_ratio, load_trace, synthetic

SERVERS = [f"cpu{i}" for i in range(32)]
BB = 1.0  # one byte per block keeps capacities readable as block counts


@pytest.fixture(scope="module")
def mooncake():
    try:
        return load_trace(default_trace_path("mooncake_conversation"))
    except TraceError:
        pytest.skip("shared Mooncake trace not available")


def replay(ems, w):
    for i in range(len(w)):
        b = w.blocks(i)
        ems.lookup(b, int(w.input_tokens[i]))
        ems.store(b)
    return ems.stats()


def test_unlimited_cache_gives_exactly_the_ideal_hit_ratio(mooncake):
    s = replay(EMS(SERVERS, None, None, BB), mooncake)
    assert s["block_hit_ratio"] == ideal_hit_ratio(mooncake)
    assert s["token_hit_ratio"] == ideal_hit_ratio(mooncake, tokens=True)
    assert s["resident_blocks"] == 182790 and s["evicted_blocks"] == 0


def test_more_capacity_never_hits_less(mooncake):
    ratios = []
    for blocks_total in (3_200, 16_000, 64_000, 160_000):
        ratios.append(replay(EMS(SERVERS, blocks_total / 32, 0, BB), mooncake)["block_hit_ratio"])
    assert ratios == sorted(ratios) and ratios[-1] < ideal_hit_ratio(mooncake)
    two_tier = replay(EMS(SERVERS, 3_200 / 32, 60_800 / 32, BB), mooncake)
    assert two_tier["block_hit_ratio"] > ratios[0] and two_tier["ssd_hit_blocks"] > 0


def test_losing_one_server_loses_about_its_share(mooncake):
    n = 8
    ems = EMS(SERVERS[:n], None, None, BB)
    ems.store(mooncake.block_ids)
    resident = ems.stats()["resident_blocks"]
    owned = [k for k in np.unique(mooncake.block_ids).tolist() if ems.server_of(k) == "cpu3"]
    lost = ems.fail_server("cpu3")
    assert lost == len(owned)
    assert 0.6 / n < lost / resident < 1.4 / n  # 64 vnodes: shares vary by about +-15%
    assert ems.stats()["resident_blocks"] == resident - lost and ems.stats()["lost_blocks"] == lost
    assert all(ems.lookup([k]).prefix_blocks == 0 for k in owned[:500])  # remapped keys miss
    gone = set(owned)
    survivors = [k for k in np.unique(mooncake.block_ids)[:5000].tolist() if k not in gone]
    assert all(ems.lookup([k]).prefix_blocks == 1 for k in survivors)  # nobody else moved
    assert ems.fail_server("cpu3") == 0
    ems.restore_server("cpu3")
    assert ems.stats()["per_server"]["cpu3"] == {"live": True, "dram_bytes": 0.0, "ssd_bytes": 0.0}
    assert ems.lookup([owned[0]]).prefix_blocks == 0  # back, but empty


def test_prefix_semantics_and_per_server_bytes():
    ems = EMS(["a", "b", "c"], None, None, block_bytes=1000.0, block_tokens=128)
    assert ems.store([10, 11, 12, 13]).new_blocks == 4
    assert ems.store([10, 11, 99]).new_blocks == 1
    r = ems.lookup([10, 11, 77, 13], tokens=500)
    assert (r.prefix_blocks, r.dram_blocks, r.ssd_blocks, r.hit_tokens) == (2, 2, 0, 256)
    assert sum(r.per_server_bytes.values()) == 2000.0
    assert set(r.per_server_bytes) == {ems.server_of(10), ems.server_of(11)}
    assert ems.lookup([10, 11, 12, 13], tokens=500).hit_tokens == 500  # last block partial
    s = ems.stats()
    assert (s["hit_blocks"], s["miss_blocks"], s["hit_tokens"], s["miss_tokens"]) == (6, 2, 756, 244)
    ems.reset_stats()
    assert ems.stats()["lookups"] == 0 and ems.stats()["resident_blocks"] == 5


def test_dram_evicts_to_ssd_and_ssd_hits_promote():
    ems = EMS(["only"], dram_bytes_per_server=2.0, ssd_bytes_per_server=2.0, block_bytes=1.0)
    ems.store([1, 2, 3, 4])  # DRAM keeps 3, 4; SSD keeps 1, 2
    s = ems.stats()
    assert (s["dram_bytes"], s["ssd_bytes"], s["demoted_blocks"], s["evicted_blocks"]) == (2, 2, 2, 0)
    r = ems.lookup([3, 1])  # 3 from DRAM; 1 promoted from SSD, demoting DRAM's LRU (4)
    assert (r.prefix_blocks, r.dram_blocks, r.ssd_blocks) == (2, 1, 1)
    assert ems.lookup([4]).ssd_blocks == 1
    ems.store([5])  # DRAM full: its LRU (3) goes to SSD, whose LRU (2) is dropped
    s = ems.stats()
    assert (s["resident_blocks"], s["evicted_blocks"]) == (4, 1)
    assert ems.lookup([2]).prefix_blocks == 0 and ems.lookup([3]).ssd_blocks == 1
    dram_only = EMS(["only"], 2.0, 0, 1.0)
    dram_only.store([1, 2, 3])
    assert dram_only.lookup([1]).prefix_blocks == 0 and dram_only.stats()["evicted_blocks"] == 1


def test_hash_ring_is_deterministic():
    a, b = EMS(SERVERS, None, None, BB), EMS(SERVERS, None, None, BB)
    keys = list(range(0, 10_000, 7)) + [-5, 2**63 - 1]
    assert [a.server_of(k) for k in keys] == [b.server_of(k) for k in keys]
    assert len({a.server_of(k) for k in keys}) == 32


def test_synthetic_reuse_through_ems():
    w = synthetic(20, 1000, seed=1, reuse_rate=0.9, prefix_pool=20)
    assert replay(EMS(SERVERS, None, None, BB), w)["token_hit_ratio"] == pytest.approx(0.9, abs=0.01)


def test_all_servers_down_misses_without_error():
    ems = EMS(["a", "b"], None, None, 1.0)
    ems.store([1, 2])
    ems.fail_server("a"), ems.fail_server("b")
    assert ems.lookup([1, 2]).prefix_blocks == 0 and ems.store([1]).new_blocks == 0
    assert ems.server_of(1) is None


def test_errors_are_clear():
    ems = EMS(SERVERS, None, None, BB)
    with pytest.raises(UnknownServerError, match=r"unknown server 'cpu99' \(valid: cpu0, cpu1, .*32 in all"):
        ems.fail_server("cpu99")
    with pytest.raises(KeyError):
        ems.restore_server("x")
    with pytest.raises(ValueError, match="block_bytes = 0"):
        EMS(SERVERS, None, None, 0)
    with pytest.raises(ValueError, match="dram_bytes_per_server = -1"):
        EMS(SERVERS, -1, None, 1.0)
    with pytest.raises(ValueError, match="distinct"):
        EMS(["a", "a"], None, None, 1.0)


def test_model_cache_reproduces_the_paper():
    m = ModelCache()
    assert m.load_time_s("ems") == pytest.approx(5)
    assert m.load_time_s("obs") == pytest.approx(320)
    assert m.load_time_s("no_cache") == pytest.approx(2560)
    assert ModelCache(model_bytes=335.5e9).load_time_s("obs") == pytest.approx(160)
    with pytest.raises(ValueError, match="source = 'disk': must be one of ems, obs, no_cache"):
        m.load_time_s("disk")
