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


def test_the_clocks_now_is_a_plain_attribute_that_keeps_simpys_time():
    """Clock.step is SimPy's step setting `now` as a plain attribute (SimPy's is a property: a
    Python call per read): the same times seen in callbacks and processes, run(until) stopping at
    its time and resuming, an event's later callbacks kept across the stop, a failure raised."""
    def trace(env) -> list:
        seen = []

        def proc():
            for d in (0.2, 0.3, 0.0):
                yield env.timeout(d)
                seen.append(("proc", env.now))
        env.process(proc())
        stop = env.timeout(0.5)
        stop.callbacks.append(lambda _: seen.append(("at stop", env.now)))
        env.timeout(0.7).callbacks.append(lambda _: seen.append(("later", env.now)))
        env.run(until=0.45)
        seen.append(("until", env.now))
        env.run(until=stop)
        seen.append(("stopped", env.now))
        env.run()
        seen.append(("end", env.now))
        bad = env.event()
        bad.fail(ValueError("boom"))
        try:
            env.run()
        except ValueError as e:
            seen.append(("failed", str(e), env.now))
        return seen

    env = Clock()
    assert "now" in vars(env) and env.now == 0.0
    got = trace(env)
    assert got == trace(simpy.Environment())
    assert got == [("proc", 0.2), ("until", 0.45), ("at stop", 0.5), ("stopped", 0.5), ("proc", 0.5),
                   ("proc", 0.5), ("later", 0.7), ("end", 0.7), ("failed", "boom", 0.7)]


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


def test_the_decode_step_log_holds_numbers_the_cyclic_gc_does_not_track():
    """The gray faults' log of decode steps (t, seconds per token, tokens) is kept flat: a tuple per
    step is an object the cyclic GC counts, and while the log filled a collection ran every 700
    steps. The rows read back in order, as a float array of three columns."""
    import gc
    eng = Engine("default", seed=0, duration_s=5)
    gc.disable()            # (a collection would untrack tuples of numbers: the check would see none)
    try:
        eng.advance(5.0)
        steps = eng.faults.gray.steps
        assert steps and not any(gc.is_tracked(x) for x in steps)
    finally:
        gc.enable()
    arr = eng.faults.gray.step_array()
    assert arr.shape == (len(steps) // 3, 3) and len(arr) > 100 and arr.dtype == np.float64
    assert np.all(np.diff(arr[:, 0]) >= 0) and np.all(arr[:, 1] > 0) and np.all(arr[:, 2] >= 1)
