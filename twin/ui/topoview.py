"""Cytoscape views of a system's topology: aggregated supernode, one node, one UB sub-plane.

Each view maps every graph element to a *view element* (or hides it) and groups the graph's links
into view edges between view elements. That grouping is computed once per (system, view) as index
arrays, so the live part per snapshot is a few numpy reductions: mean/max utilisation and traffic
per view edge, mean die utilisation per view node, and what is down.

The browser receives the elements once (with preset positions); afterwards each update is a
compact dict ``{"view", "v", "u": [...], "n": [...], "down": [...], "ndown": [...]}`` that a
clientside callback (assets/twin.js) merges into the elements. That keeps updates to a few KB.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from twin.config import catalog
from twin.topology import topology

from . import theme

AGG = "supernode"
_NODE_RE = re.compile(r"n(\d+)\Z")
_SP_RE = re.compile(r"sp(\d+)\Z")

KIND_LABEL = {"die": "NPU die", "cpu": "Kunpeng CPU", "l1": "L1 UB switch", "l2": "L2 UB switch",
              "rdma_nic": "RDMA NIC", "rdma_switch": "RDMA switch", "vpc_nic": "VPC card (QingTian)",
              "vpc_switch": "VPC switch", "storage": "object storage", "nvswitch": "NVSwitch",
              "node": "server node", "subplane": "UB sub-plane", "rack": "rack"}
PLANE_LABEL = {"ub": "UB", "rdma": "RDMA", "vpc": "VPC", "d2d": "die-to-die", "nvlink": "NVLink"}


def system_of(deployment: str | None) -> str:
    dep = deployment or "cloudmatrix-infer-paper"
    return catalog().deployment(dep).system


@dataclass
class View:
    """One drawable view: elements plus the index arrays that aggregate live data onto them."""
    name: str
    system: str
    elements: list                 # cytoscape elements (nodes first, then edges), util = 0
    node_ids: list[str]            # view node ids, index = position in live["n"]
    node_kind: list[str]
    node_dies: list[np.ndarray]    # die indices (engine order) per view node, may be empty
    edge_ids: list[str]
    edge_plane: list[str]
    edge_members: list[np.ndarray]  # graph eids per view edge
    edge_ends: list[tuple[str, str]]
    link_idx: np.ndarray            # concatenated member eids
    link_grp: np.ndarray            # view edge index for each entry of link_idx
    members: dict                  # view node id -> graph element ids it stands for

    @property
    def n_edges(self) -> int:
        return len(self.edge_ids)


def _graph(system: str):
    t = topology(system)
    return t, t.graph


def _agg_key(nid: str, a: dict) -> str | None:
    k = a["kind"]
    if "node" in a:
        return f"n{a['node']:02d}"
    if k == "l2":
        return f"sp{a['subplane']}"
    return nid   # switches, storage: themselves


@lru_cache(maxsize=64)
def view(system: str, name: str = AGG) -> View:
    """Build (once) the view `name`: "supernode", a node id ("n07") or a sub-plane id ("sp4")."""
    t, g = _graph(system)
    s_nodes = t.system.nodes
    m_node, m_sp = _NODE_RE.match(name), _SP_RE.match(name)
    if name == AGG:
        mapping = {nid: _agg_key(nid, a) for nid, a in g.nodes(data=True)}
        own = None
    elif m_node and int(m_node.group(1)) < s_nodes:
        n = int(m_node.group(1))
        mapping = {}
        for nid, a in g.nodes(data=True):
            if a.get("node") == n:
                mapping[nid] = nid
            elif a["kind"] == "l2":
                mapping[nid] = f"sp{a['subplane']}"
            elif a["kind"] in ("rdma_switch", "vpc_switch", "nvswitch"):
                mapping[nid] = nid
        own = {nid for nid, a in g.nodes(data=True) if a.get("node") == n}
    elif m_sp and t.kind == "supernode" and int(m_sp.group(1)) < t.system.subplanes:
        k = int(m_sp.group(1))
        mapping = {nid: nid for nid, a in g.nodes(data=True)
                   if a["kind"] in ("l1", "l2") and a.get("subplane") == k}
        own = set(mapping)
    else:
        raise ValueError(f"unknown topology view {name!r}: allowed 'supernode', a node n00..n{s_nodes - 1:02d}"
                         + (f" or a sub-plane sp0..sp{t.system.subplanes - 1}" if t.kind == "supernode" else ""))

    la = t.link_arrays()
    groups: dict[tuple, list[int]] = {}
    for eid, (u, v, plane, _kind) in enumerate(la.ends):
        a, b = mapping.get(u), mapping.get(v)
        if a is None or b is None or a == b:
            continue
        if own is not None and u not in own and v not in own:
            continue
        key = (min(a, b), max(a, b), plane) if name == AGG else (a, b, plane)
        groups.setdefault(key, []).append(eid)

    if name == AGG:
        used = sorted(set(mapping.values()))
    else:
        used = sorted({x for key in groups for x in key[:2]} | set(own))
    members: dict[str, list[str]] = {}
    for nid, vid in mapping.items():
        members.setdefault(vid, []).append(nid)
    pos = _positions(system, name, t, g, used)
    die_index = {d: i for i, d in enumerate(t.die_ids)}

    nodes, node_ids, node_kind, node_dies = [], [], [], []
    if name == AGG:   # compound rack boxes
        racks = sorted({g.nodes[m]["rack"] for vid in used if _NODE_RE.match(vid) for m in members[vid]})
        for r in racks:
            nodes.append({"data": {"id": f"rack:{r}", "label": f"rack {int(r[1:])}", "kind": "rack"},
                          "classes": "rack", "selectable": False})
    for vid in used:
        if vid not in pos:
            continue
        kind, label, parent = _describe(vid, g, name, t)
        dies = np.array(sorted(die_index[m] for m in members.get(vid, []) if m in die_index), dtype=np.int64)
        data = {"id": vid, "label": label, "kind": kind, "k": len(node_ids), "util": 0.0}
        if parent:
            data["parent"] = parent
        x, y = pos[vid]
        nodes.append({"data": data, "position": {"x": round(x, 1), "y": round(y, 1)},
                      "classes": f"k-{kind} u0"})
        node_ids.append(vid)
        node_kind.append(kind)
        node_dies.append(dies)

    shown = set(node_ids)
    edges, edge_ids, edge_plane, edge_members, edge_ends = [], [], [], [], []
    for (a, b, plane), eids in sorted(groups.items()):
        if a not in shown or b not in shown:
            continue
        j = len(edge_ids)
        eid_str = f"{a}--{b}" if len(eids) == 1 and name != AGG else f"{a}=={b}:{plane}"
        cap = float(la.base_gbps[eids].sum())
        optical = bool(la.optical[eids].any())
        edges.append({"data": {"id": eid_str, "source": a, "target": b, "plane": plane, "k": j,
                               "links": len(eids), "cap": round(cap, 1), "util": 0.0},
                      "classes": f"p-{plane} u0" + (" optical" if optical else "")})
        edge_ids.append(eid_str)
        edge_plane.append(plane)
        edge_members.append(np.array(eids, dtype=np.int64))
        edge_ends.append((a, b))
    if edge_members:
        link_idx = np.concatenate(edge_members)
        link_grp = np.concatenate([np.full(len(m), j, dtype=np.int64) for j, m in enumerate(edge_members)])
    else:
        link_idx = link_grp = np.zeros(0, dtype=np.int64)
    return View(name, system, nodes + edges, node_ids, node_kind, node_dies, edge_ids, edge_plane,
                edge_members, edge_ends, link_idx, link_grp, {k: v for k, v in members.items()})


def _describe(vid: str, g, view_name: str, t) -> tuple[str, str, str | None]:
    """(kind, label, compound parent) of a view node."""
    if _NODE_RE.match(vid):
        rack = g.nodes[f"{vid}/vpc"]["rack"] if f"{vid}/vpc" in g.nodes else None
        return "node", vid, (f"rack:{rack}" if rack and view_name == AGG else None)
    if _SP_RE.match(vid):
        return "subplane", f"UB plane {vid[2:]}", None
    a = g.nodes[vid]
    k = a["kind"]
    if k == "die":
        label = f"NPU{a['npu']}·d{a['die']}"
    elif k == "cpu":
        label = f"CPU{a['cpu']}"
    elif k == "l1":
        label = (f"n{a['node']:02d}" if _SP_RE.match(view_name) else f"L1-{a['subplane']}")
    elif k == "l2":
        label = f"L2-{a['index']}"
    elif k == "rdma_nic":
        label = f"NIC{a['npu']}"
    elif k == "rdma_switch":
        label = "RDMA spine" if a.get("role") == "spine" else f"RDMA leaf r{a.get('rack_index', 0):02d}"
        if view_name == AGG and a.get("role") != "spine":
            label = "leaf"
    elif k == "vpc_nic":
        label = "VPC card"
    elif k == "vpc_switch":
        label = "VPC switch"
    elif k == "storage":
        label = "OBS storage"
    elif k == "nvswitch":
        label = "NVSwitch"
    else:
        label = vid
    return k, label, None


def _positions(system: str, name: str, t, g, used: list[str]) -> dict[str, tuple[float, float]]:
    """Pixel positions (y grows downwards in cytoscape)."""
    if name == AGG:
        return _agg_positions(t, g, used)
    out: dict[str, tuple[float, float]] = {}
    if _SP_RE.match(name):
        l2 = sorted((v for v in used if g.nodes.get(v, {}).get("kind") == "l2"),
                    key=lambda v: g.nodes[v]["index"])
        l1 = sorted((v for v in used if g.nodes.get(v, {}).get("kind") == "l1"),
                    key=lambda v: g.nodes[v]["node"])
        # a wheel: the sub-plane's L2 chips inside, the L1 chip of every node around them
        for ring, radius in ((l2, 150.0), (l1, 340.0)):
            n = max(len(ring), 1)
            for i, v in enumerate(ring):
                a = 2 * math.pi * i / n - math.pi / 2
                out[v] = (radius * math.cos(a), radius * math.sin(a))
        return out
    # one node: L1 chips on top (sub-plane stubs above them), dies, CPUs, NICs, leaf
    n = int(name[1:])
    sysm = t.system
    dpp = len([d for d in t.die_ids if d.startswith(f"{name}/npu0/")]) or 1
    ndies = sysm.npus_per_node * dpp
    dx = 72.0
    width = (ndies - 1) * dx
    for v in used:
        a = g.nodes.get(v)
        if _SP_RE.match(v):
            k = int(v[2:])
            out[v] = (width * (k + 0.5) / sysm.subplanes, -150.0)
            continue
        if a is None:
            continue
        kind = a["kind"]
        if a.get("node") == n:
            if kind == "l1":
                out[v] = (width * (a["subplane"] + 0.5) / max(sysm.l1_per_node, 1), 0.0)
            elif kind == "nvswitch":
                out[v] = (width / 2, 0.0)
            elif kind == "die":
                i = a["npu"] * dpp + a["die"]
                out[v] = (i * dx + (a["npu"] * 0.0), 190.0)
            elif kind == "cpu":
                out[v] = (width * (a["cpu"] + 0.5) / max(sysm.cpus_per_node, 1), 300.0)
            elif kind == "rdma_nic":
                out[v] = ((a["npu"] * dpp + (dpp - 1) / 2) * dx, 400.0)
            elif kind == "vpc_nic":
                out[v] = (width + 130.0, 300.0)
        elif kind == "rdma_switch":
            out[v] = (width / 2, 500.0)
        elif kind == "vpc_switch":
            out[v] = (width + 130.0, 450.0)
    return out


def _agg_positions(t, g, used: list[str]) -> dict[str, tuple[float, float]]:
    """Racks as columns of nodes; UB sub-planes in a row above; RDMA leaves and spine below; VPC right."""
    sysm = t.system
    racks: dict[str, list[str]] = {}
    for vid in used:
        if _NODE_RE.match(vid) and f"{vid}/vpc" in g.nodes:
            racks.setdefault(g.nodes[f"{vid}/vpc"]["rack"], []).append(vid)
    cols = sorted(racks)
    per_col = max((len(v) for v in racks.values()), default=1)
    dx, dy = 110.0, 92.0
    if len(cols) > 16:   # many single-node racks (a GPU cluster): wrap into a grid
        ncol = 12
        out = {}
        for i, r in enumerate(cols):
            for j, vid in enumerate(sorted(racks[r])):
                out[vid] = ((i % ncol) * dx, (i // ncol) * dy * per_col + j * dy)
        width = (ncol - 1) * dx
        bottom = (math.ceil(len(cols) / ncol) * per_col - 1) * dy
    else:
        out = {vid: (i * dx, j * dy) for i, r in enumerate(cols) for j, vid in enumerate(sorted(racks[r]))}
        width = (len(cols) - 1) * dx
        bottom = (per_col - 1) * dy
    leaves = sorted(v for v in used if g.nodes.get(v, {}).get("kind") == "rdma_switch"
                    and g.nodes[v].get("role") != "spine")
    for v in leaves:
        ri = g.nodes[v].get("rack_index", 0)
        x = ri * dx if len(cols) <= 16 else (ri % 12) * dx
        out[v] = (x, bottom + 65.0)
    for v in used:
        a = g.nodes.get(v, {})
        if a.get("kind") == "rdma_switch" and a.get("role") == "spine":
            out[v] = (width / 2, bottom + 150.0)
        elif a.get("kind") == "vpc_switch":
            out[v] = (width + 130.0, bottom / 2 - 20)
        elif a.get("kind") == "storage":
            out[v] = (width + 130.0, bottom / 2 + 90)
        elif _SP_RE.match(v):
            k = int(v[2:])
            out[v] = (width * (k + 0.5) / max(sysm.subplanes, 1), -175.0)
    return out


# ---- live data --------------------------------------------------------------------------------

@lru_cache(maxsize=32)
def _failed_state(system: str, failed: tuple) -> tuple[np.ndarray, frozenset]:
    """(live capacity per eid, failed element ids) for a set of failed targets."""
    t = topology(system)
    for f in failed:
        try:
            t.fail(f)
        except Exception:   # an id this view cannot resolve: ignore for drawing
            continue
    cap = np.array(t.capacity)
    dead = frozenset(t.failed)
    return cap, dead


def live(v: View, snap) -> dict:
    """Compact per-view live data from a snapshot (see module doc)."""
    out = {"view": v.name, "v": int(getattr(snap, "version", 0))}
    if snap is None:
        return out
    util = np.asarray(snap.link_util, dtype=np.float64)
    n_e = v.n_edges
    if n_e and len(util) > int(v.link_idx.max(initial=0)):
        vals = util[v.link_idx]
        cnt = np.bincount(v.link_grp, minlength=n_e)
        mean = np.bincount(v.link_grp, weights=vals, minlength=n_e) / np.maximum(cnt, 1)
    else:
        mean = np.zeros(n_e)
    out["u"] = [round(float(x), 3) for x in mean]
    die_util = np.asarray(getattr(snap, "die_util", np.zeros(0)), dtype=np.float64)
    nu = []
    for kind, dies, vid in zip(v.node_kind, v.node_dies, v.node_ids):
        if len(dies) and len(die_util) > int(dies.max()):
            nu.append(round(float(die_util[dies].mean()), 3))
        else:
            nu.append(None)
    # switches and NICs: mean utilisation of their view edges
    if n_e:
        acc = np.zeros(len(v.node_ids))
        cnt = np.zeros(len(v.node_ids))
        idx = {vid: i for i, vid in enumerate(v.node_ids)}
        for j, (a, b) in enumerate(v.edge_ends):
            for end in (a, b):
                i = idx.get(end)
                if i is not None:
                    acc[i] += mean[j]
                    cnt[i] += 1
        nu = [x if x is not None else round(float(acc[i] / cnt[i]), 3) if cnt[i] else 0.0
              for i, x in enumerate(nu)]
    out["n"] = [x if x is not None else 0.0 for x in nu]
    pools = getattr(snap, "die_pool", ())
    if pools:
        out["pool"] = [_majority(pools, dies) for dies in v.node_dies]
    failed = tuple(getattr(snap, "failed", ()) or ())
    if failed:
        cap, dead = _failed_state(v.system, failed)
        down = [j for j, m in enumerate(v.edge_members) if len(m) and not cap[m].any()]
        part = [j for j, m in enumerate(v.edge_members) if len(m) and cap[m].any() and not cap[m].all()]
        ndown = [i for i, vid in enumerate(v.node_ids)
                 if vid in dead or (v.members.get(vid) and all(m in dead for m in v.members[vid]))]
        out["down"], out["part"], out["ndown"] = down, part, ndown
    else:
        out["down"], out["part"], out["ndown"] = [], [], []
    return out


def _majority(pools, dies: np.ndarray) -> str:
    if not len(dies):
        return ""
    vals = [pools[int(d)] for d in dies if int(d) < len(pools)]
    if not vals:
        return ""
    best = max(set(vals), key=vals.count)
    return best


def element_stats(v: View, snap, kind: str, id_: str) -> list[tuple[str, str]]:
    """Rows (label, value) describing a clicked view element, from the snapshot."""
    t = topology(v.system)
    la = t.link_arrays()
    rows: list[tuple[str, str]] = []
    util = np.asarray(snap.link_util, dtype=np.float64) if snap is not None else np.zeros(len(la.ends))
    failed = tuple(getattr(snap, "failed", ()) or ()) if snap is not None else ()
    cap = _failed_state(v.system, failed)[0] if failed else la.capacity_gbps
    if kind == "edge":
        if id_ not in v.edge_ids:
            return [("element", f"{id_} (not in this view)")]
        j = v.edge_ids.index(id_)
        m = v.edge_members[j]
        u = util[m] if len(util) > int(m.max()) else np.zeros(len(m))
        a, b = v.edge_ends[j]
        rows += [("link", f"{a} ↔ {b}"), ("plane", PLANE_LABEL.get(v.edge_plane[j], v.edge_plane[j])),
                 ("physical links", f"{len(m)}" + (" (optical)" if la.optical[m].any() else " (electrical)")),
                 ("capacity", f"{la.base_gbps[m].sum():,.1f} GB/s one way"),
                 ("live capacity", f"{cap[m].sum():,.1f} GB/s"),
                 ("utilisation mean / max", f"{u.mean() * 100:.1f} % / {u.max() * 100:.1f} %"),
                 ("traffic", f"{(u * la.base_gbps[m]).sum():,.2f} GB/s")]
        down = int((cap[m] <= 0).sum())
        if down:
            rows.append(("links down", f"{down} of {len(m)}"))
        return rows
    if id_ not in v.node_ids:
        return [("element", f"{id_} (not in this view)")]
    i = v.node_ids.index(id_)
    k = v.node_kind[i]
    rows.append(("element", f"{id_} — {KIND_LABEL.get(k, k)}"))
    dies = v.node_dies[i]
    if len(dies) and snap is not None and len(snap.die_util) > int(dies.max()):
        du = np.asarray(snap.die_util)[dies]
        pool = _majority(snap.die_pool, dies) if snap.die_pool else ""
        rows.append(("dies", f"{len(dies)}" + (f" ({pool} pool)" if pool else " (idle)")))
        rows.append(("die busy", f"{du.mean() * 100:.1f} %" + (f" (max {du.max() * 100:.0f} %)" if len(du) > 1 else "")))
    js = [j for j, (a, b) in enumerate(v.edge_ends) if id_ in (a, b)]
    by_plane: dict[str, list[int]] = {}
    for j in js:
        by_plane.setdefault(v.edge_plane[j], []).extend(int(e) for e in v.edge_members[j])
    for plane, eids in sorted(by_plane.items()):
        m = np.array(eids)
        u = util[m] if len(util) > int(m.max()) else np.zeros(len(m))
        rows.append((f"{PLANE_LABEL.get(plane, plane)} links here",
                     f"{len(m)} · {(u * la.base_gbps[m]).sum():,.1f} GB/s · {u.mean() * 100:.1f} % busy"))
    if failed:
        dead = _failed_state(v.system, failed)[1]
        mem = v.members.get(id_, [id_])
        n_dead = sum(1 for x in mem if x in dead)
        if n_dead:
            rows.append(("failed", f"{n_dead} of {len(mem)} elements"))
    return rows


def stylesheet() -> list[dict]:
    """Cytoscape stylesheet: colours from utilisation buckets (classes u0..u5), width from data(util)."""
    ramp = theme.UTIL_STOPS
    css = [
        {"selector": "node", "style": {
            "label": "data(label)", "font-size": 10, "color": theme.TEXT, "text-valign": "bottom",
            "text-margin-y": 3, "width": 16, "height": 16, "background-color": ramp[0],
            "border-width": 2, "border-color": "#5b6b80", "text-outline-width": 0}},
        {"selector": ".rack", "style": {
            "background-color": "#1b2738", "background-opacity": 0.6, "border-color": "#33465e",
            "border-width": 1, "label": "data(label)", "text-valign": "top", "text-halign": "center",
            "font-size": 13, "color": theme.MUTED, "shape": "round-rectangle", "padding": 10}},
        {"selector": ".k-node", "style": {"shape": "round-rectangle", "width": 58, "height": 30,
                                          "text-valign": "center", "text-margin-y": 0, "font-size": 14,
                                          "font-weight": "bold"}},
        {"selector": ".k-subplane", "style": {"shape": "round-rectangle", "width": 124, "height": 34,
                                              "text-valign": "center", "text-margin-y": 0, "font-size": 15,
                                              "border-color": theme.BLUE, "font-weight": "bold"}},
        {"selector": ".k-rdma_switch", "style": {"shape": "diamond", "border-color": theme.ORANGE,
                                                 "width": 26, "height": 26, "font-size": 13}},
        {"selector": ".k-vpc_switch, .k-storage", "style": {"shape": "hexagon", "border-color": theme.GREEN,
                                                           "width": 34, "height": 34, "font-size": 13}},
        {"selector": ".k-die", "style": {"shape": "round-rectangle", "width": 60, "height": 34,
                                         "font-size": 11, "text-valign": "center", "text-margin-y": 0}},
        {"selector": ".k-cpu", "style": {"shape": "round-rectangle", "width": 64, "height": 30, "font-size": 12,
                                         "text-valign": "center", "text-margin-y": 0, "border-color": "#adb5bd"}},
        {"selector": ".k-l1, .k-l2", "style": {"shape": "rectangle", "width": 34, "height": 18,
                                                "border-color": theme.BLUE, "font-size": 11}},
        {"selector": ".k-rdma_nic", "style": {"shape": "diamond", "border-color": theme.ORANGE,
                                              "width": 20, "height": 20, "font-size": 11}},
        {"selector": ".k-vpc_nic", "style": {"shape": "hexagon", "border-color": theme.GREEN}},
        {"selector": ".pool-prefill", "style": {"border-color": theme.TEAL, "border-width": 3}},
        {"selector": ".pool-decode", "style": {"border-color": theme.PURPLE, "border-width": 3}},
        {"selector": "edge", "style": {
            "curve-style": "haystack", "haystack-radius": 0, "line-color": ramp[0], "opacity": 0.75,
            "width": "mapData(util, 0, 1, 1, 6)"}},
        {"selector": "edge.p-ub", "style": {"opacity": 0.55}},
        {"selector": "edge.u0", "style": {"line-color": "#34455c", "opacity": 0.35}},
    ]
    for i, c in enumerate(ramp[1:], start=1):
        css.append({"selector": f"node.u{i}", "style": {"background-color": c}})
        css.append({"selector": f"edge.u{i}", "style": {"line-color": c, "opacity": 0.85}})
    css += [
        {"selector": "edge.part", "style": {"line-style": "dashed"}},
        {"selector": "edge.down", "style": {"line-color": "#ff4d4f", "line-style": "dashed",
                                            "opacity": 0.9, "width": 2}},
        {"selector": "node.down", "style": {"background-color": "#5c1a1b", "border-color": "#ff4d4f",
                                            "border-style": "dashed"}},
        {"selector": ":selected", "style": {"overlay-color": theme.YELLOW, "overlay-opacity": 0.25,
                                            "overlay-padding": 4}},
        {"selector": "node:active", "style": {"overlay-opacity": 0.2}},
    ]
    return css


def view_options(system: str) -> list[dict]:
    t = topology(system)
    opts = [{"label": "Whole supernode" if t.kind == "supernode" else "Whole cluster", "value": AGG}]
    opts += [{"label": f"node n{n:02d}", "value": f"n{n:02d}"} for n in range(t.system.nodes)]
    if t.kind == "supernode":
        opts += [{"label": f"UB sub-plane {k}", "value": f"sp{k}"} for k in range(t.system.subplanes)]
    return opts


def busiest_links(snap, system: str, n: int = 12) -> list[dict]:
    """Top-n links by utilisation: id, plane, medium, utilisation, traffic (GB/s)."""
    if snap is None:
        return []
    la = topology(system).link_arrays()
    util = np.asarray(snap.link_util, dtype=np.float64)
    if not len(util):
        return []
    k = min(n, len(util))
    top = np.argpartition(-util, k - 1)[:k]
    top = top[np.argsort(-util[top])]
    out = []
    for e in top:
        u = float(util[e])
        if u <= 0:
            break
        a, b, plane, kind = la.ends[int(e)]
        out.append({"link": f"{a} ↔ {b}", "plane": PLANE_LABEL.get(plane, plane), "kind": kind,
                    "medium": "optical" if la.optical[e] else "electrical",
                    "util": u, "gbps": u * float(la.base_gbps[e])})
    return out


def node_labels(system: str) -> list[str]:
    return [f"n{i:02d}" for i in range(topology(system).system.nodes)]


def finite(x) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) else 0.0
