"""A region of supernodes: the router's policies, fail-over that loses nothing, the same result on
1 or 2 Dask workers, the window's effect against the single-process reference, and bad input."""
import json
import re

import numpy as np
import pytest

from tests.test_cli import cli, cli_json
from twin.model.config import CatalogError
from twin.engine import Engine
from twin.region import Region, parse_fault, region, run_region
from twin.region import member
from twin.region.routing import View, make
from twin.region.spec import _parse


# ---- the policies, on a hand-made view ----------------------------------------------------------------
def _view(load, capacity=(1.0, 1.0, 1.0)):
    v = View(np.array(capacity, dtype=float))
    v.edge(np.array(load, dtype=float))
    return v


def test_least_load_counts_capacity_and_what_it_sent():
    v = _view([10, 4, 4], capacity=(10, 1, 2))      # seconds of work: 1, 4, 2
    r = make("least-load")
    assert r.choose(v, [], 0) == 0
    v.sent[0] += 15                                 # 2.5 s: now supernode 2 (2 s) is least loaded
    assert r.choose(v, [], 0) == 2
    v.up[2] = False
    assert r.choose(v, [], 0) == 0
    assert make("least-load").choose(_view([3, 3, 3]), [], 0) == 0     # ties: the lowest index


def test_prefix_affinity_follows_the_longest_prefix_within_the_slack():
    v = _view([1.0, 1.0, 1.0])
    v.index.add(1, [7, 8])
    v.index.add(2, [7, 8, 9])
    r = make("prefix-affinity")
    assert r.choose(v, [7, 8, 9, 10], 0) == 2
    v.edge(np.array([1.0, 1.0, 1.26]))              # 26% over the least loaded: past the 25% slack
    assert r.choose(v, [7, 8, 9, 10], 0) == 1
    assert r.choose(v, [99], 0) == 0                # nobody holds it: least load


def test_session_affinity_sticks_until_its_home_is_down():
    v = _view([0.0, 0.0, 0.0])
    r = make("session-affinity")
    v.edge(np.array([2.0, 1.0, 3.0]))
    assert r.choose(v, [], 5) == 1
    v.edge(np.array([1.0, 1.1, 3.0]))               # within the slack: stays
    assert r.choose(v, [], 5) == 1
    v.up[1] = False
    assert r.choose(v, [], 5) == 0
    assert v.sessions[5] == 0


# ---- runs ----------------------------------------------------------------------------------------------
def _trio(**kw):
    kw.setdefault("distributed", False)
    return run_region(region("cm384-trio"), 6.0, drain_cap=600, **kw)


def test_a_lost_supernode_fails_over_and_nothing_is_lost():
    out = _trio(faults=(parse_fault("supernode:1@3", 3, 6.0),))
    a = out["regional"]["requests"]
    assert a["lost"] == 0 and a["conserved"] and a["in_flight"] == 0
    assert a["moved"]["out"] == a["moved"]["in"] > 100
    assert a["arrived"] == a["completed"] + a["rejected"] + a["timed_out"]
    s1 = out["supernodes"][1]
    assert s1["status"] == "failed" and s1["failed_at_s"] == 3.0
    assert s1["requests"]["in_flight"] == a["moved"]["out"]        # what it held, it handed back
    assert [s["status"] for s in out["supernodes"]] == ["up", "failed", "up"]


def test_the_audit_reports_requests_a_failed_supernode_keeps(monkeypatch):
    """Fail-over that forgets the lost supernode's requests is caught: they count as lost."""
    real = member.Group.fail

    def forgetful(self, i):
        taken = real(self, i)
        return {k: (v[:1] if k == "ptr" else v[:0]) for k, v in taken.items()}
    monkeypatch.setattr(member.Group, "fail", forgetful)
    out = _trio(faults=(parse_fault("supernode:1@3", 3, 6.0),))
    a = out["regional"]["requests"]
    assert a["lost"] == out["supernodes"][1]["requests"]["in_flight"] > 100
    assert not a["conserved"]


def test_a_link_fault_stops_fetches_over_it_only_while_down():
    base = _trio(policy="session-affinity", cache_reuse="fetch")
    f = base["regional"]["fetch"]
    assert f["requests"] > 50 and f["bytes"] > 0
    assert f["mean_delay_ms"] >= 0.02                                   # at least the link latency
    eng = Engine("default")                                             # the members' deployment
    assert f["bytes"] == round(f["blocks"] * eng.scenario.block_size * eng.kv_bytes)
    cut = _trio(policy="session-affinity", cache_reuse="fetch",
                faults=tuple(parse_fault(x, 3, 6.0) for x in ("link:0-1@0", "link:0-2@0", "link:1-2@0")))
    assert cut["regional"]["fetch"]["requests"] == 0
    brief = _trio(policy="session-affinity", cache_reuse="fetch",
                  faults=tuple(parse_fault(x, 3, 6.0) for x in ("link:0-1@0+3", "link:0-2@0+3", "link:1-2@0+3")))
    assert 0 < brief["regional"]["fetch"]["requests"] < f["requests"]
    # the report logs each link fault as the window edges applied it (down, and up again when it came back)
    assert [(x["link"], x["down_s"], x["up_s"], x["for_s"]) for x in brief["link_faults"]] == [
        ([0, 1], 0.0, 3.0, 3.0), ([0, 2], 0.0, 3.0, 3.0), ([1, 2], 0.0, 3.0, 3.0)]
    assert [x["up_s"] for x in cut["link_faults"]] == [None] * 3 and base["link_faults"] == []
    for o in (base, cut, brief):
        assert o["regional"]["requests"]["lost"] == 0


def _comparable(out):
    text = json.dumps({k: out[k] for k in ("regional", "supernodes")}, sort_keys=True)
    return re.sub(r'"worker_cpu_s": [0-9.e-]+', "", text)


def test_one_worker_and_two_give_the_same_region(dask_address):
    kw = dict(policy="session-affinity", cache_reuse="fetch", window_s=0.5, seed=3,
              faults=(parse_fault("supernode:0@2", 3, 4.0),))
    spec = region("cm384-trio")
    one = run_region(spec, 4.0, drain_cap=600, scheduler=dask_address, workers=1, **kw)
    two = run_region(spec, 4.0, drain_cap=600, scheduler=dask_address, workers=2, **kw)
    here = run_region(spec, 4.0, drain_cap=600, distributed=False, **kw)
    assert (one["workers"], two["workers"], two["groups"]) == (1, 2, 2)
    assert _comparable(one) == _comparable(two) == _comparable(here)
    assert one["regional"]["requests"]["lost"] == 0


def test_a_one_second_window_stays_near_the_single_process_reference():
    """The reference exchanges at every arrival tick (5 ms): the router always sees fresh loads.
    A 1 s window routes on loads up to 1 s old, counting what it sent since: same arrivals, the
    same completions after a drain, and the regional TTFT p50 within 10% (measured: docs)."""
    spec = region("cm384-trio")
    ref = run_region(spec, 10.0, drain_cap=600, distributed=False, window_s=0.005, seed=1)
    win = run_region(spec, 10.0, drain_cap=600, distributed=False, window_s=1.0, seed=1)
    r, w = ref["regional"], win["regional"]
    assert r["requests"]["arrived"] == w["requests"]["arrived"] == w["requests"]["completed"]
    assert abs(w["ttft_ms"]["p50"] / r["ttft_ms"]["p50"] - 1) < 0.10
    assert abs(w["tpot_ms"]["p50"] / r["tpot_ms"]["p50"] - 1) < 0.05
    routed_ref = np.array([s["routed"] for s in ref["supernodes"]])
    routed_win = np.array([s["routed"] for s in win["supernodes"]])
    assert np.abs(routed_win - routed_ref).max() <= 0.05 * routed_ref.max()


# ---- the command line and bad input ------------------------------------------------------------------
def test_cli_reports_per_supernode_and_regional_figures():
    out = cli_json("region", "cm384-pair", "--in-process", "--duration", "3", "--drain",
                   "--fail", "supernode:0@1", "--policy", "prefix-affinity")
    assert out["regional"]["requests"]["lost"] == 0
    assert [s["status"] for s in out["supernodes"]] == ["failed", "up"]
    assert set(out["regional"]) >= {"throughput_rps", "ttft_ms", "tpot_ms", "requests", "fetch"}
    assert out["supernodes"][1]["ttft_ms"]["p99"] is not None


@pytest.mark.parametrize("args, says", [
    (("region", "atlantis"), "region 'atlantis': unknown (allowed: cm384-pair, cm384-trio"),
    (("region",), "a region name is required (allowed: cm384-pair"),
    (("region", "cm384-pair", "--window", "0.012"), "--window = 0.012: allowed a multiple of the arrival tick"),
    (("region", "cm384-pair", "--fail", "supernode:2@1"), "supernode indices 0..1"),
    (("region", "cm384-pair", "--fail", "link:0-0@1"), "--fail 'link:0-0@1': allowed"),
    (("region", "cm384-pair", "--fail", "supernode:0@40"), "0 <= T < duration (30 s)"),
    (("region", "cm384-pair", "--fail", "supernode:0@1", "--fail", "supernode:1@2"), "every supernode would be lost"),
    (("region", "cm384-pair", "--workers", "3"), "--workers = 3: allowed 1..2"),
    (("region", "cm384-pair", "--in-process", "--workers", "2"), "--in-process runs every supernode"),
    (("region", "cm384-pair", "--policy", "random"), "invalid choice: 'random'"),
    (("region", "cm384-pair", "--scheduler", "http://x"), "allowed tcp://HOST:PORT"),
    (("region", "cm384-pair", "--weak-scaling", "2,1"), "allowed increasing supernode counts"),
])
def test_bad_input_says_what_is_allowed(args, says):
    code, _, err = cli(*args)
    assert code == 2 and says in err, err


@pytest.mark.parametrize("raw, says", [
    ({"members": []}, "members: required"),
    ({"members": [{"deployment": "nope"}], "link_gbps": 1, "link_latency_us": 1}, "nope"),
    ({"members": [{"deployment": "cloudmatrix-infer-paper", "count": 65}], "link_gbps": 1, "link_latency_us": 1},
     "count = 65: allowed an integer 1..64"),
    ({"members": [{"deployment": "cloudmatrix-infer-paper"}], "link_gbps": 0, "link_latency_us": 1},
     "link_gbps = 0: allowed a number in (0, 1e+06]"),
    ({"members": [{"deployment": "cloudmatrix-infer-paper"}], "link_gbps": 1, "link_latency_us": 1, "x": 1},
     "unknown key 'x'"),
    ({"members": [{"deployment": "cloudmatrix-infer-paper"}], "link_gbps": 1, "link_latency_us": 1,
      "scenario": "nope"}, "scenario = 'nope': unknown"),
    ({"members": [{"deployment": "cloudmatrix-infer-paper"}], "link_gbps": 1, "link_latency_us": 1,
      "scenario": "mooncake-replay"}, "scenario = 'mooncake-replay': replays a trace; allowed a synthetic"),
])
def test_bad_region_entries_are_refused(raw, says):
    with pytest.raises(CatalogError, match=re.escape(says)):
        _parse("bad", raw)


def test_catalog_regions_load_and_name_their_systems():
    spec = region("cm384-mixed")
    assert spec.size == 3 and spec.systems() == ("cloudmatrix384",) * 3
    assert spec.resized(4).deployments == ("cloudmatrix-infer-384",) * 4
    with pytest.raises(ValueError, match="cache reuse 'maybe': allowed off, fetch"):
        Region(spec, 1.0, cache_reuse="maybe", distributed=False)


def test_a_fetch_takes_the_missing_blocks_at_link_speed_one_at_a_time():
    reg = Region(region("cm384-pair"), 2.0, distributed=False)
    bb = reg.info[0]["block_bytes"]
    reg.view.index.add(0, [1, 2, 3])
    reg.view.index.add(1, [1])
    store = []
    first = reg._fetch(1, 0.5, [1, 2, 3, 4], store)
    assert store == [2, 3]                                     # supernode 1 had block 1 already
    assert first == pytest.approx(0.5 + 2 * bb * 8 / 400e9 + 20e-6, abs=1e-12)
    second = reg._fetch(1, 0.5, [1, 2, 3, 4], [])           # queued behind the first on link 0 -> 1
    assert second == pytest.approx(first + 2 * bb * 8 / 400e9, abs=1e-12)
    assert reg._fetch(0, 0.5, [1, 2, 3], []) == 0.5            # it holds them all: no fetch
    reg.link_up[0, 1] = False
    assert reg._fetch(1, 0.7, [1, 2, 3, 4], []) == 0.7        # the link is down: recompute instead
    assert reg.fetch["requests"] == 2 and reg.fetch["blocks"] == 4


def test_least_load_assigns_a_window_at_once_as_it_would_one_by_one(monkeypatch):
    rng = np.random.default_rng(0)
    r = make("least-load")
    for _ in range(200):
        k = int(rng.integers(1, 9))
        v = View(rng.choice([1.0, 2.5, 111.38], k))
        v.edge(rng.integers(0, 50, k).astype(float))
        v.sent = rng.integers(0, 5, k).astype(float)
        v.up = rng.random(k) > 0.2
        v.up[0] |= not v.up.any()
        n = int(rng.integers(0, 300))
        at_once = r.assign(v, n).tolist()
        one_by_one = []
        for _ in range(n):
            one_by_one.append(r.choose(v, [], 0))
            v.sent[one_by_one[-1]] += 1
        assert at_once == one_by_one
    kw = dict(window_s=0.5, faults=(parse_fault("supernode:2@1", 3, 6.0),))
    fast = _trio(**kw)
    monkeypatch.setattr(type(r), "assign", None)       # the router's one-by-one path
    slow = _trio(**kw)
    assert _comparable(fast) == _comparable(slow)
