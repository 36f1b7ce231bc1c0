"""Max-min sharing of KV-transfer links (twin.engine.flows), with exact rates and finish times."""
import pytest
import simpy

from twin.engine.flows import FlowNet


def _net(**caps):
    env = simpy.Environment()
    net = FlowNet(env)
    for link, c in caps.items():
        net.set_capacity(link, c)
    return env, net


def _rate(net, link):
    return sum(f.rate for f in net.flows.values() if link in f.links)


def _finished_at(env, ev, out, name):
    ev.callbacks.append(lambda _e: out.__setitem__(name, env.now))


def test_a_dead_link_stalls_only_its_flows_and_they_resume_when_it_returns():
    env, net = _net(a=100.0, b=100.0)
    done: dict = {}
    for name, nbytes, links in (("x1", 300, ("b",)), ("x2", 300, ("b",)), ("y", 1000, ("a",))):
        _finished_at(env, net.start(nbytes, links), done, name)
    env.run(until=1)
    assert (_rate(net, "a"), _rate(net, "b")) == (100.0, 100.0)   # y alone on a; x1, x2 share b
    net.set_capacity("a", 0.0)                                      # a dies at t = 1
    env.run(until=1.5)
    assert _rate(net, "a") == 0.0                                  # y waits
    assert [f.rate for f in net.flows.values() if f.links == ("b",)] == [50.0, 50.0]   # fair share kept
    env.run(until=2)
    net.set_capacity("a", 100.0)                                    # a returns at t = 2
    env.run(until=20)
    assert done["x1"] == pytest.approx(6.0) and done["x2"] == pytest.approx(6.0)   # 250 B at 50 B/s
    assert done["y"] == pytest.approx(11.0)                         # 900 B left at 100 B/s from t = 2


def test_a_flow_over_a_dead_and_a_live_link_frees_its_share_of_the_live_one():
    env, net = _net(a=90.0, b=90.0)
    net.start(1e6, ("a", "b"))
    net.start(1e6, ("b",))
    net.start(1e6, ("b",))
    env.run(until=1)
    assert sorted(f.rate for f in net.flows.values()) == pytest.approx([30.0, 30.0, 30.0])
    net.set_capacity("a", 0.0)
    rates = {f.links: f.rate for f in net.flows.values()}
    assert rates[("a", "b")] == 0.0 and rates[("b",)] == pytest.approx(45.0)
    assert _rate(net, "b") == pytest.approx(90.0)


def test_a_flow_over_an_unknown_or_no_link_is_refused_and_changes_nothing():
    env, net = _net(a=100.0)
    with pytest.raises(KeyError, match="flow link 'b': unknown \\(known: a\\)"):
        net.start(100, ("a", "b"))
    with pytest.raises(ValueError, match="flow links: none"):
        net.start(100, ())
    assert not net.flows
    ev = net.start(100, ("a",))
    env.run(until=ev)
    assert env.now == 1.0
