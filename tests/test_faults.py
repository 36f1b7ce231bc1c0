"""Fault injection and recovery: every fault kind moves the right metrics the right way and
recovers; no request is ever lost; fault scenarios replay exactly; bad faults are refused clearly
while the live twin runs on.

Runs are short: the paper's decode setting (decode only, fast) loaded by t = 20 s, a fast policy
(detect 5 s, repairs 10 s) set before injecting, and a few seconds of sim time around the fault.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from twin.model.config import CATALOG_DIR, CatalogError
from twin.engine.ems.pool import ModelCache
from twin.engine import Engine, command
from twin.engine.faults import KINDS, Policy, load_fault_file, recovery
from twin.engine.requests import DECODE_QUEUE, DECODING, DONE, PREFILL, QUEUED, TRANSFER
from twin.predict.perf import NetState
from twin.workload import default_trace_path

ROOT = Path(__file__).resolve().parents[1]
DEMOS = sorted((CATALOG_DIR / "faults").glob("*.toml"))
MOONCAKE = default_trace_path("mooncake_conversation")

T0 = 20.0                       # faults are injected once the decode pool is loaded
FAST = dict(detect_s=5.0, reroute_s=1.0, network_repair_s=10.0, hardware_repair_s=10.0,
            expert_reload_s=1.0)
LINK = "n20/l1-3--sp3/l2-7"     # an optical L1-L2 link of decode node n20
REPORT_KEYS = {"target", "kind", "detect_s", "recover_s", "requests_affected", "requeued",
               "recomputed", "lost", "goodput_during", "goodput_before"}
# a valid target in the busy decode pool (n12..n31) for every kind
TARGETS = {"npu_die": "n20/npu3/d1", "npu": "n20/npu3", "cpu": "n20/cpu2", "node": "n20",
           "optical_link": LINK, "optical_degrade": LINK, "optical_flap": LINK, "l1": "n20/l1-3",
           "l2": "sp2/l2-5", "subplane": "sp4", "rdma_nic": "n20/rdma3",
           "rdma_plane": "rdma/spine-0", "vpc": "n20/vpc",
           "straggler": "n20/npu3/d1", "hbm_degrade": "n20/npu3/d1", "node_throttle": "n20", "cpu_slow": "n20/cpu2"}
POLICY_DETECTED = sorted(k for k, v in KINDS.items() if v.detect == "policy")   # the detector's kinds: its tests
COMPUTE = {"npu_die", "npu", "cpu", "node"}
HEALTHY_UPLINK = 3136.0         # GB/s: 7 L1 chips x 16 L2 links x 28 GB/s per node
UPLINKS = 7 * 16


def busy(scenario: str = "paper-decode", seed: int = 1, t: float = T0, policy: dict | None = None,
         **overrides) -> Engine:
    eng = Engine(scenario, seed=seed, **overrides)
    eng.advance(t)
    eng.faults.policy = Policy.load(**{**FAST, **(policy or {})})
    return eng


def fault(eng: Engine, kind: str, target: str, **kw) -> None:
    eng.submit(command("fault", {"kind": kind, "target": target, **kw}))


def check_requests(eng: Engine) -> None:
    """Conservation, and more: every in-flight request sits in exactly one place matching its
    state (a prefill queue or batch, a decode queue or batch) or is in a KV transfer."""
    req = eng.req
    c = req.counts()
    assert c["arrived"] == c["completed"] + c["in_flight"] + c["rejected"]
    st = req.state                         # indexed by request id (rows of the window)
    where = {QUEUED: [], PREFILL: [], DECODE_QUEUE: [], DECODING: []}
    for p in eng.prefill:
        where[QUEUED].append(np.fromiter(p.queue, np.int64, len(p.queue)))
        where[PREFILL].append(np.asarray(p.running, dtype=np.int64))
    for d in eng.decode:
        where[DECODE_QUEUE].append(np.fromiter(d.queue, np.int64, len(d.queue)))
        where[DECODING].append(np.asarray(d.ids, dtype=np.int64))
    placed = np.concatenate([a for v in where.values() for a in v])
    assert len(np.unique(placed)) == len(placed), "a request sits in two places"
    for state, arrays in where.items():
        ids = np.concatenate(arrays)
        assert (st[ids] == state).all(), f"state mismatch in the {state} containers"
    flying = req.in_flight_ids()
    unplaced = np.setdiff1d(flying, placed)
    assert (st[unplaced] == TRANSFER).all(), \
        f"{np.sum(st[unplaced] != TRANSFER)} in-flight request(s) are nowhere (lost)"
    audit = eng.audit()
    assert audit["conserved"] and audit["orphaned"] == 0 and audit["lost"] == 0, audit


def run_checked(eng: Engine, seconds: float, step: float = 1.0):
    snap = None
    for _ in range(int(round(seconds / step))):
        eng.advance(step)
        snap = eng.snapshot()
        k = snap.kpis
        assert k["arrived"] == k["completed"] + k["in_flight"] + k["rejected"]
        check_requests(eng)
    return snap


# ---- 1. every kind: detection, recovery, nothing lost --------------------------------------

def test_targets_cover_every_kind_and_examples_are_valid():
    assert set(TARGETS) == set(KINDS)
    eng = Engine("paper-decode", seed=1)
    for kind, target in {**TARGETS, **{k: v.example for k, v in KINDS.items()}}.items():
        assert eng.faults.check({"kind": kind, "target": target}).kind == kind


# recover_s under FAST: compute = detect + expert reload (redundant experts) or detect alone (no
# instance on the part); network = detect + repair
RECOVER = {"npu_die": 6.0, "npu": 6.0, "node": 6.0, "cpu": 5.0}


@pytest.mark.parametrize("kind", POLICY_DETECTED)
def test_each_kind_is_detected_recovers_and_loses_nothing(kind):
    eng = busy()
    extra = {"period_s": 2.0} if kind == "optical_flap" else {}
    fault(eng, kind, TARGETS[kind], **extra)
    run_checked(eng, 18.0)                     # to t = 38: detection 25, repairs by 36
    (rep,) = eng.fault_report()
    assert REPORT_KEYS <= set(rep)
    assert rep["kind"] == kind and rep["target"] == TARGETS[kind]
    assert rep["at_s"] == T0
    assert rep["lost"] == 0
    assert rep["detect_s"] == 5.0
    assert rep["recover_s"] == pytest.approx(RECOVER.get(kind, 15.0))
    assert rep["recover_s"] >= rep["detect_s"]
    assert not rep["active"]
    if kind != "cpu":                          # the decode pool's requests saw the fault
        assert rep["requests_affected"] > 0
    # the hardware is back: no failed part, full UB capacity, healthy network for every instance
    assert eng.topo.failed == set() and eng.topo.degraded == {}
    assert eng.topo.ub_bandwidth_fraction() == 1.0
    assert all(i.pm.net == NetState() for i in eng.prefill + eng.decode)
    assert all(i.alive for i in eng.prefill + eng.decode)
    assert not eng.partitioned and eng.message == ""
    kinds = [e["kind"] for e in eng.events]
    assert "detect" in kinds and "repair" in kinds and "error" not in kinds     # the part is back
    done = eng.req.counts()["completed"]
    run_checked(eng, 2.0)
    assert eng.req.counts()["completed"] > done


# ---- 2. the network: capacity, step time, TPOT ----------------------------------------------

@pytest.fixture(scope="module")
def ub_runs():
    """Decode runs to t = 50 s: no fault, one L2 chip, a whole sub-plane (both 20..35 s); with
    the decode instance's step time and network state sampled through the fault."""
    out = {}
    for kind, target in ((None, None), ("l2", "sp2/l2-5"), ("subplane", "sp2")):
        eng = busy()
        d = eng.decode[0]
        rec = {"healthy_step": eng.timing.decode_seconds(d, 60, 4224)}
        if kind:
            fault(eng, kind, target)
        eng.advance(0.5)                                   # retransmitting on the dead path
        rec["rto"] = (d.pm.net, eng.timing.decode_seconds(d, 60, 4224))
        eng.advance(1.0)                                   # rerouted
        rec["rerouted"] = (d.pm.net, eng.timing.decode_seconds(d, 60, 4224))
        rec["uplinks"] = [eng.topo.node_uplink_gbps(n) for n in range(eng.system.nodes)]
        rec["fraction"] = eng.topo.ub_bandwidth_fraction()
        eng.advance(50 - eng.sim_time)                     # repaired at 35
        rec["after"] = (d.pm.net, eng.timing.decode_seconds(d, 60, 4224))
        rec["uplinks_after"] = [eng.topo.node_uplink_gbps(n) for n in range(eng.system.nodes)]
        rec["history"] = eng.metrics.frame().set_index("t")
        rec["report"] = eng.fault_report()
        out[kind] = rec
    return out


@pytest.mark.parametrize("kind,lost_links", [("l2", 1), ("subplane", 16)])
def test_ub_switch_loss_cuts_uplinks_exactly_and_slows_decode(ub_runs, kind, lost_links):
    r, base = ub_runs[kind], ub_runs[None]
    per_link = HEALTHY_UPLINK / UPLINKS
    assert per_link == 28.0
    # every node loses exactly its links to the dead L2 chip(s)
    assert r["uplinks"] == [HEALTHY_UPLINK - lost_links * per_link] * 48
    assert r["fraction"] == pytest.approx((UPLINKS - lost_links) / UPLINKS, abs=1e-12)
    # before reroute the all-to-alls pay retransmission timeouts, after it the bandwidth is lower
    net, step = r["rto"]
    assert net.extra_latency_us == Policy.load().retransmit_us
    assert net.ub == pytest.approx((UPLINKS - lost_links) / UPLINKS, abs=1e-12)
    net2, step2 = r["rerouted"]
    assert net2 == NetState(ub=net.ub)
    assert r["healthy_step"] < step2 < step
    # the measured TPOT over the fault is above the fault-free run's
    win = slice(23.0, 35.0)
    assert r["history"].tpot_p50_ms.loc[win].mean() > base["history"].tpot_p50_ms.loc[win].mean()
    # the first second of retransmissions costs output tokens
    assert r["history"].output_tps.loc[21.0] < 0.9 * base["history"].output_tps.loc[21.0]
    # repaired: capacity and step time back to healthy exactly
    assert r["uplinks_after"] == [HEALTHY_UPLINK] * 48
    assert r["after"] == (NetState(), r["healthy_step"])
    assert r["report"][0]["recover_s"] == 15.0 and r["report"][0]["lost"] == 0


def test_subplane_loss_is_worse_than_one_l2_chip(ub_runs):
    l2, sp = ub_runs["l2"], ub_runs["subplane"]
    assert sp["rerouted"][0].ub < l2["rerouted"][0].ub
    assert sp["rerouted"][1] > l2["rerouted"][1]
    assert sp["uplinks"][0] < l2["uplinks"][0]
    # the step-time gap (about 0.011 of 63.6 ms: UB bytes are a small share of a decode step) is far
    # below the spread of the measured TPOT between two runs, so the step time is what is compared


def test_l1_chip_loss_cuts_its_node_only():
    eng = busy()
    fault(eng, "l1", "n20/l1-3")
    eng.advance(1.5)
    assert eng.topo.node_uplink_gbps(20) == HEALTHY_UPLINK - 16 * 28.0
    assert all(eng.topo.node_uplink_gbps(n) == HEALTHY_UPLINK for n in range(48) if n != 20)
    assert eng.decode[0].pm.net.ub == pytest.approx(6 / 7)          # EP320 waits for its worst node
    assert all(p.pm.net == NetState() for p in eng.prefill)         # prefill nodes untouched


@pytest.mark.parametrize("factor", [0.5, 0.25])
def test_degraded_optical_link_keeps_part_of_its_capacity_without_retransmissions(factor):
    eng = busy()
    fault(eng, "optical_degrade", LINK, factor=factor)
    eng.advance(0.5)
    assert eng.topo.node_uplink_gbps(20) == HEALTHY_UPLINK - 28.0 * (1 - factor)
    assert eng.decode[0].pm.net == NetState(ub=1 - (1 - factor) / UPLINKS)
    assert LINK not in eng.topo.failed
    eng.advance(15.0)
    assert eng.topo.node_uplink_gbps(20) == HEALTHY_UPLINK
    assert eng.fault_report()[0]["recover_s"] == 15.0


def test_flapping_link_retransmits_until_rerouted_each_time_then_is_isolated():
    """period 4 s, reroute 1 s, detect 10 s: down (retransmitting) 20-21, rerouted 21-22, up 22-24,
    again at 24 and 28; isolated at 30 (down, rerouted) until repaired at 40."""
    eng = busy(policy={"detect_s": 10.0})
    fault(eng, "optical_flap", LINK, period_s=4.0)
    d = eng.decode[0]

    def state():
        net = d.pm.net
        st = "up" if net.ub == 1.0 else ("rto" if net.extra_latency_us > 0 else "rerouted")
        assert (st == "up") == (LINK not in eng.topo.failed)
        return st
    eng.advance(0.5)
    seen = [state()]
    for _ in range(20):                  # samples at 20.5, 21.5, ..., 40.5
        eng.advance(1.0)
        seen.append(state())
    assert seen == ["rto", "rerouted", "up", "up"] * 2 + ["rto", "rerouted"] + ["rerouted"] * 10 + ["up"]
    rep = eng.fault_report()[0]
    assert rep["detect_s"] == 10.0 and rep["recover_s"] == 20.0 and rep["lost"] == 0
    check_requests(eng)


def test_rdma_nic_loss_cuts_its_prefill_instance_kv_capacity_exactly():
    eng = busy("paper-prefill")
    before = dict(eng.kv.flows.capacity)
    assert before["prefill-1"] == pytest.approx(800e9)                # 2 nodes x 8 NICs x 50 GB/s
    fault(eng, "rdma_nic", "n03/rdma2")                             # prefill-1 = n02, n03
    run_checked(eng, 2.0)
    cap = eng.kv.flows.capacity
    assert eng.topo.rdma_bandwidth(3) == 350.0
    assert cap["prefill-1"] == pytest.approx(750e9)
    assert {k: v for k, v in cap.items() if k != "prefill-1"} == \
        {k: v for k, v in before.items() if k != "prefill-1"}
    run_checked(eng, 14.0)                                          # repaired at 35
    assert eng.kv.flows.capacity == before
    rep = eng.fault_report()[0]
    assert rep["lost"] == 0 and rep["recover_s"] == 15.0


def test_rdma_spine_loss_stops_kv_transfers_between_racks():
    """The RDMA fabric has one spine; without it no prefill rack (n00..n11) reaches a decode rack
    (n12..n31), so no KV can arrive at decode until it is back (then everything completes)."""
    eng = busy("paper-prefill")
    assert eng.topo.node_pair_bandwidth(0, 12, "rdma") > 0
    fault(eng, "rdma_plane", "rdma/spine-0", duration_s=10.0)
    eng.advance(1.0)
    assert eng.topo.node_pair_bandwidth(0, 12, "rdma") == 0.0
    reached = lambda: eng.req.completed + int(np.isin(eng.req.state[:eng.req.n], (DECODE_QUEUE, DECODING)).sum())
    r0 = reached()
    run_checked(eng, 8.0)                                           # t = 29 < repair at 30
    assert reached() == r0, "KV reached decode across a dead RDMA spine"
    run_checked(eng, 6.0)
    assert reached() > r0
    assert eng.fault_report()[0]["lost"] == 0


def test_network_fault_shorter_than_detection_heals_when_it_ends():
    """A 2 s optical outage (detection takes 5 s): the link carries traffic again at 22 s."""
    eng = busy()
    fault(eng, "optical_link", LINK, duration_s=2.0)
    eng.advance(1.0)
    assert LINK in eng.topo.failed
    eng.advance(1.5)
    assert LINK not in eng.topo.failed, "a 2 s fault kept the link down until detection"
    assert eng.topo.node_uplink_gbps(20) == HEALTHY_UPLINK


def test_vpc_card_loss_is_harmless_when_the_cache_runs_over_ub():
    eng = busy()
    base = eng.timing.decode_seconds(eng.decode[0], 60, 4224)
    fault(eng, "vpc", "n20/vpc")
    eng.advance(1.5)
    assert eng.topo.vpc_bandwidth(20) == 0.0
    assert eng.decode[0].pm.net == NetState()
    assert eng.timing.decode_seconds(eng.decode[0], 60, 4224) == base


# ---- 3. compute faults in the EP320 decode instance -----------------------------------------

def test_decode_die_with_redundant_experts_keeps_serving_on_319_dies():
    eng = busy(policy={"redundant_experts": True})
    d = eng.decode[0]
    die = eng.topo.die_ids.index("n20/npu3/d1")
    assert die in d.dies
    fault(eng, "npu_die", "n20/npu3/d1")
    eng.advance(4.9)
    assert not d.alive and "npu_die" in "; ".join(d.down.values())              # hung until detection
    check_requests(eng)
    pos = int(np.flatnonzero(d.dies == die)[0])
    on_dead = d.ids[d.ids % len(d.dies) == pos].copy()             # request r on die r mod n
    others = d.ids[d.ids % len(d.dies) != pos].copy()
    assert len(on_dead) > 0
    eng.advance(0.2)                                                # detected at 25
    f = eng.faults.faults[0]
    assert len(d.dies) == 319 and die not in d.dies
    assert f.requeued == len(on_dead) and f.recomputed == 0        # decode-only: KV from outside
    assert (eng.req.requeued[on_dead] == 1).all()
    assert (eng.req.requeued[others] == 0).all()
    assert not d.alive                                              # remapping the expert
    eng.advance(1.0)                                                # 26.1
    assert d.alive and d.down == {}
    assert f.recover_s == pytest.approx(FAST["detect_s"] + FAST["expert_reload_s"])
    run_checked(eng, 14.0)                                          # hardware back at 36
    assert eng.topo.alive("n20/npu3/d1")
    assert len(d.dies) == 319                                       # the spare keeps its place
    assert eng.die_pool[die] == ""
    # every request the fault touched completes once arrivals slow down
    affected = np.array(sorted(f.affected))
    eng.submit(command("rate", {"rate": 1.0}))
    run_checked(eng, 20.0, step=2.0)
    kept = affected[affected >= eng.req.base]    # older rows left the window: terminal by construction
    assert (eng.req.state[kept] == DONE).all() and eng.req.counts()["rejected"] == 0
    assert eng.fault_report()[0]["lost"] == 0


def test_whole_npu_and_node_use_two_and_sixteen_redundant_slots():
    for target, dies in (("n20/npu3", 318), ("n20", 304)):
        eng = busy()
        fault(eng, "npu" if "/" in target else "node", target)
        run_checked(eng, 7.0)
        assert len(eng.decode[0].dies) == dies
        assert recovery.spare_redundant(eng, eng.decode[0]) == 32 - (320 - dies)
        assert eng.fault_report()[0]["recover_s"] == 6.0


@pytest.mark.parametrize("source,load_s", [("ems", 5.0), ("obs", 320.0)])
def test_decode_die_without_redundancy_restarts_with_weights_from(source, load_s):
    eng = busy(policy={"redundant_experts": False, "weights_from": source})
    d = eng.decode[0]
    restart = ModelCache().load_time_s(source)
    assert restart == pytest.approx(load_s, rel=1e-9)
    assert eng.faults.policy.restart_s() == restart
    fault(eng, "npu_die", "n20/npu3/d1")
    eng.advance(4.9)
    running = d.ids.copy()
    assert len(running) > 0
    eng.advance(0.2)                                                # detected at 25: all requeued
    f = eng.faults.faults[0]
    assert f.requeued == len(running)
    assert (eng.req.requeued[running] == 1).all()
    assert len(d.dies) == 320                                       # restarted, not shrunk
    check_requests(eng)
    eng.advance(T0 + 5.0 + restart - 0.1 - eng.sim_time)
    assert not d.alive and f.recover_s is None
    eng.advance(0.2)
    assert d.alive
    assert f.recover_s == pytest.approx(5.0 + restart)
    check_requests(eng)
    rep = eng.fault_report()[0]
    assert rep["lost"] == 0 and rep["goodput_during"] < rep["goodput_before"]


def test_prefill_die_fault_restarts_its_instance_and_requeues_to_the_others():
    eng = busy("paper-prefill")
    fault(eng, "npu_die", "n03/npu0/d0")                            # prefill-1
    eng.advance(0.5)
    p = eng.prefill[1]
    assert not p.alive and all(q.alive for q in eng.prefill if q is not p)
    eng.advance(4.6)                                                # detected
    f = eng.faults.faults[0]
    assert f.requeued == len(f.affected)
    assert not p.queue and not p.running
    check_requests(eng)
    run_checked(eng, 6.0)
    assert p.alive and f.recover_s == pytest.approx(5.0 + ModelCache().load_time_s("ems"))
    assert eng.fault_report()[0]["lost"] == 0


def test_second_fault_on_a_hung_instance_keeps_it_down_until_it_is_handled():
    """Die A fails at 20 (detected 25, expert remapped by 26); die B of the same instance fails at
    22 (detected 27, remapped by 28). The instance cannot run with B dead and unhandled."""
    eng = busy()
    d = eng.decode[0]
    fault(eng, "npu_die", "n20/npu3/d1")
    fault(eng, "npu_die", "n21/npu0/d0", at_s=22.0)
    eng.advance(6.5)                                                # 26.5: A handled, B not yet
    done = eng.req.counts()["completed"]
    assert not d.alive, "decode-0 resumed with an undetected dead die"
    eng.advance(1.0)                                                # 27.5: B remapping
    assert not d.alive
    assert eng.req.counts()["completed"] == done
    eng.advance(1.0)
    assert d.alive and len(d.dies) == 318


# ---- 4. EMS servers ----------------------------------------------------------------------------

def test_losing_an_ems_node_turns_its_cache_share_into_misses_then_refills():
    eng = busy("paper-prefill-cache", prefix_pool=1000)
    servers = [f"n05/cpu{c}" for c in range(4)]
    per = eng.ems.stats()["per_server"]
    held = sum(per[s]["dram_bytes"] + per[s]["ssd_bytes"] for s in servers) / eng.ems.block_bytes
    assert held > 0
    for s in servers:
        fault(eng, "cpu", s)
    eng.advance(1.0)
    st = eng.ems.stats()
    assert st["live_servers"] == 124
    assert all(not st["per_server"][s]["live"] and st["per_server"][s]["dram_bytes"] == 0
               for s in servers)
    notes = [f["note"] for f in eng.fault_report()]
    lost = [int(n.split()[2]) for n in notes]
    assert all(n.startswith("EMS lost ") and n.endswith("on 1 server(s)") for n in notes)
    assert sum(lost) == st["lost_blocks"] == round(held)
    run_checked(eng, 29.0)                                          # servers back (empty) at 35
    st = eng.ems.stats()
    assert st["live_servers"] == 128
    h = eng.metrics.frame().set_index("t")
    before = h.block_hit_ratio.loc[16.0:20.0].mean()
    assert h.block_hit_ratio.loc[21.0] < before - 0.03             # the lost share misses
    assert h.block_hit_ratio.loc[45.0:50.0].mean() >= before - 0.01  # the cache works again
    assert all(f["lost"] == 0 and f["recover_s"] == 5.0 for f in eng.fault_report())


# ---- 5. partitions -----------------------------------------------------------------------------

def test_all_subplanes_down_partitions_without_crash_and_heals():
    eng = busy()
    for k in range(7):
        fault(eng, "subplane", f"sp{k}", duration_s=10.0)
    eng.advance(1.0)
    snap = eng.snapshot()
    assert eng.partitioned and snap.partitioned
    assert "partitioned" in eng.message and "decode-0" in eng.message
    assert snap.message == eng.message
    assert eng.topo.ub_bandwidth_fraction() == 0.0
    assert any(e["kind"] == "partition" for e in snap.events)
    done, arrived = snap.kpis["completed"], snap.kpis["arrived"]
    run_checked(eng, 8.0)                                           # t = 29: still cut
    k = eng.req.counts()
    assert eng.partitioned
    assert k["completed"] == done and k["arrived"] > arrived       # waits, accepts, loses nothing
    run_checked(eng, 3.0)                                           # repaired at 30
    assert not eng.partitioned and eng.message == ""
    assert eng.req.counts()["completed"] > done
    assert any(e["kind"] == "recover" and "restored" in e["message"] for e in eng.events)
    assert all(f["lost"] == 0 and f["recover_s"] == 10.0 for f in eng.fault_report())


def test_an_isolated_decode_node_does_not_stop_the_prefill_pool():
    """All 7 L1 chips of decode node n20 fail: decode-0 (EP320 over n12..n31) is cut off; the
    prefill instances on n00..n11 still have every path, so they keep prefilling."""
    eng = busy("paper-prefill")
    for k in range(7):
        fault(eng, "l1", f"n20/l1-{k}", duration_s=10.0)
    run_checked(eng, 9.0)
    assert eng.partitioned and "decode-0" in eng.message and "prefill" not in eng.message
    h = eng.metrics.frame().set_index("t")
    assert h.input_tps.loc[23.0:29.0].min() > 0, "prefill stopped although it has every path"


# ---- 6. replay -----------------------------------------------------------------------------------

FILE = """\
# a mixed scenario for replay
scenario = "paper-decode"
seed = 3
duration_s = 40
[policy]
detect_s = 5
reroute_s = 1
network_repair_s = 10
hardware_repair_s = 10
[[fault]]
at_s = 10
kind = "npu_die"
target = "n20/npu3/d1"
[[fault]]
at_s = 12
kind = "l2"
target = "sp2/l2-5"
duration_s = 8
[[fault]]
at_s = 15
kind = "optical_flap"
target = "n25/l1-0--sp0/l2-3"
period_s = 4
"""


def _run_file(path, steps):
    spec = load_fault_file(path)
    eng = Engine(spec["scenario"], seed=spec["seed"], faults=str(path), duration_s=spec["duration_s"])
    for dt in steps:
        eng.advance(dt)
    out = eng.summary()
    out["faults"] = eng.fault_report()
    return out, eng


def test_fault_file_replays_identically_also_through_the_cli(tmp_path):
    path = tmp_path / "mixed.toml"
    path.write_text(FILE)
    a, eng = _run_file(path, [40])
    b, _ = _run_file(path, [7, 13, 20])          # chunking does not matter either
    assert json.dumps(a) == json.dumps(b)
    assert [f["kind"] for f in a["faults"]] == ["npu_die", "l2", "optical_flap"]
    assert all(f["lost"] == 0 and f["detect_s"] == 5 for f in a["faults"])
    assert eng.faults.policy.detect_s == 5 and eng.faults.policy.reroute_s == 1
    proc = subprocess.run([sys.executable, "-m", "twin", "run", "--faults", str(path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    cli.pop("wall_seconds")
    assert cli.pop("detector") == {"flags": 0, "false_alarms": 0, "threshold": 1.15, "window_s": 10.0}
    assert cli == a                 # (the CLI's sim_seconds is 40.0, the engine's 40 here)


def test_random_failures_replay_identically(tmp_path):
    path = tmp_path / "random.toml"
    path.write_text('scenario = "paper-decode"\nseed = 5\nduration_s = 60\n'
                    "random = {hours_per_sim_s = 10}\n"
                    "[policy]\ndetect_s = 2\nnetwork_repair_s = 5\nhardware_repair_s = 5\n")
    a, eng = _run_file(path, [60])
    b, _ = _run_file(path, [20, 40])
    assert json.dumps(a) == json.dumps(b)
    assert len(a["faults"]) >= 2
    for f in a["faults"]:
        assert f["kind"] in ("optical_link", "npu", "cpu", "l1", "l2", "node")
        assert eng.faults.check({"kind": f["kind"], "target": f["target"]})
        assert f["lost"] == 0
    check_requests(eng)


def test_random_failures_hit_every_class_with_an_mtbf(monkeypatch):
    """NPUs and whole nodes are not graph elements: random failures must still reach them. With
    MTBFs scaled so that every class fails equally often, ~60 failures hit all six classes."""
    from twin.engine import faults
    real = faults.defaults()
    eng = busy()
    classes = faults.random_classes(eng.topo)
    assert {k: len(v) for k, v in classes.items()} == {"optical_link": 5376, "npu": 384, "cpu": 192,
                                                       "l1": 336, "l2": 112, "node": 48}
    equal = dict(real, mtbf_hours={k: 6.0 * len(v) for k, v in classes.items()})   # 1 per hour in all
    monkeypatch.setattr(faults.random, "defaults", lambda: equal)
    eng.faults.set_random(faults.RANDOM_MAX)
    eng.advance(6.0)
    kinds = [f.kind for f in eng.faults.faults]
    assert 40 <= len(kinds) <= 90 and set(kinds) == set(classes)
    for f in eng.faults.faults:
        assert eng.faults.check({"kind": f.kind, "target": f.target})


def test_goodput_of_a_window_without_a_finished_interval_is_not_measured():
    eng = busy()
    fault(eng, "l2", "sp2/l2-5")
    eng.advance(1e-6)                       # struck, but no interval has ended since
    rep = eng.fault_report()[0]
    assert rep["goodput_during"] is None and rep["goodput_before"] > 0
    json.dumps(rep, allow_nan=False)        # no NaN in JSON
    eng.advance(3.0)
    assert eng.fault_report()[0]["goodput_during"] > 0


def test_live_fault_commands_replay_identically():
    def run(chunks):
        eng = Engine("paper-decode", seed=4)
        for dt, cmd in chunks:
            if cmd:
                eng.submit(command("fault", cmd))
            eng.advance(dt)
        return eng.summary(), eng.fault_report(), eng.events, [(t, c.spec) for t, c in eng.command_log]
    die = {"kind": "npu_die", "target": "n14/npu1/d0"}
    link = {"kind": "optical_link", "target": "n13/l1-2--sp2/l2-9", "duration_s": 70}
    a = run([(10, None), (10, die), (15, link), (40, None)])
    b = run([(4, None), (6, None), (10, die), (5, link), (10, None), (40, None)])
    assert json.dumps(a, default=str) == json.dumps(b, default=str)
    assert [c for _, c in a[3]] == [die, link]
    assert [t for t, _ in a[3]] == [10, 20]


def test_a_fault_applies_at_advance_zero():
    eng = busy()
    fault(eng, "l2", "sp2/l2-5")
    eng.advance(0)                                   # "immediate": apply queued commands now
    assert "sp2/l2-5" in eng.topo.failed


# ---- 7. bad input --------------------------------------------------------------------------------

BAD = [
    ({"kind": "npu_die", "target": "n99/npu0/d0"}, r"'n99/npu0/d0'.*node index 99 out of range 0\.\.47"),
    ({"kind": "npu_die", "target": "n20/npu9/d0"}, r"npu index 9 out of range 0\.\.7"),
    ({"kind": "cpu", "target": "n20/cpu7"}, r"cpu index 7 out of range 0\.\.3"),
    ({"kind": "subplane", "target": "sp9"}, r"'sp9'.*valid ids look like"),
    ({"kind": "npu_die", "target": "bogus!"}, r"'bogus!'.*not a well-formed id"),
    ({"kind": "l2", "target": "n20/npu3/d1"}, r"'n20/npu3/d1' is an NPU die; fault kind l2 breaks an L2 UB switch \(e\.g\. 'sp2/l2-5'\)"),
    ({"kind": "optical_link", "target": "n20/npu0/d0--n20/l1-0"}, r"is a die-l1 link; fault kind optical_link breaks an optical L1-L2 link"),
    ({"kind": "optical_link", "target": "n20/l1-3--sp4/l2-7"}, r"not directly linked"),
    ({"kind": "boom", "target": "n20"}, r"fault kind = 'boom': allowed npu_die, npu, cpu, node, optical_link"),
    ({"target": "n20"}, r"fault kind = None: allowed npu_die, "),
    ({"kind": ["npu"], "target": "n20"}, r"fault kind = \['npu'\]: allowed npu_die, "),
    ({"kind": {"a": 1}, "target": "n20"}, r"fault kind = \{'a': 1\}: allowed npu_die, "),
    ({"kind": "npu", "target": ["n20"]}, r"fault target = \['n20'\]: required"),
    ({"kind": "node"}, r"fault target = None: required, e\.g\. 'n20'"),
    ({"kind": "node", "target": "n20", "duration_s": -5}, r"duration_s = -5: allowed 0 < duration_s"),
    ({"kind": "node", "target": "n20", "duration_s": 0}, r"duration_s = 0: allowed 0 < duration_s"),
    ({"kind": "node", "target": "n20", "at_s": 1.0}, r"at_s = 1\.0: in the past \(now 20\.000 s\)"),
    ({"kind": "node", "target": "n20", "colour": "red"}, r"unknown field\(s\) colour \(allowed: kind, target"),
    ({"kind": "optical_degrade", "target": LINK, "factor": 1.5}, r"factor = 1\.5: allowed 0 <= factor < 1"),
    ({"kind": "optical_flap", "target": LINK, "period_s": 0.01}, r"period_s = 0\.01: allowed 0\.1 to 3600"),
]


@pytest.mark.parametrize("spec,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_fault_is_refused_clearly_and_the_twin_runs_on(spec, message):
    eng = busy()
    with pytest.raises(ValueError, match=message):
        eng.faults.check(spec)
    eng.submit(command("fault", spec))
    done = eng.req.counts()["completed"]
    run_checked(eng, 2.0)
    errors = [e for e in eng.events if e["kind"] == "error"]
    assert len(errors) == 1 and errors[0]["message"].startswith("fault refused: ")
    assert errors[0]["t"] == T0
    assert re.search(message, errors[0]["message"])
    assert eng.faults.faults == [] and eng.topo.failed == set()
    assert eng.req.counts()["completed"] > done


def test_non_numeric_fault_field_is_refused_naming_the_field():
    eng = busy()
    for kind, field in (("optical_degrade", "at_s"), ("optical_degrade", "duration_s"), ("optical_degrade", "factor"),
                        ("optical_flap", "period_s")):
        with pytest.raises(ValueError, match=rf"fault {field} = 'abc'"):
            eng.faults.check({"kind": kind, "target": LINK, field: "abc"})


def test_a_field_of_another_kind_is_refused_naming_the_kinds_fields():
    with pytest.raises(ValueError, match=r"unknown field\(s\) period_s \(allowed: kind, target, at_s, duration_s, "
                                         r"factor, for kind optical_degrade\)"):
        busy().faults.check({"kind": "optical_degrade", "target": LINK, "period_s": 3})


@pytest.mark.parametrize("at", [math.nan, math.inf])
def test_non_finite_at_s_is_refused(at):
    eng = busy()
    with pytest.raises(ValueError, match="at_s"):
        eng.faults.check({"kind": "node", "target": "n20", "at_s": at})


FILE_ERRORS = [
    ("[[fault]\n", r"bad\.toml: not valid TOML"),
    ('scenario = "paper-decode"\nbogus = 1\n', r"bad\.toml: unknown key\(s\) bogus \(allowed: description, duration_s, fault"),
    ('[[fault]]\nkind = "node"\ntarget = "n20"\n', r"bad\.toml: fault 1: at_s missing"),
    ('[[fault]]\nat_s = -3\nkind = "node"\ntarget = "n20"\n', r"fault 1: at_s = -3: allowed a number >= 0"),
    ('[[fault]]\nat_s = "soon"\nkind = "node"\ntarget = "n20"\n', r"fault 1: at_s = 'soon': allowed a number >= 0"),
    ('[[fault]]\nat_s = inf\nkind = "node"\ntarget = "n20"\n', r"fault 1: at_s = inf"),
    ('[[fault]]\nat_s = nan\nkind = "node"\ntarget = "n20"\n', r"fault 1: at_s = nan"),
    ("fault = 3\n", r"bad\.toml: \[\[fault\]\] must be a list of tables"),
]


@pytest.mark.parametrize("text,message", FILE_ERRORS, ids=[str(i) for i in range(len(FILE_ERRORS))])
def test_malformed_fault_file_gives_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=message):
        load_fault_file(path)


def test_missing_fault_file_lists_the_demos_and_demo_names_resolve():
    with pytest.raises(CatalogError, match=r"faults = '/nonexistent\.toml': no such file \(demos: "
                                           r"decode-die-no-redundancy, decode-die-redundant"):
        load_fault_file("/nonexistent.toml")
    assert load_fault_file("l2-loss")["path"] == str(CATALOG_DIR / "faults" / "l2-loss.toml")


ENGINE_FILE_ERRORS = [
    ("[policy]\ndetect_s = -1\n", CatalogError, r"policy\.detect_s = -1: allowed a number of seconds 0\.\.86400"),
    ("[policy]\nweights_from = 'tape'\n", CatalogError, r"policy\.weights_from = 'tape': allowed 'ems' or 'obs'"),
    ("[policy]\nfoo = 2\n", CatalogError, r"policy: unknown field\(s\) foo \(allowed: detect_s"),
    ("[policy]\nredundant_experts = 'yes'\n", CatalogError, r"policy\.redundant_experts = 'yes': allowed true or false"),
    ('[[fault]]\nat_s = 5\nkind = "l2"\ntarget = "n20/npu0/d0"\n', ValueError, r"is an NPU die; fault kind l2 breaks an L2 UB switch"),
    ('[[fault]]\nat_s = 5\nkind = "node"\ntarget = "n77"\n', ValueError, r"node index 77 out of range"),
    # the random process and the policy table are checked when the file is loaded, not mid-run
    ("random = {hours_per_sim_s = -1}\n", CatalogError, r"random\.hours_per_sim_s = -1"),
    ("random = {rate = 1}\n", CatalogError, r"random.*rate"),
    ("random = 5\n", CatalogError, r"random"),
    ("policy = 3\n", CatalogError, r"policy"),
]


@pytest.mark.parametrize("text,exc,message", ENGINE_FILE_ERRORS,
                         ids=[str(i) for i in range(len(ENGINE_FILE_ERRORS))])
def test_bad_fault_file_is_refused_before_the_run_starts(tmp_path, text, exc, message):
    path = tmp_path / "bad.toml"
    path.write_text('scenario = "paper-decode"\n' + text)
    with pytest.raises(exc, match=message):     # at construction: mid-run would be too late
        Engine("paper-decode", seed=1, faults=str(path))


@pytest.mark.parametrize("text", [None, "[[fault]\n", 'scenario = "paper-decode"\nrandom = {rate = 1}\n'],
                         ids=["missing", "malformed", "random-kwarg"])
def test_cli_bad_fault_file_exits_2_with_one_error_line(tmp_path, text):
    path = "/nonexistent.toml"
    if text is not None:
        path = tmp_path / "bad.toml"
        path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "twin", "run", "--faults", str(path), "--duration", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert proc.stdout == ""


# ---- 8. the demo scenarios ----------------------------------------------------------------------

@pytest.mark.parametrize("path", DEMOS, ids=[p.stem for p in DEMOS])
def test_demo_fault_file_loads_and_runs(path):
    spec = load_fault_file(path)
    assert spec["fault"] and spec["scenario"] and spec["duration_s"] > max(f["at_s"] for f in spec["fault"])
    if spec["scenario"] == "default" and not MOONCAKE.exists():
        pytest.skip("Mooncake trace not available")
    # the file as shipped: scenario, policy and every fault accepted by the engine
    eng = Engine(spec["scenario"], seed=spec["seed"], faults=str(path))
    assert len(eng.faults.faults) == len(spec["fault"])
    assert eng.faults.policy == Policy.load(**spec.get("policy", {}))
    # its faults, shifted to t = 20 s, under a fast policy
    shift = min(f["at_s"] for f in spec["fault"]) - T0
    eng = Engine(spec["scenario"], seed=spec["seed"])
    eng.faults.policy = Policy.load(**{**spec.get("policy", {}), **FAST})
    for f in spec["fault"]:
        eng.faults.inject({**f, "at_s": f["at_s"] - shift})
    run_checked(eng, T0 + 12.0, step=2.0)     # detection at 25, restart from EMS done by 30
    reps = eng.fault_report()
    assert len(reps) == len(spec["fault"])
    for r in reps:
        assert r["lost"] == 0 and REPORT_KEYS <= set(r)
        if KINDS[r["kind"]].detect == "policy":
            assert r["detect_s"] == FAST["detect_s"]
        else:          # a gray fault: the detector's window, its telemetry read once a (1 s) interval
            window = eng.faults.policy.gray_window_s
            assert r["detected_by"] == "telemetry" and window <= r["detect_s"] <= window + eng.scenario.interval_s
        if r["kind"] in COMPUTE:
            assert r["recover_s"] is not None and r["recover_s"] >= r["detect_s"]
    if spec["scenario"] == "paper-decode":
        assert eng.req.counts()["completed"] > 0


def test_kv_leaves_from_a_live_die_of_an_instance_beside_a_dead_npu():
    """An instance restarted beside a dead NPU runs until the hardware repair: its KV goes out
    from its live dies, not from the dead one (which has no path on any plane)."""
    eng = Engine("default", seed=0)
    src = next(p for p in eng.prefill if eng.topo.die_ids[p.dies[0]] == "n10/npu0/d0")
    eng.topo.fail("n10/npu0")
    assert eng.topo.route("n10/npu0/d0", eng.topo.die_ids[eng.decode[0].dies[0]], eng.kv.plane).partitioned
    assert not eng.kv._partitioned(src, eng.decode[0])
    assert eng.kv._route(src, eng.decode[0]).src == "n10/npu1/d0"
