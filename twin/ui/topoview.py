"""Cytoscape views of a system's topology: the whole system, one node, one UB sub-plane.

Each view maps every graph element to a *view element* (or hides it) and groups the graph's links
into view edges between view elements. That grouping is computed once per (system, view) as index
arrays, so the live part per snapshot is a few numpy reductions: mean/max utilisation and traffic
per view edge, mean die utilisation per view node, and what is down.

The browser receives the elements once (with preset positions); afterwards each update is a
compact dict (`twin.ui.topolive`) that a clientside callback (assets/twin.js) merges into the
elements. Views are drawn from the failure-free topology a snapshot carries
(`Snapshot.system.topology`): never from a topology built here. Element ids are the topology's own
(`twin.topology.ids`); the only id made here is a bundle of links between two view elements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from twin.topology import (StaticTopology, kind_of, node_label, node_of, parse, rack_id, subplane_id,
                           subplane_of, vpc_nic_id)

from twin.ui.lang import N_, _, request_lang

AGG = "supernode"       # the whole-system view (named for the supernode; a cluster uses it too)
RACKS_ABOVE_NODES = 96  # the whole-system view draws racks, not nodes, above this many (an 8K-NPU system
                        # has 1,024 nodes and ~10^4 node-to-node bundles: too many for one drawing)


def bundle_id(a: str, b: str, plane: str) -> str:
    """Id of a view edge standing for several links between two view elements (not a topology id)."""
    return f"{a}=={b}:{plane}"


def is_bundle(eid: str) -> bool:
    return "==" in eid


@dataclass
class View:
    """One drawable view: elements plus the index arrays that aggregate live data onto them."""
    name: str
    topo: StaticTopology
    raw_elements: list             # cytoscape elements (nodes first, then edges), util = 0, English labels
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
    labels: dict = field(default_factory=dict)   # node id -> (msgid, values) of a label in words
    _by_lang: dict = field(default_factory=dict, repr=False)

    @cached_property
    def owner(self) -> dict:
        """Graph element id -> the view node that stands for it (the inverse of `members`)."""
        return {m: vid for vid, mem in self.members.items() for m in mem}

    @property
    def n_edges(self) -> int:
        return len(self.edge_ids)

    @property
    def elements(self) -> list:
        """The elements with their labels in the viewer's language (ids stay as they are; built
        once per language, since a view is cached for every viewer)."""
        lang = request_lang()
        if lang == "en" or not self.labels:
            return self.raw_elements
        if lang not in self._by_lang:
            self._by_lang[lang] = [
                dict(el, data=dict(el["data"], label=_(self.labels[el["data"]["id"]][0])
                                   % self.labels[el["data"]["id"]][1]))
                if el["data"].get("id") in self.labels else el for el in self.raw_elements]
        return self._by_lang[lang]


def _agg_key(nid: str, a: dict, by_rack: bool = False) -> str | None:
    if "node" in a:
        return a["rack"] if by_rack else node_label(a["node"])
    if a["kind"] == "l2":
        return subplane_id(a["subplane"])
    return nid   # switches, storage: themselves


def view_kind(name: str) -> str:
    """"supernode" (the whole system), "node" or "subplane"."""
    return AGG if name == AGG else "subplane" if kind_of(name) == "subplane" else "node"


@lru_cache(maxsize=64)
def view(t: StaticTopology, name: str = AGG) -> View:
    """Build (once) the view `name`: "supernode", a node id ("n07") or a sub-plane id ("sp4")."""
    g = t.graph
    if name == AGG:
        racks = by_rack(t)
        mapping = {nid: _agg_key(nid, a, racks) for nid, a in g.nodes(data=True)}
        own = None
    elif name in t.node_ids():
        n = node_of(name)
        mapping = {}
        for nid, a in g.nodes(data=True):
            if a.get("node") == n:
                mapping[nid] = nid
            elif a["kind"] == "l2":
                mapping[nid] = subplane_id(a["subplane"])
            elif a["kind"] in ("rdma_switch", "vpc_switch", "nvswitch"):
                mapping[nid] = nid
        own = {nid for nid, a in g.nodes(data=True) if a.get("node") == n}
    elif name in t.subplane_ids():
        k = subplane_of(name)
        mapping = {nid: nid for nid, a in g.nodes(data=True)
                   if a["kind"] in ("l1", "l2") and a.get("subplane") == k}
        own = set(mapping)
    else:
        nodes = t.node_ids()
        raise ValueError(f"unknown topology view {name!r}: allowed 'supernode', a node {nodes[0]}..{nodes[-1]}"
                         + (f" or a sub-plane sp0..sp{t.system.subplanes - 1}" if t.subplane_ids() else ""))

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
    pos = _positions(name, t, g, used)
    die_index = {d: i for i, d in enumerate(t.die_ids)}

    nodes, node_ids, node_kind, node_dies, labels = [], [], [], [], {}
    if name == AGG:   # compound rack boxes
        racks = sorted({g.nodes[m]["rack"] for vid in used if kind_of(vid) == "node" for m in members[vid]})
        for r in racks:
            labels[r] = (N_("rack %(n)s"), {"n": parse(r)["rack"]})
            nodes.append({"data": {"id": r, "label": "rack %(n)s" % labels[r][1], "kind": "rack"},
                          "classes": "rack", "selectable": False})
    for vid in used:
        if vid not in pos:
            continue
        kind, label, parent = _describe(vid, g, name, t)
        if isinstance(label, tuple):          # words: (msgid, values), shown translated (View.elements)
            labels[vid] = label
            label = label[0] % label[1]
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
        eid_str = t.link_id(eids[0]) if len(eids) == 1 and name != AGG else bundle_id(a, b, plane)
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
    return View(name, t, nodes + edges, node_ids, node_kind, node_dies, edge_ids, edge_plane,
                edge_members, edge_ends, link_idx, link_grp, {k: v for k, v in members.items()}, labels)


def _describe(vid: str, g, view_name: str, t) -> tuple[str, str | tuple, str | None]:
    """(kind, label, compound parent) of a view node; a label in words is (msgid, values)."""
    kind = kind_of(vid)
    if kind == "node":
        return "node", vid, (_rack_of(g, vid) if view_name == AGG else None)
    if kind == "subplane":
        return "subplane", (N_("UB plane %(n)s"), {"n": subplane_of(vid)}), None
    if kind == "rack":
        return "rack", (N_("rack %(n)s"), {"n": parse(vid)["rack"]}), None
    a = g.nodes[vid]
    k = a["kind"]
    if k == "die":        # an Ascend package holds two dies; a GPU is one
        label = f"NPU{a['npu']}·d{a['die']}" if t.dies_per_package() > 1 else f"GPU{a['npu']}"
    elif k == "cpu":
        label = f"CPU{a['cpu']}"
    elif k == "l1":
        label = node_label(a["node"]) if view_kind(view_name) == "subplane" else f"L1-{a['subplane']}"
    elif k == "l2":
        label = f"L2-{a['index']}"
    elif k == "rdma_nic":
        label = f"NIC{a['npu']}"
    elif k == "rdma_switch":
        label = (N_("RDMA spine"), {}) if a.get("role") == "spine" else (
            N_("RDMA leaf r%(n)s"), {"n": f"{a.get('rack_index', 0):02d}"})
        if view_name == AGG and a.get("role") != "spine":
            label = (N_("leaf"), {})
    elif k == "vpc_nic":
        label = (N_("VPC card"), {})
    elif k == "vpc_switch":
        label = (N_("VPC switch"), {})
    elif k == "storage":
        label = (N_("OBS storage"), {})
    elif k == "nvswitch":
        label = "NVSwitch"
    else:
        label = vid
    return k, label, None


def _rack_of(g, vid: str) -> str | None:
    """The compute rack of a server node (the rack of its elements)."""
    card = vpc_nic_id(node_of(vid))          # every server has one VPC card, in its rack
    return g.nodes[card]["rack"] if card in g.nodes else None


def _positions(name: str, t, g, used: list[str]) -> dict[str, tuple[float, float]]:
    """Pixel positions (y grows downwards in cytoscape)."""
    if name == AGG:
        return _agg_positions(t, g, used)
    out: dict[str, tuple[float, float]] = {}
    if view_kind(name) == "subplane":
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
    n = node_of(name)
    sysm = t.system
    dpp = t.dies_per_package()
    ndies = sysm.npus_per_node * dpp
    dx = 72.0
    width = (ndies - 1) * dx
    for v in used:
        a = g.nodes.get(v)
        if kind_of(v) == "subplane":
            out[v] = (width * (subplane_of(v) + 0.5) / sysm.subplanes, -150.0)
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
        if kind_of(vid) == "node":
            racks.setdefault(_rack_of(g, vid), []).append(vid)
        elif kind_of(vid) == "rack":      # a large system drawn by rack: one rack a column of one
            racks.setdefault(vid, []).append(vid)
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
        elif kind_of(v) == "subplane":
            out[v] = (width * (subplane_of(v) + 0.5) / max(sysm.subplanes, 1), -175.0)
    return out


def by_rack(t: StaticTopology) -> bool:
    """Whether whole-system drawings group nodes into racks (more than RACKS_ABOVE_NODES nodes)."""
    return t.system.nodes > RACKS_ABOVE_NODES


def node_matrix(t: StaticTopology, matrix) -> tuple[np.ndarray, list[str]]:
    """A node-to-node matrix and its labels, summed into rack-to-rack on a system drawn by rack."""
    m = np.asarray(matrix if matrix is not None else np.zeros((0, 0)), dtype=float)
    if not by_rack(t) or m.shape != (t.system.nodes, t.system.nodes):
        return m, t.node_ids()
    racks = t.node_racks()
    starts = np.flatnonzero(np.r_[True, racks[1:] != racks[:-1]])
    m = np.add.reduceat(np.add.reduceat(m, starts, axis=0), starts, axis=1)
    return m, [rack_id(int(racks[i])) for i in starts]


def view_options(t: StaticTopology) -> list[dict]:
    """The views a picker offers: the whole system, each node, each UB sub-plane (a supernode)."""
    opts = [{"label": _("Whole supernode") if t.kind == "supernode" else _("Whole cluster"), "value": AGG}]
    opts += [{"label": _("node %(n)s") % {"n": n}, "value": n} for n in t.node_ids()]
    opts += [{"label": _("UB sub-plane %(n)s") % {"n": subplane_of(k)}, "value": k} for k in t.subplane_ids()]
    return opts


def crumb(t: StaticTopology, name: str) -> str:
    """Where a view sits, e.g. "Supernode › node n07" or "Cluster › node n03"."""
    top = _("Supernode") if t.kind == "supernode" else _("Cluster")
    kind = view_kind(name)
    if kind == AGG:
        return top
    return top + " › " + (_("UB sub-plane %(n)s") % {"n": subplane_of(name)} if kind == "subplane"
                          else _("node %(n)s") % {"n": name})
