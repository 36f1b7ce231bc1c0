"""The engine's hot-path shortcuts keep SimPy's order and the network's state exactly."""
import numpy as np
import simpy

from twin.engine import Engine
from twin.engine.clock import SIMPY_VERSIONS, Clock


def test_call_later_fires_where_a_timeout_would():
    """call_later() takes the place of env.timeout(d).callbacks.append(f): interleaved with
    timeouts and with equal times, callbacks run in scheduling order at the same times."""
    def order(use_call_later: bool) -> list:
        env, seen = Clock(), []
        for i, d in enumerate([0.1, 0.1, 0.3, 0.0, 0.3, 0.3, 0.1]):
            cb = (lambda i: lambda _: seen.append((env.now, i)))(i)
            if use_call_later and i % 2:
                env.call_later(d, cb)
            else:
                env.timeout(d).callbacks.append(cb)
        env.run()
        return seen

    assert order(True) == order(False)
    assert [i for _, i in order(True)] == [3, 0, 1, 6, 2, 4, 5]


def test_the_clock_adapter_matches_the_installed_simpy():
    """SimPy's private API is used only in twin.engine.clock, read against these releases: a new
    SimPy must be checked there first. `push` and `processed` behave as SimPy's own events do."""
    assert simpy.__version__ in SIMPY_VERSIONS
    env, seen = Clock(), []
    env.timeout(0.5).callbacks.append(lambda _: seen.append(("timeout", env.now)))
    env.push(0.5, lambda _: seen.append(("push", env.now)))
    ev = env.event()
    ev.callbacks.append(lambda e: seen.append(("succeeded", env.now, e.value)))
    env.succeed_after(ev, 0.25)
    assert env.processed == 0
    env.run()
    assert seen == [("succeeded", 0.25, None), ("timeout", 0.5), ("push", 0.5)]
    assert env.processed == 3


def test_kv_partition_check_follows_the_topology_version():
    """The cached partition check of a prefill -> decode pair is redone after any failure or
    repair (the topology's version moves), without waiting for network_changed()."""
    eng = Engine("default", seed=0)
    src, dst, kv = eng.prefill[0], eng.decode[0], eng.kv
    assert not kv._partitioned(src, dst)
    assert kv.plane == "rdma"
    cut = [eng.topo.fail(f"n{int(n):02d}/rdma{j}") for n in dst.nodes for j in range(8)]
    assert kv._partitioned(src, dst) == kv._route(src, dst).partitioned is True
    for target in cut:
        eng.topo.restore(target)
    assert not kv._partitioned(src, dst)


def test_one_enqueue_per_inbox_flush_queues_in_landing_order():
    """KV landed by now is queued in the order it landed, once, and what lands later waits."""
    eng = Engine("default", seed=0)
    d = eng.decode[0]
    ids = eng.req.add(np.zeros(4), np.full(4, 100), np.full(4, 10))
    now = eng.sim_time
    d.inbox[:] = [(now, ids[[2]]), (now, ids[[0, 3]]), (now + 1.0, ids[[1]])]
    d.flush_inbox()
    assert list(d.queue)[-3:] == [int(ids[2]), int(ids[0]), int(ids[3])]
    assert [int(i) for _, a in d.inbox for i in a] == [int(ids[1])]
    assert list(eng.req.instance[ids[[2, 0, 3]]]) == [d.idx] * 3
