"""The snapshot is the whole truth a page draws: the system and its fabric names, live link
capacities with failures and degradations applied, and traffic named per fabric."""
from __future__ import annotations

import numpy as np
import pytest

from twin.engine import Engine
from twin.topology import static


@pytest.fixture(scope="module")
def h800():
    eng = Engine(scenario="paper-decode", deployment="deepseek-h800", seed=0)
    eng.advance(20.0)
    return eng, eng.snapshot()


def test_a_gpu_cluster_snapshot_names_its_system_and_fabrics(h800):
    _eng, snap = h800
    info = snap.system
    assert (info.name, info.kind, info.nodes, info.scaleup, info.accelerator) == \
        ("gpu-cluster-h800", "cluster", 18, "NVLink", "GPU")
    assert info.planes == {"rdma": "RDMA", "vpc": "VPC", "nvlink": "NVLink"}          # no UB
    assert info.topology is static("gpu-cluster-h800")                              # shared, failure-free
    fab = snap.fabric_gbps()
    assert list(fab) == ["NVLink", "RDMA", "VPC"]
    pg = snap.plane_gbps
    assert fab["NVLink"] + fab["RDMA"] == pytest.approx(pg["ub"] + pg["rdma"])      # nothing lost or made
    mat = np.asarray(snap.node_traffic)
    assert fab["NVLink"] == pytest.approx(pg["ub"] * np.trace(mat) / mat.sum())      # the diagonal
    assert fab["RDMA"] > 10 * fab["NVLink"] > 0          # EP144 over 18 servers: most peers are remote


def test_cluster_all_to_all_loads_the_rdma_links(h800):
    eng, snap = h800
    ends = eng.topo.link_arrays().ends
    util = np.asarray(snap.link_util)
    by_kind = {k: util[[i for i, e in enumerate(ends) if e[3] == k]] for k in ("die-nic", "gpu-nvswitch")}
    assert (by_kind["die-nic"] > 0).all() and (by_kind["gpu-nvswitch"] > 0).all()


def test_live_capacities_show_failures_and_degradations():
    eng = Engine(scenario="default", seed=0)
    link = "n20/l1-3--sp3/l2-7"
    eng.topo.degrade(link, 0.5)
    eng.topo.fail("sp2/l2-5")
    eng.advance(1.0)
    snap = eng.snapshot()
    la = eng.topo.link_arrays()
    e = eng.topo.edge(link)
    assert snap.link_capacity[e] == la.base_gbps[e] * 0.5 == 14.0                   # ref 1: 28 GB/s links
    assert snap.degraded == {link: 0.5} and "sp2/l2-5" in snap.failed
    cut = [i for i, (u, v, _p, _k) in enumerate(la.ends) if "sp2/l2-5" in (u, v)]
    assert len(cut) == 48 and not snap.link_capacity[cut].any()                      # every L1 link of it
    assert snap.system.title.startswith("cloudmatrix384: supernode of 48 nodes")
    assert snap.fabric_gbps()["UB"] == snap.plane_gbps["ub"]


def test_topology_views_draw_degraded_and_failed_links_from_the_snapshot():
    from twin.ui import topolive
    from twin.ui import topoview
    eng = Engine(scenario="default", seed=0)
    link = "n20/l1-3--sp3/l2-7"
    eng.topo.degrade(link, 0.5)
    eng.advance(1.0)
    snap = eng.snapshot()
    v = topoview.view(snap.system.topology, "sp3")
    j = v.edge_ids.index(link)
    live = topolive.live(v, snap)
    assert live["part"] == [j] and live["down"] == []                  # degraded: drawn dashed, not down
    rows = dict(topolive.element_stats(v, snap, "edge", link))
    assert rows["capacity"] == "28.0 GB/s one way" and rows["live capacity"] == "14.0 GB/s"
    eng.topo.fail(link)
    eng.advance(1.0)
    live = topolive.live(v, eng.snapshot())
    assert live["down"] == [j] and live["part"] == []


def test_cluster_traffic_charts_add_up_to_the_header(h800, dash_app):
    """Issue 36 (9): on the H800 cluster the Traffic page's header said RDMA 2,981 GB/s while its RDMA
    chart drew 0 (it drew KV transfers only, none in paper-decode). Each chart's newest point now
    is the header's figure: NVLink = the all-to-all inside a server, RDMA = the rest of it stacked
    under the KV transfers."""
    import importlib
    from twin.ui import figures
    traffic = importlib.import_module("pages.traffic")
    _eng, snap = h800
    specs = traffic.strip_specs(snap.system)
    top = lambda k: sum(tr["y"][-1] for tr in figures.strip_figure(specs[k], snap.history)["data"])  # noqa: E731
    fab = snap.fabric_gbps()
    assert fab["RDMA"] > 1000
    assert top("scaleup") == pytest.approx(fab["NVLink"], rel=1e-3)
    assert top("rdma") == pytest.approx(fab["RDMA"], rel=1e-3)
    assert top("vpc") == pytest.approx(fab["VPC"], abs=1e-3)
    assert snap.history["ub_across_gbps"][-1] == pytest.approx(fab["RDMA"] - snap.plane_gbps["rdma"])
