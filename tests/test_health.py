"""Health in the predictors and the topology: a slow die paces its group, healthy leaves every time as it was."""
import pytest

from twin.predict.base import Health
from twin.predict.constant import ConstantPredictor
from twin.predict.roofline import PerfModel
from twin.topology import TopologyError, topology

DEP = "cloudmatrix-infer-384"


@pytest.fixture(scope="module")
def pm():
    return PerfModel(DEP)


def test_full_health_changes_nothing(pm):
    h = pm.with_health(Health(compute=1.0, hbm=1.0, cpu=1.0, load=1.0))
    assert h.decode_step(96, 4096).as_dict() == pm.decode_step(96, 4096).as_dict()
    assert h.prefill_batch(4096, reuse=0.5).as_dict() == pm.prefill_batch(4096, reuse=0.5).as_dict()


def test_slow_die_paces_the_decode_step(pm):
    """Half a die's compute: every synchronous phase waits for it; the step is the slow die's,
    computed from its own rates (1.66x at batch 96 per NPU, not an assumed 2x)."""
    base = pm.decode_step(96, 4096)
    slow = pm.with_health(Health(compute=0.5)).decode_step(96, 4096)
    assert slow.step_ms / base.step_ms == pytest.approx(1.662, abs=0.005)
    # the slow die's view: peak rates halved, HBM kept; experts at half speed take twice as long
    view = pm.with_health(Health(compute=0.5))._slow()
    assert view.chip.int8_tops == pm.chip.int8_tops / 2 and view.chip.hbm_gbps == pm.chip.hbm_gbps
    # sampling is HBM-bound: a compute-slow die samples as fast; an HBM-slow one twice as slow
    assert slow.breakdown["sampling"] == base.breakdown["sampling"]
    hbm = pm.with_health(Health(hbm=0.5)).decode_step(96, 4096)
    assert hbm.breakdown["sampling"] == pytest.approx(2 * base.breakdown["sampling"])
    assert base.step_ms < hbm.step_ms < slow.step_ms


def test_shrinking_the_slow_die_share_wins_back_its_attention(pm):
    base = pm.decode_step(96, 4096).step_ms
    full = pm.with_health(Health(compute=0.5)).decode_step(96, 4096).step_ms
    shrunk = pm.with_health(Health(compute=0.5, load=0.5)).decode_step(96, 4096).step_ms
    assert base < shrunk < full        # its experts still run at half speed


def test_slow_die_paces_prefill_and_slow_cpu_slows_cached_loads(pm):
    base = pm.prefill_batch(4096, reuse=0.5)
    slow = pm.with_health(Health(compute=0.5)).prefill_batch(4096, reuse=0.5)
    assert slow.step_ms > 1.8 * base.step_ms
    cpu = pm.with_health(Health(cpu=0.5)).prefill_batch(4096, reuse=0.5)
    assert cpu.breakdown["ems_transfer"] > 1.5 * base.breakdown["ems_transfer"]
    assert cpu.step_ms - cpu.breakdown["ems_transfer"] == pytest.approx(base.step_ms - base.breakdown["ems_transfer"])
    assert pm.with_health(Health(cpu=0.5)).decode_step(96, 4096).step_ms == pm.decode_step(96, 4096).step_ms


def test_constant_predictor_waits_for_the_slow_die():
    c = ConstantPredictor(DEP, decode_ms=50.0)
    assert c.with_health(Health(compute=0.5)).decode_step(96).step_ms == 100.0
    assert c.with_health(Health(compute=0.5, load=0.25)).decode_step(96).step_ms == 50.0


def test_topology_health_per_part():
    topo = topology("cloudmatrix384")
    assert topo.health == {}
    topo.set_health("n36/npu3", "compute", 0.5)
    topo.set_health("n05/cpu2", "cpu", 0.25)
    topo.degrade("n20/l1-3--sp3/l2-7", 0.5)
    h = topo.health
    assert h["n36/npu3/d0"] == {"compute": 0.5} and h["n36/npu3/d1"] == {"compute": 0.5}
    assert h["n05/cpu2"] == {"cpu": 0.25} and list(h.values()).count({"bandwidth": 0.5}) == 1
    d = topo.die_ids.index("n36/npu3/d1")
    assert topo.die_health("compute")[d] == 0.5 and topo.die_health("hbm")[d] == 1.0
    with pytest.raises(TopologyError, match=r"allowed a number in \(0, 1\]"):
        topo.set_health("n36/npu3/d1", "compute", 0.0)
    with pytest.raises(TopologyError, match="holds no cpu"):
        topo.set_health("n36/npu3/d1", "cpu", 0.5)
    topo.restore("n36/npu3")
    topo.restore("n05/cpu2")
    assert "n36/npu3/d1" not in topo.health and "n05/cpu2" not in topo.health
