"""Random failures: the parts each fault kind can hit and their failure rates (catalog MTBFs,
assumptions), and the process that injects them with the failure clock compressed."""
from __future__ import annotations

import numpy as np

from twin.topology import node_label
from twin.engine.faults.spec import defaults


def random_classes(topo) -> dict[str, list[str]]:
    """The parts random failures can hit, per fault kind with a catalog MTBF. NPUs and nodes are
    not graph elements (the graph holds dies), so they come from the die ids and the node count."""
    links = topo.link_arrays().ends
    return {"optical_link": [topo.link_id(e) for e, end in enumerate(links) if end[3] == "l1-l2"],
            "npu": list(dict.fromkeys(d.rsplit("/", 1)[0] for d in topo.die_ids)),
            "cpu": topo.ids("cpu"), "l1": topo.ids("l1"), "l2": topo.ids("l2"),
            "node": [node_label(i) for i in range(topo.system.nodes)]}


def failure_rates(topo) -> tuple[dict[str, list[str]], np.ndarray]:
    """The parts per fault kind and each kind's failures per hour (parts / MTBF): the one rule for
    how often what fails (the engine draws from it; pages can show it)."""
    classes = random_classes(topo)
    mtbf = defaults()["mtbf_hours"]
    return classes, np.array([len(v) / mtbf[k] for k, v in classes.items()])


def random_failures(manager, hours_per_sim_s: float, gen: int, rng=None):
    """Random failures per component class at the catalog's MTBF (assumptions), with time
    compressed by `hours_per_sim_s` so that failures are seen in a demo. Stops when the
    manager's generation moves on (a new setting). Draws from `rng` (default the engine's)."""
    eng = manager.eng
    rng = eng.rng if rng is None else rng
    classes, weights = failure_rates(eng.topo)
    total = sum(w for w, v in zip(weights, classes.values()) if v)
    while True:
        gap_h = rng.exponential(1.0 / total)
        yield eng.env.timeout(gap_h / hours_per_sim_s)
        if gen != manager.random_gen:
            return
        k = list(classes)[int(rng.choice(len(classes), p=weights / weights.sum()))]
        target = classes[k][int(rng.integers(len(classes[k])))]
        manager.inject({"kind": k, "target": target})
