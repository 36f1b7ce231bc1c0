"""Supernodes from parameters: CloudMatrix384 rebuilt from its catalog description is the topology it
was before (a golden digest taken on the old code), the Atlas 950 SuperPoD predictions build from
catalog entries alone, an nD-FullMesh routes and cuts as its shape says, and bad descriptions are
refused with the field named. An 8K-NPU system builds in seconds, with O(N) links, and the pages
draw it aggregated by rack."""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from twin.model.config import CatalogError, System, catalog
from twin.topology import bisection_gbps, build, static, topology, topology_summary

DATA = Path(__file__).parent / "data"
L, SW = 0.05, 0.2                     # systems.toml link_latency_us, switch_latency_us


def _golden_module():
    spec = importlib.util.spec_from_file_location("make_topology_golden", DATA / "make_topology_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mini(**over) -> System:
    """A 16-die nD-FullMesh (4 x 2 x 2) of 950DT NPUs, 4 per node, 2 nodes per rack."""
    fields = dict(kind="supernode", accelerator="ascend-950dt", cpu="kunpeng-920", nodes=4, npus_per_node=4,
                  cpus_per_node=1, compute_racks=2, fabric="nd-fullmesh", mesh_dims=(4, 2, 2),
                  mesh_link_gbps=(10, 30, 15), cpu_l1_links=1, rdma_nic_gbps=400, vpc_gbps=400,
                  chip_power_kw=1, usd_per_chip_hour=1)
    return System(**(fields | over))


# ---- CloudMatrix384: the same topology as before it came from parameters ----------------------------
def test_cloudmatrix384_is_identical_to_the_golden_built_before():
    golden = json.loads((DATA / "topology_384_golden.json").read_text())
    now = json.loads(json.dumps(_golden_module().digest(), sort_keys=True))
    assert now["counts"] == golden["counts"]
    for key in golden:                                       # ids, link arrays, groups, parents, routes
        assert now[key] == golden[key], key


def test_cloudmatrix384_description_names_its_fabric():
    s = catalog().system("cloudmatrix384")
    assert (s.fabric, s.ub_fabric, s.label) == ("ub-clos-2tier", "ub-clos-2tier", "")
    d = topology_summary("cloudmatrix384")
    assert (d["npus"], d["dies"], d["cpus"], d["nodes"]) == (384, 768, 192, 48)
    assert d["switches"] == {"l1": 336, "l2": 112, "rdma_leaf": 12, "rdma_spine": 1, "vpc_switch": 1}
    assert d["bisection_gbps"] == 24 * 7 * 16 * 28           # half the nodes' L1-L2 uplinks (ref 1: 3,136 GB/s each)


# ---- Atlas 950 SuperPoD: a catalog entry, labelled prediction --------------------------------------
def test_atlas_950_mesh_counts():
    d = topology_summary("atlas-950-superpod")
    assert (d["label"], d["fabric"], d["accelerator"]) == ("prediction", "nd-fullmesh", "ascend-950dt (prediction)")
    assert (d["npus"], d["dies"], d["cpus"], d["nodes"]) == (8192, 8192, 4096, 1024)
    assert d["racks"] == {"compute": 128, "communication": 32}
    assert d["switches"] == {"rdma_leaf": 128, "rdma_spine": 1, "vpc_switch": 1}   # the mesh has no UB switch
    k = d["links"]["by_kind"]
    assert [k[f"mesh-d{i}"] for i in range(5)] == [8192 * (n - 1) // 2 for n in (8, 8, 4, 4, 8)]
    assert k["cpu-die"] == 4096 * 8
    assert d["bisection_gbps"] == 8192 // 4 * 2 * 2 * 74      # halving a 4-wide dimension is the cheapest cut
    t = topology("atlas-950-superpod")
    assert t.node_uplink_gbps(0, healthy=True) == 8 * (7 + 3 + 3 + 7) * 74
    la = t.link_arrays()
    inter = [e for e, (u, v, p, _k) in enumerate(la.ends) if p == "ub" and u.split("/")[0] != v.split("/")[0]]
    assert la.optical[inter].all()                           # all-optical between nodes (UB 2.0)
    r = t.route(t.die_ids[0], t.die_ids[-1], "ub")           # differs in all 5 coordinates
    assert (r.n_paths, r.hops, r.switches, r.bandwidth_gbps) == (5, 5, 4, 5 * 74)


def test_atlas_950_clos_counts():
    d = topology_summary("atlas-950-superpod-clos")
    assert (d["label"], d["fabric"], d["npus"], d["nodes"]) == ("prediction", "ub-clos-2tier", 8192, 1024)
    assert d["switches"]["l1"] == 1024 * 16 and d["switches"]["l2"] == 16 * 8
    assert d["links"]["by_kind"]["l1-l2"] == 1024 * 16 * 8
    assert d["bisection_gbps"] == 512 * 16 * 8 * 125          # = 8 x 2 TB/s x 512 nodes: non-blocking
    r = topology("atlas-950-superpod-clos").route("n00/npu0/d0", "n1023/npu7/d0", "ub")
    assert (r.n_paths, r.hops, r.switches) == (16 * 8, 4, 3)


def test_predictions_are_labelled_and_every_figure_has_a_source():
    cat = catalog()
    assert cat.chip("ascend-950dt").label == "prediction"
    assert cat.chip("ascend-910c-die").label == "" and cat.system("cloudmatrix384").label == ""
    from twin.predict.validate import predictions
    assert cat.deployment("atlas-950-infer").prediction
    assert {r["label"] for r in predictions() if r["deployment"] == "atlas-950-infer"} == {"prediction"}
    root = Path(__file__).parents[1] / "twin/catalog"
    for file, start in (("systems.toml", "[atlas-950-superpod]"), ("chips.toml", "[ascend-950dt]")):
        text = (root / file).read_text()
        body = text[text.index(start):].split("\n\n")[0] if file == "chips.toml" else text[text.index(start):]
        figures = [ln for ln in body.splitlines() if " = " in ln and ln.split(" = ", 1)[1][:1] in "0123456789[t"]
        assert len(figures) > 12
        for line in figures:                                     # a number: its source or "assumption"
            assert "#" in line and ("next " in line or "assumption" in line or "ref " in line), line


def test_an_8k_npu_topology_grows_links_with_n_and_builds_no_graph():
    from twin.topology.structure import Structure
    cat = catalog()
    for name in ("atlas-950-superpod", "atlas-950-superpod-clos"):
        s = cat.system(name)
        st = Structure(name, s, cat.chip(s.accelerator), cat.chip(s.cpu))
        assert len(st.ekind) < 50 * len(st.die_ids)          # links grow with N, never N^2
        assert "graph" not in st.__dict__ and "edge_index" not in st.__dict__   # made only when asked for


@pytest.mark.timing
def test_an_8k_npu_topology_is_cheap_to_build():
    from twin.topology.structure import Structure
    cat = catalog()
    for name in ("atlas-950-superpod", "atlas-950-superpod-clos"):
        s = cat.system(name)
        t0 = time.process_time()
        Structure(name, s, cat.chip(s.accelerator), cat.chip(s.cpu))
        cpu = time.process_time() - t0
        assert cpu < 6.0, f"{name} took {cpu:.1f} s of CPU"


# ---- nD-FullMesh: hops, paths, cuts --------------------------------------------------------------
def test_mesh_hops_paths_and_latency():
    t = build(mini(), "mini")
    d = t.die_ids                                  # die i has coordinates (i % 4, i // 4 % 2, i // 8)
    c = t.counts()
    assert (c["link:mesh-d0"], c["link:mesh-d1"], c["link:mesh-d2"]) == (24, 8, 8)
    for a, b, hops, gbps in ((0, 1, 1, 10), (0, 4, 1, 30), (0, 8, 1, 15), (0, 5, 2, 20), (0, 15, 3, 30)):
        r = t.route(d[a], d[b], "ub")
        assert (r.hops, r.n_paths, r.switches, r.bandwidth_gbps) == (hops, hops, hops - 1, gbps), (a, b)
        assert r.latency_us == pytest.approx(hops * L + (hops - 1) * SW)
        used = r.path_eids.ravel()
        assert len(set(used.tolist())) == used.size               # the paths share no link
    assert t.node_uplink_gbps(0, healthy=True) == 4 * (30 + 15)   # dims 1 and 2 leave the node
    assert [t.route(d[0], c, "ub").hops for c in t.cpu_ids] == [1, 2, 2, 3]   # a CPU hangs off its node's dies


def test_mesh_routes_around_failures():
    t = build(mini(), "mini")
    d = t.die_ids
    first = t.route(d[0], d[15], "ub").path_eids[:, 0]
    t.fail(t.link_id(int(first[0])))
    r = t.route(d[0], d[15], "ub")
    assert (r.n_paths, r.bandwidth_gbps) == (2, 20)
    for e in first[1:]:
        t.fail(t.link_id(int(e)))
    r = t.route(d[0], d[15], "ub")                               # every minimal path cut: a detour
    assert not r.partitioned and r.n_paths == 1 and r.hops > 3
    assert t.ub_bandwidth_fraction() < 1


def test_mesh_bisection_is_the_exact_balanced_min_cut_of_a_small_mesh():
    t = build(mini(), "mini")
    s = t._s
    pos = {int(g): i for i, g in enumerate(s.die_flat)}
    mesh = [(pos[int(s.eu[e])], pos[int(s.ev[e])], s.base[e]) for e, k in enumerate(s.ekind) if k.startswith("mesh")]
    exact = min(sum(w for a, b, w in mesh if (a in half) != (b in half))
                for half in map(set, itertools.combinations(range(16), 8)))
    assert bisection_gbps(s) == (exact, "smallest halving cut along one mesh dimension") == (120.0, bisection_gbps(s)[1])


# ---- bad descriptions ----------------------------------------------------------------------------
@pytest.mark.parametrize("over,match", [
    (dict(mesh_dims=(4, 2)), r"mesh_dims = \[4, 2\]: fabric nd-fullmesh needs"),
    (dict(mesh_dims=(4, 2, 3), mesh_link_gbps=(1, 1, 1)), r"product must equal the 16 dies"),
    (dict(mesh_dims=(8, 2), mesh_link_gbps=(1, 1)), r"innermost dimensions must multiply to the 4 dies of a node"),
    (dict(mesh_link_gbps=(10, 0, 15)), r"mesh_link_gbps > 0"),
    (dict(fabric="ub-clos-2tier"), r"ub-clos-2tier needs l1_per_node"),
    (dict(fabric="ub-clos-2tier", l1_per_node=7, subplanes=6, l2_per_subplane=2, l1_l2_link_gbps=1, mesh_dims=()),
     r"l1_per_node = 7: must equal subplanes = 6"),
    (dict(kind="cluster"), r"a cluster has no UB fabric"),
])
def test_bad_fabric_descriptions_are_refused(over, match):
    with pytest.raises(CatalogError, match=match):
        build(mini(**over), "bad")


def test_unknown_fabric_kind_names_the_allowed_ones():
    with pytest.raises(ValueError, match="ub-clos-2tier"):
        mini(fabric="torus")


def test_cli_topology_bad_system_is_one_line_with_the_allowed_names():
    p = subprocess.run([sys.executable, "-m", "twin", "topology", "--system", "atlas-951"],
                       capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "system = 'atlas-951': unknown" in p.stderr
    assert "atlas-950-superpod, atlas-950-superpod-clos, cloudmatrix384" in p.stderr


# ---- pages at 8K NPUs ----------------------------------------------------------------------------
def test_whole_system_drawings_aggregate_racks_at_8k():
    from twin.ui import topoview
    t = static("atlas-950-superpod")
    v = topoview.view(t, topoview.AGG)
    assert sum(1 for k in v.node_kind if k == "rack") == 128 and v.n_edges < 2000
    m = np.arange(1024 * 1024, dtype=float).reshape(1024, 1024)
    agg, labels = topoview.node_matrix(t, m)
    assert agg.shape == (128, 128) and labels[:2] == ["r00", "r01"] and agg.sum() == m.sum()
    assert agg[1, 2] == m[8:16, 16:24].sum()
    small, names = topoview.node_matrix(static("cloudmatrix384"), np.ones((48, 48)))
    assert small.shape == (48, 48) and names[0] == "n00"          # 384 stays drawn by node


def test_live_pages_serve_an_8k_npu_twin(dash_app, twin_registry):
    from tests.test_callbacks import size, wait_until
    page = {n: importlib.import_module(f"pages.{n}") for n in ("overview", "topology", "traffic", "failures")}
    tw = twin_registry.shared()
    tw.control("reset", {"deployment": "atlas-950-infer"})
    assert wait_until(lambda: tw.run >= 1 and len(tw.snapshot.history.get("t", [])) >= 2, timeout=240)
    assert tw.snapshot.system.topology.name == "atlas-950-superpod"
    topo = page["topology"].tick(1, "shared", None, view_name="supernode", sel=None)
    assert len(topo["live"]["n"]) < 300 and size(topo) < 600_000
    tr = page["traffic"].tick(1, "shared", None)
    assert len(tr["matrix"]["data"][0]["z"]) == 128 and "Rack-to-rack" in tr["matrix_title"]
    assert size(tr) < 400_000
    assert page["overview"].tick(1, "shared", None)["cursor"]["twin"] == "shared"
    first = page["failures"].tick(1, "shared", None, view_name="supernode")
    second = page["failures"].tick(2, "shared", first["cursor"], view_name="supernode")   # draws the picker
    assert size(first) < 600_000 and size(second) < 1_000_000


# ---- what-ifs of the paper's directions: catalog variants of CloudMatrix384 --------------------------
def test_unified_scaleout_has_no_rdma_or_vpc_plane():
    base, uni = topology("cloudmatrix384"), topology("cloudmatrix384-unified")
    assert catalog().system("cloudmatrix384-unified").label == "what-if"
    cb, cu = base.counts(), uni.counts()
    assert (cu["rdma_nic"], cu["vpc_nic"], cu["rdma_switch"], cu["vpc_switch"]) == (0, 0, 0, 0)
    assert {k: v for k, v in cu.items() if k.startswith("link:")} == \
        {k: v for k, v in cb.items() if k.startswith("link:") and v and k in ("link:d2d", "link:die-l1", "link:cpu-l1", "link:l1-l2")}
    assert uni.node_uplink_gbps(3) == base.node_uplink_gbps(3) == 7 * 16 * 28
    with pytest.raises(ValueError, match=r"plane 'rdma' not in cloudmatrix384-unified .*allowed: ub, d2d"):
        uni.route("n00/npu0/d0", "n05/npu0/d0", "rdma")
    with pytest.raises(ValueError, match="allowed: ub, d2d"):
        uni.rdma_bandwidth(0)
    assert uni.route("n00/npu0/d0", "n05/npu0/d0", "ub").n_paths == 7 * 16


def test_what_if_deployments_change_only_what_they_name():
    cat = catalog()
    paper = cat.deployment("cloudmatrix-infer-paper").model_dump()
    uni, pool = cat.deployment("cloudmatrix-unified").model_dump(), cat.deployment("cloudmatrix-cpu-pool").model_dump()
    assert {k for k in paper if paper[k] != uni[k]} == {"description", "system", "kv_transfer_plane"}
    assert {k for k in paper if paper[k] != pool[k]} == {"description", "ems_nodes", "ems_dram_fraction"}
    assert (uni["kv_transfer_plane"], pool["ems_nodes"]) == ("ub", 48)


def test_a_unified_system_refuses_rdma_kv_transfers(tmp_path):
    import shutil
    from twin.model.config import CATALOG_DIR, Catalog
    for f in CATALOG_DIR.glob("*.toml"):
        shutil.copy(f, tmp_path)
    dep = tmp_path / "deployments.toml"
    dep.write_text(dep.read_text().replace('kv_transfer_plane = "ub"        # ref 6', 'kv_transfer_plane = "rdma"      # ref 6'))
    with pytest.raises(CatalogError, match=r"\[cloudmatrix-unified\]: cloudmatrix384-unified has one scale-out "
                                           r"plane over UB.*kv_transfer_plane = 'rdma'.*allowed: \"ub\" for both"):
        Catalog(tmp_path)


@pytest.mark.parametrize("base,match", [("nope", r"\[cloudmatrix-unified\]\.base = 'nope': unknown \(allowed: "),
                                        ("cloudmatrix-unified", r"base = 'cloudmatrix-unified': a cycle")])
def test_bad_base_is_refused(tmp_path, base, match):
    import shutil
    from twin.model.config import CATALOG_DIR, Catalog
    for f in CATALOG_DIR.glob("*.toml"):
        shutil.copy(f, tmp_path)
    dep = tmp_path / "deployments.toml"
    text = dep.read_text().replace('[cloudmatrix-unified]\nbase = "cloudmatrix-infer-paper"',
                                   f'[cloudmatrix-unified]\nbase = "{base}"')
    dep.write_text(text)
    with pytest.raises(CatalogError, match=match):
        Catalog(tmp_path)


def test_mesh_links_carry_utilisation_like_clos_uplinks():
    from twin.engine.traffic import KINDS, _link_index
    for name in ("atlas-950-superpod", "cloudmatrix384"):
        ends = static(name).link_arrays().ends
        kind, node = _link_index(name, tuple(ends))
        ub = [e for e, end in enumerate(ends) if end[2] == "ub"]
        assert (kind[ub] >= 0).all() and (node[ub] >= 0).all(), name      # every UB link is drawn busy or idle
        up = [e for e in ub if KINDS[kind[e]] == "l1-l2"]
        assert len(up) == sum(len(r) for r in static(name)._s.node_up) // (2 if name != "cloudmatrix384" else 1)
