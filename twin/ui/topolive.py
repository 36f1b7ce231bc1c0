"""Live numbers on a topology view, read from a snapshot only.

`live(view, snap)` is the compact per-update dict the browser merges into a drawing
``{"view", "v", "u": [...], "n": [...], "pool": [...], "down": [...], "part": [...], "ndown": [...],
"nfail": [[i, n], ...], "slow": [[i, f], ...]}``: mean utilisation per view edge and node, each node's pool,
what is down or partly down, how many faulty parts each view node holds or touches (`fault_counts`, so
that a lost L2 switch or a dead optical link shows on the whole-supernode view too), and the slowest
speed kept by a part running slowly in it (`slow_marks`, from `Snapshot.health`: a gray failure). Down and degraded come from
the snapshot's live link capacities and failed ids (`Snapshot.link_capacity`, `Snapshot.failed`,
`Snapshot.degraded`), so a degraded optical link shows as partly down without replaying anything.
"""
from __future__ import annotations

import numpy as np

from twin.engine.snapshot import PLANE_LABEL

from twin.ui.lang import N_, _
from twin.ui.topoview import View

KIND_LABEL = {"die": N_("NPU die"), "cpu": N_("Kunpeng CPU"), "l1": N_("L1 UB switch"), "l2": N_("L2 UB switch"),
              "rdma_nic": N_("RDMA NIC"), "rdma_switch": N_("RDMA switch"), "vpc_nic": N_("VPC card (QingTian)"),
              "vpc_switch": N_("VPC switch"), "storage": N_("object storage"), "nvswitch": "NVSwitch",
              "node": N_("server node"), "subplane": N_("UB sub-plane"), "rack": N_("rack")}
N_("die-to-die")      # the one English word of PLANE_LABEL (translated where shown)
# a health aspect of a part (`Snapshot.health`) in words
ASPECT_LABEL = {"compute": N_("compute"), "hbm": N_("HBM bandwidth"), "cpu": N_("CPU and DRAM speed"),
                "bandwidth": N_("link bandwidth")}


def _capacity(v: View, snap) -> np.ndarray:
    """Live capacity per eid from the snapshot (healthy capacities if it carries none)."""
    cap = getattr(snap, "link_capacity", None)
    return np.asarray(cap if cap is not None else v.topo.link_arrays().base_gbps, dtype=np.float64)


def _util(v: View, snap) -> np.ndarray:
    util = getattr(snap, "link_util", None)
    n = len(v.topo.link_arrays().ends)
    util = np.asarray(util if util is not None else np.zeros(n), dtype=np.float64)
    return util if len(util) == n else np.zeros(n)


def _edge_means(v: View, util: np.ndarray) -> np.ndarray:
    n_e = v.n_edges
    if not n_e:
        return np.zeros(0)
    cnt = np.bincount(v.link_grp, minlength=n_e)
    return np.bincount(v.link_grp, weights=util[v.link_idx], minlength=n_e) / np.maximum(cnt, 1)


def _node_means(v: View, snap, edge_mean: np.ndarray) -> list[float]:
    """Dies: their mean busy fraction; switches and NICs: the mean utilisation of their view edges."""
    die_util = np.asarray(getattr(snap, "die_util", np.zeros(0)), dtype=np.float64)
    acc, cnt = np.zeros(len(v.node_ids)), np.zeros(len(v.node_ids))
    idx = {vid: i for i, vid in enumerate(v.node_ids)}
    for j, ends in enumerate(v.edge_ends):
        for end in ends:
            i = idx.get(end)
            if i is not None:
                acc[i] += edge_mean[j]
                cnt[i] += 1
    out = []
    for i, dies in enumerate(v.node_dies):
        if len(dies) and len(die_util) > int(dies.max()):
            out.append(round(float(die_util[dies].mean()), 3))
        else:
            out.append(round(float(acc[i] / cnt[i]), 3) if cnt[i] else 0.0)
    return out


def majority(pools, dies: np.ndarray) -> str:
    """The pool most of these dies serve ("" if none)."""
    vals = [pools[int(d)] for d in dies if int(d) < len(pools)]
    return max(set(vals), key=vals.count) if vals else ""


def live(v: View, snap) -> dict:
    """Compact per-view live data from a snapshot (see module doc)."""
    out = {"view": v.name, "v": int(getattr(snap, "version", 0))}
    if snap is None:
        return out
    mean = _edge_means(v, _util(v, snap))
    out["u"] = [round(float(x), 3) for x in mean]
    out["n"] = _node_means(v, snap, mean)
    pools = getattr(snap, "die_pool", ())
    if pools:
        out["pool"] = [majority(pools, dies) for dies in v.node_dies]
    cap = _capacity(v, snap)
    base = v.topo.link_arrays().base_gbps
    dead = set(getattr(snap, "failed", ()) or ())
    out["down"] = [j for j, m in enumerate(v.edge_members) if len(m) and not cap[m].any()]
    out["part"] = [j for j, m in enumerate(v.edge_members)
                   if len(m) and cap[m].any() and (cap[m] < base[m]).any()]
    out["ndown"] = [i for i, vid in enumerate(v.node_ids)
                    if vid in dead or (v.members.get(vid) and all(m in dead for m in v.members[vid]))]
    counts = fault_counts(v, dead | set(getattr(snap, "degraded", None) or ()))
    out["nfail"] = [[i, n] for i, n in sorted(counts.items()) if i not in set(out["ndown"])]
    out["slow"] = [[i, f] for i, f in sorted(slow_marks(v, getattr(snap, "health", None)).items())
                   if i not in set(out["ndown"])]
    return out


def slow_marks(v: View, health) -> dict[int, float]:
    """{view node index: the lowest fraction of speed kept by a part in it}, for the parts running
    slowly (`Snapshot.health`: {part id: {aspect: fraction}}). A slow link is drawn by its capacity
    (partly down), so only parts count here: a slow die marks its NPU, node and rack at every zoom."""
    idx = {vid: i for i, vid in enumerate(v.node_ids)}
    out: dict[int, float] = {}
    for part, aspects in (health or {}).items():
        i = idx.get(v.owner.get(part, part))
        if "--" in part or i is None or not aspects:
            continue
        out[i] = round(min(out.get(i, 1.0), *aspects.values()), 2)
    return out


def fault_counts(v: View, faulty) -> dict[int, int]:
    """{view node index: faulty parts in it or touching it}: a failed element counts for the view node
    that stands for it, a failed or degraded link for the view nodes of both its ends (once each). So a
    lost L2 switch marks its sub-plane and a dead optical link its node and sub-plane, at every zoom."""
    idx = {vid: i for i, vid in enumerate(v.node_ids)}
    owner = v.owner
    out: dict[int, int] = {}
    for f in faulty or ():
        ends = f.split("--") if "--" in f else [f]
        for i in {idx.get(owner.get(e, e)) for e in ends} - {None}:
            out[i] = out.get(i, 0) + 1
    return out


def _edge_rows(v: View, j: int, util: np.ndarray, cap: np.ndarray) -> list[tuple[str, str]]:
    la = v.topo.link_arrays()
    m = v.edge_members[j]
    u = util[m]
    a, b = v.edge_ends[j]
    rows = [(N_("link"), f"{a} ↔ {b}"), (N_("plane"), PLANE_LABEL.get(v.edge_plane[j], v.edge_plane[j])),
            (N_("physical links"), f"{len(m)} " + (_("(optical)") if la.optical[m].any() else _("(electrical)"))),
            (N_("capacity"), _("%(v)s GB/s one way") % {"v": f"{la.base_gbps[m].sum():,.1f}"}),
            (N_("live capacity"), _("%(v)s GB/s") % {"v": f"{cap[m].sum():,.1f}"}),
            (N_("utilisation mean / max"), f"{u.mean() * 100:.1f} % / {u.max() * 100:.1f} %"),
            (N_("traffic"), _("%(v)s GB/s") % {"v": f"{(u * la.base_gbps[m]).sum():,.2f}"})]
    down = int((cap[m] <= 0).sum())
    if down:
        rows.append((N_("links down"), f"{down} / {len(m)}"))
    return rows


def element_stats(v: View, snap, kind: str, id_: str) -> list[tuple[str, str]]:
    """Rows (label, value) describing a clicked view element, from the snapshot."""
    util, cap = _util(v, snap), _capacity(v, snap)
    if kind == "edge":
        if id_ not in v.edge_ids:
            return [(N_("element"), f"{id_} " + _("(not in this view)"))]
        return _edge_rows(v, v.edge_ids.index(id_), util, cap)
    if id_ not in v.node_ids:
        return [(N_("element"), f"{id_} " + _("(not in this view)"))]
    i = v.node_ids.index(id_)
    k = v.node_kind[i]
    label = "GPU" if k == "die" and v.topo.dies_per_package() == 1 else KIND_LABEL.get(k, k)
    rows = [(N_("element"), f"{id_} — {_(label)}")]
    dies = v.node_dies[i]
    die_util = np.asarray(getattr(snap, "die_util", np.zeros(0)))
    if len(dies) and len(die_util) > int(dies.max()):
        du = die_util[dies]
        pool = majority(snap.die_pool, dies) if snap.die_pool else ""
        rows.append((N_("dies"), f"{len(dies)} " + (_("(%(pool)s pool)") % {"pool": _(pool)} if pool else _("(idle)"))))
        peak = " (" + _("max %(v)s") % {"v": f"{du.max() * 100:.0f} %"} + ")" if len(du) > 1 else ""
        rows.append((N_("die busy"), f"{du.mean() * 100:.1f} %{peak}"))
    by_plane: dict[str, list[int]] = {}
    for j, ends in enumerate(v.edge_ends):
        if id_ in ends:
            by_plane.setdefault(v.edge_plane[j], []).extend(int(e) for e in v.edge_members[j])
    base = v.topo.link_arrays().base_gbps
    for plane, eids in sorted(by_plane.items()):
        m = np.array(eids)
        rows.append((_("%(plane)s links here") % {"plane": _(PLANE_LABEL.get(plane, plane))},
                     f"{len(m)} · " + _("%(v)s GB/s") % {"v": f"{(util[m] * base[m]).sum():,.1f}"}
                     + f" · {util[m].mean() * 100:.1f} % " + _("busy")))
    dead = set(getattr(snap, "failed", ()) or ())
    mem = v.members.get(id_, [id_])
    n_dead = sum(1 for x in mem if x in dead)
    if n_dead:
        rows.append((N_("failed"), _("%(n)s of %(total)s elements") % {"n": n_dead, "total": len(mem)}))
    health = getattr(snap, "health", None) or {}
    slow = [health[x] for x in mem if x in health]
    if slow:
        kept = {a: min(h[a] for h in slow if a in h) for a in ASPECT_LABEL if any(a in h for h in slow)}
        rows.append((N_("running slow"), _("%(n)s of %(total)s elements") % {"n": len(slow), "total": len(mem)}
                     + " · " + ", ".join(_("%(what)s %(pct)s kept") % {"what": _(ASPECT_LABEL[a]), "pct": f"{f * 100:.0f} %"}
                                         for a, f in kept.items())))
    return rows


def busiest_links(snap, n: int = 12) -> list[dict]:
    """Top-n links by utilisation: id, plane, medium, utilisation, traffic (GB/s)."""
    info = getattr(snap, "system", None)
    util = np.asarray(getattr(snap, "link_util", ()), dtype=np.float64)
    if info is None or not len(util):
        return []
    la = info.topology.link_arrays()
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
                    "medium": N_("optical") if la.optical[e] else N_("electrical"),
                    "util": u, "gbps": u * float(la.base_gbps[e])})
    return out
