"""Topology: exact counts, routes and capacities of CloudMatrix384 and an H800 cluster, healthy and failed."""
import json
import math

import numpy as np
import pytest

from twin.topology import (STORAGE, Route, TopologyError, UnknownElementError, build, cpu_id, die_id,
                           l1_id, l2_id, link_id, node_label, parse, rdma_nic_id, static, topology,
                           topology_summary, vpc_nic_id)
from twin.model.config import catalog

L, SW = 0.05, 0.2        # systems.toml link_latency_us, switch_latency_us
UPLINK = 7 * 16 * 28     # per-node L1-L2 capacity (ref 1: 3,136 GB/s)


def path(t, r, i: int = 0) -> list[str]:
    """Element ids along path i of a route, src first (walked over the links' ends)."""
    ends = t.link_arrays().ends
    out = [r.src]
    for e in r.path_eids[i]:
        u, v = ends[int(e)][:2]
        out.append(v if u == out[-1] else u)
    return out


@pytest.fixture
def cm():
    return topology("cloudmatrix384")


@pytest.fixture
def h800():
    return topology("gpu-cluster-h800")


def test_supernode_counts(cm):
    c = cm.counts()
    expected = {"node": 48, "rack": 12, "comm_rack": 4, "subplane": 7, "npu": 384, "die": 768, "cpu": 192,
                "l1": 336, "l2": 112, "rdma_nic": 384, "vpc_nic": 48, "vpc_switch": 1, "storage": 1,
                "rdma_leaf": 12, "rdma_spine": 1, "nvswitch": 0,
                "link:l1-l2": 5376, "link:d2d": 384, "link:die-l1": 768 * 7, "link:cpu-l1": 192 * 7,
                "link:die-nic": 768, "link:nic-leaf": 384, "link:leaf-spine": 12, "link:vpc-switch": 48,
                "link:host-vpc": 768 + 192}
    assert {k: c[k] for k in expected} == expected
    assert c["optical_links"] == 5376 + 12 + 48  # L1-L2, leaf-spine and VPC uplinks leave the rack
    assert c["links"] == c["optical_links"] + c["electrical_links"] == cm.graph.number_of_edges()
    assert c["graph_nodes"] == cm.graph.number_of_nodes()


def test_link_attributes_and_eids(cm):
    arr = cm.link_arrays()
    assert len(arr.ends) == len(arr.capacity_gbps) == cm.graph.number_of_edges()
    for u, v, a in cm.graph.edges(data=True):
        assert set(a) == {"plane", "medium", "capacity_gbps", "latency_us", "eid", "kind"}
        assert arr.ends[a["eid"]][:2] in ((u, v), (v, u))
        assert arr.base_gbps[a["eid"]] == a["capacity_gbps"]
    l1l2 = [a for _, _, a in cm.graph.edges(data=True) if a["kind"] == "l1-l2"]
    assert {(a["capacity_gbps"], a["medium"], a["plane"]) for a in l1l2} == {(28.0, "optical", "ub")}
    d2d = cm.graph.edges[die_id(7, 3, 0), die_id(7, 3, 1)]
    assert (d2d["capacity_gbps"], d2d["plane"], d2d["medium"]) == (270.0, "d2d", "electrical")
    e = cm.graph.edges[die_id(7, 3, 0), l1_id(7, 4)]
    assert (e["capacity_gbps"], e["medium"], e["kind"]) == (28.0, "electrical", "die-l1")
    assert cm.graph.edges[cpu_id(7, 2), l1_id(7, 0)]["capacity_gbps"] == pytest.approx(160 / 7)
    assert cm.graph.nodes[l1_id(7, 4)] == {"kind": "l1", "rack": "r01", "node": 7, "subplane": 4}
    assert cm.graph.nodes[l2_id(4, 11)]["subplane"] == 4
    assert np.array_equal(arr.capacity_gbps, arr.base_gbps)


def test_uplink_and_healthy_fractions(cm):
    assert all(cm.node_uplink_gbps(n) == UPLINK for n in range(48))
    assert cm.ub_bandwidth_fraction() == 1.0
    assert cm.node_pair_bandwidth(0, 47) == UPLINK
    assert cm.node_pair_bandwidth("n03", "n03") == 16 * 7 * 28  # all dies into the L1 chips
    assert cm.rdma_bandwidth(5) == 8 * 400 / 8
    assert cm.vpc_bandwidth("n05") == 400 / 8


def test_inter_node_ub_route_uses_all_subplanes_and_l2_chips(cm):
    r = cm.route(die_id(0, 0, 0), die_id(5, 3, 1), "ub")
    assert isinstance(r, Route) and not r.partitioned
    assert r.n_paths == 7 * 16 and r.hops == 4 and r.switches == 3
    assert r.latency_us == pytest.approx(4 * L + 3 * SW)
    assert set(r.path_gbps) == {28.0}
    assert r.bandwidth_gbps == pytest.approx(7 * 28)  # limited by the die's 7 UB links, not 112 x 28
    assert path(cm, r, 0) == [die_id(0, 0, 0), l1_id(0, 0), l2_id(0, 0), l1_id(5, 0), die_id(5, 3, 1)]


def test_intra_node_routes(cm):
    r = cm.route(die_id(7, 3, 0), die_id(7, 3, 1))
    assert (r.n_paths, r.hops, r.bandwidth_gbps) == (1, 1, 270.0)
    assert path(cm, r) == [die_id(7, 3, 0), die_id(7, 3, 1)]
    r = cm.route(die_id(7, 3, 0), die_id(7, 5, 1), "ub")
    assert (r.n_paths, r.hops, r.switches, r.bandwidth_gbps) == (7, 2, 1, 196.0)
    r = cm.route(die_id(7, 3, 0), cpu_id(7, 1), "ub")
    assert r.bandwidth_gbps == pytest.approx(160.0)
    with pytest.raises(TopologyError, match="same package"):
        cm.route(die_id(7, 3, 0), die_id(7, 4, 0), "d2d")


def test_fail_one_optical_link(cm):
    link = (l1_id(2, 4), l2_id(4, 11))
    a, b = die_id(2, 0, 0), die_id(9, 1, 1)
    assert cm.fail(link) == link_id(*link)
    assert cm.failed == {link_id(*link)}
    assert cm.node_pair_bandwidth(2, 9) == UPLINK - 28
    assert cm.node_uplink_gbps(2) == UPLINK - 28 and cm.node_uplink_gbps(9) == UPLINK
    assert cm.ub_bandwidth_fraction() == pytest.approx(1 - 28 / (48 * UPLINK))
    assert cm.ub_bandwidth_fraction(["n02"]) == pytest.approx(1 - 28 / UPLINK)
    r = cm.route(a, b)
    assert r.n_paths == 111 and cm.graph.edges[link]["eid"] not in r.path_eids
    assert r.bandwidth_gbps == pytest.approx(196.0)  # 15 L2 chips still feed the die's 28 GB/s L1 link
    assert cm.route(die_id(3, 0, 0), b).n_paths == 112
    assert cm.link_arrays().capacity_gbps[cm.edge(link)] == 0


def test_fail_l2_chip_and_subplane(cm):
    cm.fail(l2_id(4, 11))
    assert cm.ub_bandwidth_fraction() == pytest.approx(1 - 48 * 28 / (48 * UPLINK))
    assert cm.node_pair_bandwidth(0, 1) == UPLINK - 28
    assert cm.route(die_id(0, 0, 0), die_id(1, 0, 0)).n_paths == 111
    cm.restore(l2_id(4, 11))
    cm.fail("sp4")
    assert len(cm.failed) == 16
    assert cm.ub_bandwidth_fraction() == pytest.approx(6 / 7)
    assert cm.node_pair_bandwidth(0, 1) == pytest.approx(6 * 16 * 28)
    r = cm.route(die_id(0, 0, 0), die_id(1, 0, 0))
    assert (r.n_paths, r.bandwidth_gbps) == (96, pytest.approx(6 * 28))
    assert cm.route(die_id(0, 0, 0), die_id(0, 1, 0)).n_paths == 7  # L1 chips still switch inside a node


def test_restore_is_exact(cm):
    healthy = cm.route(die_id(0, 0, 0), die_id(1, 0, 0))
    v = cm.version
    for target in ("sp2", l2_id(4, 11), (l1_id(2, 4), l2_id(4, 11)), "n05", die_id(9, 1, 1)):
        cm.fail(target)
    cm.degrade(0, 0.5)
    assert cm.version > v and cm.ub_bandwidth_fraction() < 1
    for target in ("sp2", l2_id(4, 11), link_id(l1_id(2, 4), l2_id(4, 11)), "n05", die_id(9, 1, 1), 0):
        cm.restore(target)
    assert cm.failed == set() and cm.degraded == {}
    assert np.array_equal(cm.capacity, cm.link_arrays().base_gbps)
    r = cm.route(die_id(0, 0, 0), die_id(1, 0, 0))
    assert r is not healthy and r.n_paths == 112 and r.bandwidth_gbps == healthy.bandwidth_gbps
    assert cm.ub_bandwidth_fraction() == 1.0 and cm.node_pair_bandwidth(2, 9) == UPLINK


def test_degrade_link(cm):
    link = link_id(l1_id(2, 4), l2_id(4, 11))
    cm.degrade(link, 0.5)
    assert cm.degraded == {link: 0.5}
    assert cm.node_pair_bandwidth(2, 9) == UPLINK - 14
    assert cm.route(die_id(2, 0, 0), die_id(9, 0, 0)).n_paths == 112
    with pytest.raises(TopologyError, match="0..1"):
        cm.degrade(link, 1.5)


def test_partitioned_results_never_crash(cm):
    for k in range(7):
        cm.fail(f"sp{k}")
    r = cm.route(die_id(0, 0, 0), die_id(1, 0, 0))
    assert r.partitioned and r.bandwidth_gbps == 0 and r.n_paths == 0 and math.isinf(r.latency_us)
    assert "partitioned" in r.message
    assert cm.node_pair_bandwidth(0, 1) == 0 and cm.ub_bandwidth_fraction() == 0
    assert not cm.route(die_id(0, 0, 0), die_id(0, 2, 0)).partitioned
    cm.fail(die_id(0, 2, 0))
    r = cm.route(die_id(0, 0, 0), die_id(0, 2, 0))
    assert r.partitioned and "n00/npu2/d0 has failed" in r.message
    cm.fail("rdma/spine-0")
    assert cm.route(die_id(0, 0, 0), die_id(47, 0, 0), "rdma").partitioned
    assert not cm.route(die_id(0, 0, 0), die_id(1, 0, 0), "rdma").partitioned  # same rack: leaf only
    cm.fail(die_id(3, 0, 1))
    cm.fail(link_id(die_id(3, 0, 0), die_id(3, 0, 1)))
    assert cm.route(die_id(3, 0, 0), die_id(3, 0, 1), "d2d").partitioned


def test_same_package_falls_back_to_l1_when_d2d_is_down(cm):
    cm.fail((die_id(3, 0, 0), die_id(3, 0, 1)))
    r = cm.route(die_id(3, 0, 0), die_id(3, 0, 1), "ub")
    assert (r.n_paths, r.hops, r.bandwidth_gbps) == (7, 2, 196.0)


def test_unknown_ids_give_clear_errors(cm):
    with pytest.raises(KeyError, match="n99/npu0/d0.*node index 99 out of range 0..47"):
        cm.fail("n99/npu0/d0")
    with pytest.raises(ValueError, match="'bogus'.*valid ids look like: n00/npu0/d0"):
        cm.route("bogus", die_id(0, 0, 0))
    with pytest.raises(UnknownElementError, match="not directly linked"):
        cm.fail((die_id(0, 0, 0), l2_id(0, 0)))
    with pytest.raises(UnknownElementError, match="edge index out of range"):
        cm.fail(10**9)
    with pytest.raises(TopologyError, match="allowed: ub, d2d, rdma, vpc"):
        cm.route(die_id(0, 0, 0), die_id(1, 0, 0), "nvlink")
    with pytest.raises(TopologyError, match="not on the rdma plane"):
        cm.route(cpu_id(0, 0), die_id(1, 0, 0), "rdma")
    assert cm.failed == set() and cm.validate_target("sp3") == "sp3"


def test_rdma_and_vpc_planes(cm):
    r = cm.route(die_id(0, 0, 0), die_id(47, 2, 1), "rdma")
    assert path(cm, r) == [die_id(0, 0, 0), rdma_nic_id(0, 0), "rdma/leaf-r00", "rdma/spine-0",
                                "rdma/leaf-r11", rdma_nic_id(47, 2), die_id(47, 2, 1)]
    assert r.bandwidth_gbps == 200 / 8 and r.latency_us == pytest.approx(3.0)  # per-die 200 Gbps; rdma_latency_us
    cm.fail(rdma_nic_id(0, 3))
    assert cm.rdma_bandwidth(0) == 7 * 50
    cm.fail("rdma/leaf-r01")
    assert [cm.rdma_bandwidth(n) for n in (4, 5, 6, 7, 8)] == [0, 0, 0, 0, 400]
    r = cm.route(cpu_id(3, 1), STORAGE, "vpc")
    assert path(cm, r) == [cpu_id(3, 1), vpc_nic_id(3), "vpc/switch", STORAGE] and r.bandwidth_gbps == 50
    cm.fail(vpc_nic_id(3))
    assert cm.vpc_bandwidth(3) == 0 and cm.route(die_id(3, 0, 0), STORAGE, "vpc").partitioned


def test_h800_cluster(h800):
    c = h800.counts()
    expected = {"node": 18, "npu": 144, "die": 144, "cpu": 36, "nvswitch": 18, "l1": 0, "l2": 0,
                "rdma_nic": 144, "vpc_nic": 18, "link:gpu-nvswitch": 144, "link:die-nic": 144,
                "link:d2d": 0, "link:l1-l2": 0}
    assert {k: c.get(k, 0) for k in expected} == expected
    r = h800.route(die_id(3, 0, 0), die_id(3, 7, 0))
    assert (r.plane, r.bandwidth_gbps, r.hops, r.switches) == ("nvlink", 200.0, 2, 1)
    assert r.latency_us == pytest.approx(0.7)
    r = h800.route(die_id(3, 0, 0), die_id(4, 7, 0))
    assert r.partitioned and "use plane 'rdma'" in r.message
    r = h800.route(die_id(3, 0, 0), die_id(4, 7, 0), "rdma")
    assert (r.bandwidth_gbps, r.hops, r.switches) == (50.0, 6, 3)
    assert h800.node_pair_bandwidth(3, 4) == 8 * 50
    assert h800.vpc_bandwidth(0) == 200 / 8
    with pytest.raises(TopologyError, match="without a UB plane"):
        h800.ub_bandwidth_fraction()


def test_fresh_state_cache_and_build():
    a = topology("cloudmatrix384")
    a.fail("sp0")
    b = topology("cloudmatrix384")
    assert b.failed == set() and b.graph is a.graph
    r1 = b.route(die_id(0, 0, 0), die_id(1, 0, 0))
    assert b.route(die_id(0, 0, 0), die_id(1, 0, 0)) is r1  # cached per failure version
    b.fail("sp0")
    assert b.route(die_id(0, 0, 0), die_id(1, 0, 0)).n_paths == 96
    assert a.static is static("cloudmatrix384") is b.static           # the shared, failure-free part
    assert a.static.link_arrays().capacity_gbps[0] == a.link_arrays().base_gbps[0]
    fresh = build(catalog().system("cloudmatrix384"))
    assert fresh.counts() == b.counts()


def test_summary_ids_and_layout(cm):
    s = json.loads(json.dumps(topology_summary("cloudmatrix384")))
    assert s["system"] == "cloudmatrix384" and s["counts"]["link:l1-l2"] == 5376
    assert s["node_uplink_gbps"] == UPLINK
    assert parse("sp4/l2-11") == {"kind": "l2", "subplane": 4, "index": 11}
    assert parse(die_id(7, 3, 1)) == {"kind": "die", "node": 7, "npu": 3, "die": 1}
    assert cm.die_ids[:3] == ["n00/npu0/d0", "n00/npu0/d1", "n00/npu1/d0"] and len(cm.die_ids) == 768
    assert parse(node_label(100)) == {"kind": "node", "node": 100}     # 3-digit nodes parse whole
    assert parse(die_id(123, 7, 0)) == {"kind": "die", "node": 123, "npu": 7, "die": 0}
    assert cm.static.node_ids()[-1] == "n47" and cm.static.subplane_ids() == [f"sp{k}" for k in range(7)]
