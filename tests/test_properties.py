"""Property tests (hypothesis, derandomized so CI is repeatable) of the flow solver's max-min
fairness and of the EMS cache."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.engine.ems.pool import EMS
from twin.engine.clock import Clock
from twin.engine.flows import FlowNet

LINKS = "abcde"
TOL = 1e-9


def prop(n: int):
    return settings(max_examples=n, derandomize=True, deadline=None, database=None)

links_st = st.dictionaries(st.sampled_from(LINKS), st.sampled_from([0.0, 1.0, 10.0, 37.5, 100.0, 1e3]),
                           min_size=1, max_size=5)


@st.composite
def networks(draw):
    caps = draw(links_st)
    names = sorted(caps)
    flows = draw(st.lists(st.tuples(st.floats(1.0, 1e4),
                                    st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)),
                          min_size=1, max_size=8))
    return caps, [(nbytes, tuple(links)) for nbytes, links in flows]


def _start(caps, flows):
    env = Clock()
    net = FlowNet(env)
    for link, c in caps.items():
        net.set_capacity(link, c)
    events = [net.start(nbytes, links) for nbytes, links in flows]
    return env, net, events


@prop(200)
@given(networks())
def test_rates_are_max_min_fair(case):
    """Feasible (no link over capacity), flows over a dead link wait at rate 0, and every other flow
    has a bottleneck: a saturated link of its path on which no flow gets more than it does."""
    caps, flows = case
    _, net, _ = _start(caps, flows)
    live = list(net.flows.values())
    for link, c in caps.items():
        assert sum(f.rate for f in live if link in f.links) <= c * (1 + TOL) + TOL
    for f in live:
        if any(caps[l] == 0 for l in f.links):
            assert f.rate == 0.0
            continue
        assert f.rate > 0
        bottlenecks = [l for l in f.links
                       if sum(g.rate for g in live if l in g.links) >= caps[l] * (1 - TOL)
                       and all(g.rate <= f.rate * (1 + TOL) for g in live if l in g.links)]
        assert bottlenecks, (f, caps)


@prop(100)
@given(networks())
def test_every_flow_finishes_no_faster_than_its_links_allow(case):
    """Every flow ends; none beats its slowest link, and no link carries more than its capacity
    times the time its last flow took."""
    caps, flows = case
    caps = {k: (v or 1.0) for k, v in caps.items()}          # no dead link: everything finishes
    env, net, events = _start(caps, flows)
    done = {}
    for i, ev in enumerate(events):
        ev.callbacks.append(lambda _e, i=i: done.__setitem__(i, env.now))
    env.run()
    assert len(done) == len(flows) and not net.flows
    for i, (nbytes, links) in enumerate(flows):
        assert done[i] >= nbytes / min(caps[l] for l in links) * (1 - TOL)
    for link, c in caps.items():
        on = [i for i, (_, links) in enumerate(flows) if link in links]
        if on:
            assert sum(flows[i][0] for i in on) <= c * max(done[i] for i in on) * (1 + TOL)


# ---- EMS ----------------------------------------------------------------------------------------
prompts_st = st.lists(st.lists(st.integers(0, 40), min_size=0, max_size=12), min_size=1, max_size=25)


@prop(150)
@given(prompts_st)
def test_unlimited_ems_hits_the_longest_stored_prefix(prompts):
    """With unlimited capacity the cache is a set: a lookup hits exactly the longest prefix of the
    prompt whose blocks were stored before, and the counters add up."""
    ems = EMS(["n00/cpu0", "n00/cpu1", "n01/cpu0"], None, None, 1000.0, block_tokens=4)
    stored: set = set()
    total = 0
    for blocks in prompts:
        want = 0
        while want < len(blocks) and blocks[want] in stored:
            want += 1
        r = ems.lookup(blocks)
        assert (r.prefix_blocks, r.hit_tokens) == (want, want * 4)
        new = ems.store(blocks).new_blocks
        assert new == len(set(blocks) - stored)
        stored |= set(blocks)
        total += len(blocks)
    s = ems.stats()
    assert s["hit_blocks"] + s["miss_blocks"] == total
    assert s["resident_blocks"] == s["stored_blocks"] == len(stored)


@prop(150)
@given(prompts_st, st.integers(1, 6), st.integers(0, 6))
def test_bounded_ems_keeps_every_tier_within_capacity_and_batches_equal_singles(prompts, dram, ssd):
    """Each server's DRAM and SSD tiers stay within capacity; a batch lookup_store gives what
    lookup then store per prompt gives, with the same per-server traffic."""
    servers = ["n00/cpu0", "n01/cpu0"]
    a = EMS(servers, dram * 1000.0, ssd * 1000.0, 1000.0, block_tokens=4)
    b = EMS(servers, dram * 1000.0, ssd * 1000.0, 1000.0, block_tokens=4)
    singles = []
    for blocks in prompts:
        singles.append(a.lookup(blocks, tokens=4 * len(blocks)).prefix_blocks)
        a.store(blocks)
        for srv in a.stats()["per_server"].values():
            assert srv["dram_bytes"] <= dram * 1000.0 and srv["ssd_bytes"] <= ssd * 1000.0
    flat = np.array([x for p in prompts for x in p], dtype=np.int64)
    ptr = list(np.cumsum([0] + [len(p) for p in prompts]))
    hit, new = [0, 0], [0, 0]
    r = b.lookup_store(flat, ptr, [4 * len(p) for p in prompts], hit, new)
    assert r.prefix_blocks == singles
    sa, sb = a.stats(), b.stats()
    for key in ("hit_blocks", "miss_blocks", "stored_blocks", "resident_blocks", "evicted_blocks"):
        assert sa[key] == sb[key], key
