"""Max-min sharing of KV-transfer links (twin.engine.flows), with exact rates and finish times."""
import random

import pytest

from twin.engine.clock import Clock
from twin.engine.flows import FlowNet


def _net(**caps):
    env = Clock()
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


class _CountedReads(dict):
    """A capacity table that counts its reads: a measure of the rate filling's work."""
    reads = 0

    def __getitem__(self, link):
        self.reads += 1
        return super().__getitem__(link)


def test_thousands_of_flows_released_at_once_cost_work_in_proportion_not_squared():
    """A cut KV path that returns releases every transfer that waited for it at one instant, all
    over the same two links (5,260 at once in `default` under full-rate random faults); each start
    and each end re-solves the rates. The filling works per group of flows over the same links, so
    its capacity reads grow with the flows (a filling flow by flow read ~2 W² here)."""
    env, net = _net(p=1e3, q=1e3, d=4e3)
    net.capacity = table = _CountedReads(net.capacity)
    w, ends = 2000, []
    net.start(1e6, ("q", "d"))          # another pair shares d: a second round of filling
    for j in range(w):                  # 1, 2, ..., w bytes from p to d
        net.start(1.0 + j, ("p", "d"), 0.0, ends.append)
    assert [f.rate for f in list(net.flows.values())[:2]] == [1e3, 0.5]
    env.run()
    assert table.reads < 20 * w          # 19,178 (flow by flow: 8,018,006)
    # p is shared by the flows left: flow j ends (w - j) / 1000 s after flow j - 1
    want = [sum(w - i for i in range(j + 1)) / 1e3 for j in range(w)]
    assert ends == pytest.approx(want, rel=1e-12)


def _rates_flow_by_flow(capacity: dict, flows: list[tuple]) -> list[float]:
    """Max-min rates by the per-flow progressive filling the grouped one replaced (reference)."""
    cap, rate = {}, [0.0] * len(flows)
    active = [i for i, links in enumerate(flows) if all([cap.setdefault(x, capacity[x]) > 0 for x in links])]
    while active:
        users: dict = {}
        for i in active:
            for x in flows[i]:
                users[x] = users.get(x, 0) + 1
        share, tight = min((max(cap[x], 0.0) / n, x) for x, n in users.items())
        for i in active:
            rate[i] += share
        for x, n in users.items():
            for _ in range(n):
                cap[x] -= share
        active = [i for i in active if tight not in flows[i]]
    return rate


def test_grouped_filling_gives_the_per_flow_rates_to_the_bit():
    rng = random.Random(7)
    links = "abcdef"
    for _ in range(40):                 # equal capacities make ties, which go to the first name
        caps = {x: rng.choice([0.0, 1e10, 2e10, rng.uniform(1e9, 5e10)]) for x in links}
        env, net = _net(**caps)
        kinds = [tuple(rng.sample(links, rng.randint(1, 3))) for _ in range(5)]
        flows = [rng.choice(kinds) for _ in range(rng.randint(2, 400))]
        for f in flows:
            net.start(1e9, f)
        assert [f.rate for f in net.flows.values()] == _rates_flow_by_flow(caps, flows)
