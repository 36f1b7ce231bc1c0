"""What a fault acts on and how recovery undoes it: the dies, EMS servers and instances inside a
target, the requests they hold, a redundant expert taking over a dead die, an instance restart.
Requests go back through the engine's scheduler (`Engine.requeue`); nothing is dropped."""
from __future__ import annotations

import numpy as np

from twin.topology import parse
from twin.engine.ports import FaultHost


def dies_of(eng: FaultHost, target: str) -> np.ndarray:
    """Topology die indices inside a fault target (a die, an NPU or a node)."""
    index = {d: i for i, d in enumerate(eng.topo.die_ids)}
    p = parse(target)
    if p["kind"] == "die":
        return np.array([index[target]])
    if p["kind"] in ("npu", "node"):
        return np.array([i for d, i in index.items() if d.startswith(target + "/")])
    return np.zeros(0, dtype=np.int64)


def servers_of(eng: FaultHost, target: str) -> list[str]:
    """EMS servers inside a fault target (a CPU or a node)."""
    if eng.ems is None:
        return []
    kind = parse(target)["kind"]
    if kind == "cpu":
        return [target] if target in eng.ems_node else []
    if kind == "node":
        return [s for s in eng.ems_node if s.startswith(target + "/")]
    return []


def instances_with(eng: FaultHost, dies: np.ndarray) -> list:
    return [i for i in eng.instances if np.intersect1d(i.dies, dies).size]


def in_flight_on(eng: FaultHost, instances: list) -> np.ndarray:
    """Ids of the requests queued or running on these instances (sorted, unique)."""
    eng.catch_up()
    parts = [np.zeros(0, dtype=np.int64)]
    for inst in instances:
        if inst.kind == "decode":
            inst.flush_inbox()
        parts.append(np.fromiter(inst.queue, dtype=np.int64, count=len(inst.queue)))
        parts.append(inst.ids if inst.kind == "decode" else np.asarray(inst.running, dtype=np.int64))
    return np.unique(np.concatenate(parts))


def in_flight_on_nodes(eng: FaultHost, nodes) -> np.ndarray:
    nodes = set(int(n) for n in nodes)
    return in_flight_on(eng, [i for i in eng.instances if nodes & set(int(n) for n in i.nodes)])


def spare_redundant(eng: FaultHost, inst) -> int:
    """Redundant expert slots still free in a decode instance."""
    used = eng.dep.decode.dies_per_instance - len(inst.dies)
    return max(0, eng.dep.decode.redundant_experts - used) if inst.kind == "decode" else 0


def shrink_decode(eng: FaultHost, inst, dead: np.ndarray) -> tuple[int, int]:
    """A redundant expert takes over: drop the dead dies and requeue their sequences
    (attention is data parallel: request r lives on die r mod n of its instance)."""
    pos = np.flatnonzero(np.isin(inst.dies, dead))
    on_dead = np.isin(inst.ids % len(inst.dies), pos)
    ids = inst.evict(on_dead, queue=False)
    inst.dies = np.setdiff1d(inst.dies, dead)
    inst.npus = len(inst.dies) / eng.pm.dies_per_npu
    inst.cap = None
    for d in dead:
        eng.die_pool[d] = ""
    return eng.requeue(ids)


def restart(eng: FaultHost, inst) -> tuple[int, int]:
    """An instance restarts: everything it held goes back through the scheduler."""
    if inst.kind == "decode":
        ids = inst.evict(queue=eng.scenario.pipeline == "full")   # KV buffered there is lost
    else:
        ids = np.array(list(inst.queue) + list(inst.running), dtype=np.int64)
        inst.queue.clear()
        inst.queued_tokens = 0
        inst.running = []
    others = [p for p in eng.prefill if p.alive and p is not inst]
    if inst.kind == "prefill" and not others:
        inst.queue.extend(int(r) for r in ids)     # nowhere else to go: wait for the restart
        inst.queued_tokens = int(eng.req.input[ids].sum())
        eng.req.requeued[ids] += 1
        return len(ids), 0
    return eng.requeue(ids)
