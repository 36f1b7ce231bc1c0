"""Write tests/data/topology_384_golden.json: the CloudMatrix384 topology as built before issue 28.

Run once from the worktree root on the code before supernodes were generated from parameters:
    python tests/data/make_topology_golden.py
The test (tests/test_topology_params.py) rebuilds the same digest and compares it field by field.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("topology_384_golden.json")


def _h(obj) -> str:
    if isinstance(obj, np.ndarray):
        data = np.ascontiguousarray(obj).tobytes() + str(obj.dtype).encode() + str(obj.shape).encode()
    else:
        data = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _route(t, a: str, b: str, plane: str) -> list:
    r = t.route(a, b, plane)
    return [r.path_eids.tolist(), [round(float(x), 9) for x in r.flow_gbps], round(r.bandwidth_gbps, 9),
            r.hops, r.switches, r.latency_us, r.partitioned]


def route_sample(t) -> dict:
    """Routes over a fixed sample of endpoint pairs on every plane, healthy and with failures."""
    dies, cpus = t.die_ids, t.cpu_ids
    pairs = [(dies[i], dies[(i * 37 + 11) % len(dies)]) for i in range(0, len(dies), 3)]
    pairs += [(dies[i], cpus[(i * 7) % len(cpus)]) for i in range(0, len(dies), 17)]
    pairs += [(dies[0], dies[1]), (dies[0], dies[2]), (dies[5], dies[700])]
    out = {}
    for label, faults in (("healthy", []), ("faulted", ["n03/l1-2", "sp4/l2-9", "sp1", "n20/npu3/d1--n20/l1-6"])):
        t.reset()
        for f in faults:
            t.fail(f)
        if faults:
            t.degrade(t.link_id(int(t._s.l1l2[7, 3, 5])), 0.5)
        rows = []
        for a, b in pairs:
            for plane in ("ub", "rdma", "vpc") if "cpu" not in b else ("ub", "vpc"):
                rows.append(_route(t, a, b, plane))
        rows.append([t.node_uplink_gbps(n) for n in range(t.system.nodes)])
        rows.append([t.node_pair_bandwidth(a, (a * 5 + 3) % 48) for a in range(48)])
        rows.append([t.rdma_bandwidth(n) for n in range(48)] + [t.vpc_bandwidth(n) for n in range(48)])
        rows.append(t.ub_bandwidth_fraction())
        out[label] = _h(rows)
        out[label + "_first"] = rows[0]
    t.reset()
    return out


def digest() -> dict:
    from twin.topology import static, topology
    t = topology("cloudmatrix384")
    s = t._s
    st = static("cloudmatrix384")
    return {
        "counts": t.counts(),
        "ids": _h(list(s.ids)), "nkind": _h(list(s.nkind)), "nnode": _h(np.asarray(s.nnode)),
        "eu": _h(np.asarray(s.eu)), "ev": _h(np.asarray(s.ev)), "base": _h(np.asarray(s.base)),
        "lat": _h(np.asarray(s.lat)), "optical": _h(np.asarray(s.optical)),
        "eplane": _h(list(s.eplane)), "ekind": _h(list(s.ekind)), "ends": _h([list(e) for e in s.ends]),
        "die_ids": _h(st.die_ids), "cpu_ids": _h(st.cpu_ids), "npu_ids": _h(st.npu_ids()),
        "groups": _h({g: m.tolist() for g, m in s.groups.items()}),
        "node_attrs": _h(sorted((n, sorted(a.items())) for n, a in t.graph.nodes(data=True))),
        "parents": _h({p: [s.parent[p].tolist(), s.parent_eid[p].tolist(), s.depth[p].tolist()]
                       for p in sorted(s.parent)}),
        "examples": s.examples,
        "routes": route_sample(t),
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    OUT.write_text(json.dumps(digest(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
