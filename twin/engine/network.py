"""What the instances feel of the network and of their parts' health: after any topology change,
each instance's predictor gets the health of its planes (UB bandwidth left on its live nodes,
retransmission latency while a UB fault is not yet rerouted) and of its slowest member (the
slowest compute and HBM of its dies, the slowest EMS server a prefill load waits for, the slow
die's batch share a mitigation set), KV flows get new capacities, and cut-off instances are
marked blocked (their work waits until a path returns)."""
from __future__ import annotations

from twin.i18n import N_
from twin.predict.base import Health, NetState
from twin.engine.faults.kinds import KINDS
from twin.engine.ports import NetworkHost
from twin.engine.snapshot import TOPOLOGY_FIELDS, topology_fields


def reports(eng: NetworkHost) -> dict:
    """Snapshot fields: the live topology (system, capacities, failed and degraded parts) and
    whether the fabric is partitioned, with why."""
    return {TOPOLOGY_FIELDS: lambda: topology_fields(eng.topo),
            "partitioned": lambda: eng.partitioned, "message": lambda: eng.message}


def node_has_live_die(eng: NetworkHost, n: int) -> bool:
    ids = eng.topo.die_ids[n * eng.dies_per_node:(n + 1) * eng.dies_per_node]
    return any(eng.topo.alive(d) for d in ids)


def ems_cpu_health(eng: NetworkHost) -> float:
    """Speed of the slowest EMS server in service (1.0 without EMS): a prefill's cached blocks hash
    over every server, so its load waits for the slowest."""
    slow = eng.topo.slow_parts("cpu")
    if not slow or eng.ems is None:
        return 1.0
    return min((f for s, f in slow.items() if s in eng.ems_node and eng.ems.up(s)), default=1.0)


def instance_health(eng: NetworkHost, inst, cpu: float) -> Health:
    """The health of an instance's slowest member (`Health`)."""
    topo = eng.topo
    return Health(compute=float(topo.die_health("compute")[inst.dies].min()),
                  hbm=float(topo.die_health("hbm")[inst.dies].min()),
                  cpu=cpu if inst.kind == "prefill" else 1.0, load=inst.slow_load)


def network_changed(eng: NetworkHost) -> None:
    """Recompute every instance's network state and health from the topology and the open faults.
    A change of health alone keeps the decode batch cap: it is configuration, chosen for a healthy
    group, and nothing re-plans it while the slow part is not yet known."""
    topo, blocked = eng.topo, []
    cpu = ems_cpu_health(eng)
    for inst in eng.instances:
        alive_nodes = [int(n) for n in inst.nodes if node_has_live_die(eng, int(n))]
        fracs = []
        for n in alive_nodes:
            healthy = topo.node_uplink_gbps(n, healthy=True)
            fracs.append(topo.node_uplink_gbps(n) / healthy if healthy else 1.0)
        ub = min(fracs, default=1.0) if eng.system.kind == "supernode" else 1.0
        rto = any(f.active and not f.rerouted and KINDS[f.kind].ub
                  and set(f.nodes) & set(alive_nodes) for f in eng.faults.faults)
        net = NetState(ub=ub, extra_latency_us=eng.faults.policy.retransmit_us if rto else 0.0)
        health = instance_health(eng, inst, cpu)
        if net != inst.pm.net:
            inst.pm = eng.pm.with_net(net).with_health(health)
            inst.memo, inst.cap = {}, None
        elif health != inst.pm.health:
            inst.pm = eng.pm.with_net(net).with_health(health)
            inst.memo = {}
        inst.blocked = ub <= 0
        if inst.blocked and inst.alive:
            blocked.append(inst.name)
        inst.wake()
    eng.kv.network_changed()
    was = eng.partitioned
    eng.partitioned = bool(blocked)
    eng.message = (f"partitioned: {', '.join(blocked)} cut off from the UB fabric; "
                   f"their requests wait until a path returns" if blocked else "")
    if eng.partitioned != was and blocked:
        eng.log("partition", N_("partitioned: %(names)s cut off from the UB fabric; their requests wait until a "
                                "path returns"), names=", ".join(blocked))
    elif eng.partitioned != was:
        eng.log("recover", N_("UB paths restored"))
