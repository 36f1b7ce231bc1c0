"""What a MaaS day's models share: one EMS pool (keys per model, one capacity) and one fabric."""
import numpy as np
import pytest

from twin.cloud.fabric import MIN_LEFT, block_tokens, shared_ems
from twin.cloud.maas import Day, Maas
from twin.engine.ems.pool import EMS
from twin.cloud.fabric import ModelEms

SHORT = dict(input={"kind": "fixed", "value": 2048}, output={"kind": "fixed", "value": 64}, amplitude=0.0)


def test_models_keep_their_own_keys_in_one_pool_of_one_capacity():
    z = np.zeros(2, dtype=np.int64)
    pool = EMS(["a", "b"], dram_bytes_per_server=4 * 100.0, ssd_bytes_per_server=0.0, block_bytes=100.0,
               block_tokens=4)          # 8 pages in all
    one, two = ModelEms(pool, 0, 4, 25.0), ModelEms(pool, 1, 2, 40.0)    # blocks of 4 and 2 tokens
    ids = np.arange(4, dtype=np.int64)
    assert one.lookup_store_one(ids, 16, z, z)[:2] == (0, 0)
    assert two.lookup_store_one(ids, 8, z, z)[:2] == (0, 0)         # the same ids: not the other model's blocks
    assert one.lookup_store_one(ids, 16, z, z)[:2] == (4, 16)
    assert two.lookup_store_one(ids, 9, z, z)[:2] == (4, 8)         # hit tokens: its own blocks of 2 tokens
    assert pool.stats()["resident_blocks"] == 8                      # both models' blocks, one capacity
    two.lookup_store_one(np.arange(10, 14, dtype=np.int64), 16, z, z)   # the other model's new blocks evict
    assert one.lookup_store_one(ids, 16, z, z)[0] < 4
    assert pool.stats()["resident_blocks"] <= 8


def test_a_day_builds_one_pool_of_pages_the_quotas_added_up():
    kv = {"deepseek-r1": 70272.0, "glm-4.5": 376832.0}
    blocks = block_tokens(kv)
    assert blocks == {"deepseek-r1": 512, "glm-4.5": 512 * 70272 // 376832}
    views = shared_ems("cloudmatrix384", {"deepseek-r1": "maas-deepseek-r1", "glm-4.5": "maas-glm-4.5"}, kv, blocks)
    a, b = views.values()
    assert a.pool is b.pool and a.offset != b.offset
    assert b.block_bytes <= a.pool.block_bytes == a.block_bytes == 512 * 70272
    with pytest.raises(Exception, match="allowed: at least 16"):
        block_tokens({"small": 1000.0, "huge": 1000.0 * 64})


def _pair(other_load: float) -> Maas:
    return Maas(Day(name="fabric", day_s=600, control_s=2, moves=False, models={
        "deepseek-r1": {"deployment": "maas-deepseek-r1", "prefill_groups": 3, "decode_groups": 2,
                        "load": 0.5, **SHORT},
        "kimi-k2": {"deployment": "maas-kimi-k2", "prefill_groups": 3, "decode_groups": 2,
                    "load": other_load, **SHORT}}))


def test_one_models_traffic_slows_anothers_transfers_on_the_shared_fabric():
    quiet, busy = _pair(0.05), _pair(1.0)
    for day in (quiet, busy):
        day.run(20)
    a, b = quiet.engines["deepseek-r1"], busy.engines["deepseek-r1"]
    assert a.req.counts()["arrived"] == b.req.counts()["arrived"] > 0     # the same traffic of its own
    assert b.kv.landed_s / b.kv.landed > a.kv.landed_s / a.kv.landed       # slower beside a busy neighbour
    left = busy.left["deepseek-r1"]
    assert left and MIN_LEFT <= min(left.values()) < min(quiet.left["deepseek-r1"].values()) < 1
    inst = next(i for i in b.instances if i.slot == min(left, key=left.get))
    assert b.kv.flows.capacity[inst.name] == busy._bw["deepseek-r1"][inst.slot] * left[inst.slot]
    for day in (quiet, busy):
        day.drain()
        r = day.report()
        for m in r["models"].values():
            q = m["requests"]
            assert q["arrived"] == q["completed"] + q["rejected"] + q["timed_out"] and q["lost"] == 0
