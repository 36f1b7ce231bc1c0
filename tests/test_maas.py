"""A MaaS day: several models' engines on one NPU ledger, capacity moving between them, nothing lost."""
import math

import pytest

from twin.cloud.maas import UNIT_NPUS, Day, Maas, load_day
from twin.engine.source import SyntheticSource
from twin.model.config import CatalogError
from twin.workload import LengthDist

SHORT = dict(input={"kind": "fixed", "value": 1024}, output={"kind": "fixed", "value": 64}, amplitude=0.0)


def _day(moves: bool, busy_load: float = 1.3) -> Day:
    # the ledger full from the start (10 + 14 units of 16 NPUs = 384): Qwen3 overloaded, DeepSeek-R1 idle
    return Day(name="test", day_s=600, control_s=2, cooldown_s=4, moves=moves, models={
        "qwen3-235b": {"deployment": "maas-qwen3-235b", "prefill_groups": 4, "decode_groups": 3,
                       "load": busy_load, **SHORT},
        "deepseek-r1": {"deployment": "maas-deepseek-r1", "prefill_groups": 6, "decode_groups": 4,
                        "load": 0.05, **SHORT}})


def _ledger_ok(day: Maas) -> None:
    held = [u for g in day.groups for u in g.units]
    assert len(held) == len(set(held))                          # no unit held twice
    assert all(day.owner[u] == g.model for g in day.groups for u in g.units)
    assert sum(day.npus(m) for m in day.engines) <= 384


def test_capacity_moves_to_the_overloaded_model_and_nothing_is_lost():
    day = Maas(_day(moves=True))
    start = {m: day.npus(m) for m in day.engines}
    assert start == {"qwen3-235b": 160, "deepseek-r1": 224}
    day.run(30)
    _ledger_ok(day)
    drained = day.drain()
    assert all(d["complete"] for d in drained.values())
    r = day.report()
    mv = r["moves"]
    assert mv["count"] >= 1 and mv["log"][0]["from"] == "deepseek-r1" and mv["log"][0]["to"] == "qwen3-235b"
    first = mv["log"][0]
    assert first["reason"].startswith("load ") and first["drain_s"] is not None and first["weight_load_s"] > 0
    assert mv["npus_moved"] == sum(m["npus"] for m in mv["log"])
    assert r["models"]["qwen3-235b"]["npus"]["end"] > 160 > 0
    given = sum(m["npus_from"] for m in mv["log"] if m["from"] == "deepseek-r1")
    assert given >= 16 and day.npus("deepseek-r1") == 224 - given     # a donor gives its group's units
    for m in r["models"].values():
        q = m["requests"]
        assert q["arrived"] == q["completed"] + q["rejected"] + q["timed_out"] and q["lost"] == 0 and q["in_flight"] == 0
    assert r["conserved"]


def test_without_moves_the_split_stays():
    day = Maas(_day(moves=False))
    day.run(20)
    r = day.report()
    assert r["moves"]["count"] == 0 and r["moves"]["npus_moved"] == 0
    assert {m: v["npus"]["end"] for m, v in r["models"].items()} == {"qwen3-235b": 160, "deepseek-r1": 224}


def test_a_day_that_does_not_fit_is_refused():
    with pytest.raises(CatalogError, match=r"start on 432 NPUs but cloudmatrix384 has 384"):
        load_day("maas-day", models={
            "qwen3-235b": {"deployment": "maas-qwen3-235b", "prefill_groups": 5, "decode_groups": 4},
            "deepseek-r1": {"deployment": "maas-deepseek-r1", "prefill_groups": 6, "decode_groups": 4}})
    with pytest.raises(CatalogError, match=r"prefill_groups = 7: maas-kimi-k2 has 6"):
        load_day("maas-day", models={
            "kimi-k2": {"deployment": "maas-kimi-k2", "prefill_groups": 7, "decode_groups": 1},
            "deepseek-r1": {"deployment": "maas-deepseek-r1", "prefill_groups": 1, "decode_groups": 1}})
    with pytest.raises(CatalogError, match="unknown"):
        load_day("maas-night")


def test_named_days_differ_only_in_moves():
    a, b = load_day("maas-day"), load_day("maas-day-static")
    assert a.moves and not b.moves and a.models == b.models and len(a.models) >= 4
    assert len({m.peak_h for m in a.models.values()}) == len(a.models)      # peaks at different hours


def test_diurnal_offset_moves_the_peak():
    # period 120 s; an offset of 60 s (half a period) puts the trough where the peak was
    def quarter(offset):
        src = SyntheticSource(100.0, 0, dict(diurnal_amplitude=0.8, diurnal_period_s=120.0,
                                             input=LengthDist.fixed(16), output=LengthDist.fixed(4)), offset)
        a = src.take(120.0).arrival
        return ((a >= 0) & (a < 60)).sum()
    expect = 6000 + 80 * 120 / math.pi           # integral of 100 (1 + 0.8 sin) over the first half
    assert quarter(0.0) == pytest.approx(expect, rel=0.05)
    assert quarter(60.0) == pytest.approx(12000 - expect, rel=0.08)
