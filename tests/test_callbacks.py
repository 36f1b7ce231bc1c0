"""Dashboard logic without a browser: the session runner, and page callbacks called as functions.

Everything runs against the real engine (twin.engine); twins are paused where a test needs a fixed
snapshot version.
"""
from __future__ import annotations

import json
import threading
import time
from contextvars import copy_context

import pytest
from dash import no_update
from dash._callback_context import context_value
from dash._utils import AttributeDict

from twin.ui import runcontrols
from twin.live import session
from twin.engine.commands import InjectFault
from twin.engine.faults import rows as faultrows
from twin.ui import figures
from twin.ui.polling import beat


def wait_until(pred, timeout: float = 15.0, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


SET_PROPS: dict = {}       # what the last `triggered` callback set with dash.set_props


def triggered(fn, prop_id: str, *args, value=1):
    """Call a callback as Dash would after `prop_id` changed (sets ctx.triggered)."""
    def run():
        SET_PROPS.clear()
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": prop_id, "value": value}],
                                        updated_props=SET_PROPS))
        return fn(*args)
    return copy_context().run(run)


def answered(out: tuple, store: str, choice: str = "shared") -> tuple:
    """A sending callback's (message, class), or, if it left the engine's answer pending, the answer
    its page shows on a later poll (twin.ui.answer.follow)."""
    from twin.ui import answer
    data = (SET_PROPS.get(store) or {}).get("data")
    if data is None:
        return out
    ticket = session.sessions().get(choice).ticket(data["id"])
    assert ticket.wait(15), "the engine did not answer"
    return answer.answered(data, choice)[:2]


def nothing(output) -> bool:
    """True if a callback output (or every entry of a list output) is no_update."""
    return all(x is no_update for x in output) if isinstance(output, list) else output is no_update


def pm_id(type_: str, index: str, prop: str = "n_clicks") -> str:
    return json.dumps({"index": index, "type": type_}, separators=(",", ":")) + "." + prop


def size(obj) -> int:
    from plotly.utils import PlotlyJSONEncoder
    return len(json.dumps(obj, cls=PlotlyJSONEncoder, default=lambda o: getattr(o, "to_plotly_json", str)()))


@pytest.fixture
def pages(dash_app):
    """The page modules as Dash registered them (importing them again would re-register pages)."""
    import importlib
    from types import SimpleNamespace
    names = ("overview", "topology", "traffic", "cache", "tradeoffs", "validation")
    return SimpleNamespace(**{n: importlib.import_module(f"pages.{n}") for n in names})


# ---- input parsing ------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [(1, 1.0), ("20", 20.0), (1000, 1000.0), ("max", "max"), ("MAX", "max")])
def test_speed_accepts_the_documented_range(value, expected):
    assert session.parse_speed(value) == expected


@pytest.mark.parametrize("value", [0, 0.5, 1001, "fast", None, float("nan"), float("inf")])
def test_speed_outside_range_names_the_allowed_range(value):
    with pytest.raises(session.ControlError, match="allowed 1 to 1000"):
        session.parse_speed(value)


@pytest.mark.parametrize("value", [0, -1, 5.01, "x", float("nan"), True])
def test_load_outside_range_is_refused(value):
    with pytest.raises(session.ControlError, match=r"allowed 0 < load <= 5 \(fraction of capacity"):
        session.parse_load(value)


def test_load_has_one_bound_the_scenario_models():
    from twin.engine.scenario import Scenario
    from twin.model.settings import LOAD_MAX
    bound = next(m.le for m in Scenario.model_fields["load"].metadata if hasattr(m, "le"))
    assert LOAD_MAX == bound == 5
    assert session.parse_load(LOAD_MAX) == LOAD_MAX


@pytest.mark.parametrize("value", [-1, 1.5, 2**31, "seven"])
def test_seed_must_be_a_whole_number_in_range(value):
    with pytest.raises(session.ControlError, match="whole number 0 to"):
        session.parse_seed(value)


# ---- the runner -----------------------------------------------------------------------------------

def test_shared_twin_starts_lazily_once_and_advances(twin_registry):
    assert twin_registry._shared is None            # nothing at construction (gunicorn safety)
    got = []
    threads = [threading.Thread(target=lambda: got.append(twin_registry.shared())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(t) for t in got}) == 1            # idempotent under concurrent first use
    tw = got[0]
    v0 = tw.snapshot.version
    assert wait_until(lambda: tw.snapshot.version > v0 + 2)
    assert tw.snapshot.sim_time > 0


def test_pause_freezes_the_snapshot_and_play_resumes(twin_registry):
    tw = twin_registry.shared()
    tw.control("pause")
    time.sleep(0.2)
    v = tw.snapshot.version
    time.sleep(0.3)
    assert tw.snapshot.version == v and tw.status()["paused"]
    tw.control("play")
    assert wait_until(lambda: tw.snapshot.version > v)


@pytest.mark.timing
def test_speed_sets_sim_seconds_per_wall_second(twin_registry):
    tw = twin_registry.shared()
    tw.control("speed", 20)
    t0, w0 = tw.snapshot.sim_time, time.monotonic()
    assert wait_until(lambda: tw.snapshot.sim_time - t0 >= 10, timeout=10)
    achieved = (tw.snapshot.sim_time - t0) / (time.monotonic() - w0)
    assert 8 < achieved < 30
    assert tw.status()["speed"] == 20.0


def test_engine_thread_survives_failing_steps_and_bad_commands(twin_registry):
    tw = twin_registry.shared()
    eng = tw._engine
    real = eng.advance
    calls = {"n": 0}

    def flaky(dt):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("injected failure")
        return real(dt)

    eng.advance = flaky
    with pytest.raises(session.ControlError, match="fault kind = .fail.: allowed npu_die"):          # checked before it is queued ...
        tw.control("fault", {"target": "n99", "kind": "fail"})
    refused = tw._engine.submit(InjectFault({"target": "n99", "kind": "fail"}))   # ... the engine refuses it too
    v = tw.snapshot.version
    assert wait_until(lambda: tw.snapshot.version > v + 2)
    assert tw.alive
    assert any("injected failure" in a["what"] for a in tw.actions(50))
    assert tw.status()["errors"] == 2
    assert refused.refused and refused.reason.startswith("fault kind = 'fail': allowed npu_die")


def test_repeated_failures_pause_the_twin_with_a_message(twin_registry):
    tw = twin_registry.shared()
    tw._engine.advance = lambda dt: (_ for _ in ()).throw(RuntimeError("broken"))
    assert wait_until(lambda: tw.paused)
    assert "broken" in tw.status()["message"] and tw.alive


def test_bad_reset_leaves_the_running_twin_untouched(twin_registry):
    tw = twin_registry.shared()
    run, scen = tw.run, tw.params.scenario
    for spec, match in ((dict(scenario="no-such-scenario"), "unknown"),
                        (dict(trace="/nonexistent/trace.jsonl"), "trace"),
                        (dict(deployment="deepseek-h800"), "deepseek-h800"),
                        (dict(seed=-3), "seed")):
        with pytest.raises(session.ControlError, match=match):
            tw.control("reset", spec)
    time.sleep(0.2)
    assert tw.run == run and tw.params.scenario == scen and not tw.paused


def test_reset_swaps_in_a_new_engine(twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "bursty-chat", "seed": 7})
    assert wait_until(lambda: tw.run == 1)
    assert tw.snapshot.scenario == "bursty-chat" and tw.snapshot.seed == 7
    assert tw.status()["workload"] == "synthetic"
    tw.control("load", 1.2)
    assert tw.params.load == 1.2


def test_load_on_a_trace_scenario_says_why_it_cannot(twin_registry):
    tw = twin_registry.shared()
    run = tw.run
    tw.control("reset", {"scenario": "mooncake-live"})
    assert wait_until(lambda: tw.run == run + 1)
    assert tw.status()["workload"] == "trace"
    with pytest.raises(session.ControlError, match="trace replays its own arrival"):
        tw.control("load", 0.9)


def test_sandboxes_are_bounded_private_and_reaped(dash_app):
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, ttl_s=1.5, token=None)
    try:
        a, b = reg.open_sandbox(), reg.open_sandbox()
        assert a.key != b.key and not a.shared
        with pytest.raises(session.SandboxLimit, match="all 2 private sandboxes"):
            reg.open_sandbox()
        a.control("pause")
        assert reg.shared().actions() and not any("pause" in x["what"] for x in reg.shared().actions())
        b.touch()
        assert wait_until(lambda: not a.alive, timeout=8)      # idle past the TTL: stopped
        reg.reap()
        assert a.key not in reg.sandboxes() and reg.get(a.key) is None
    finally:
        reg.shutdown()


def test_instructor_token_locks_shared_controls_and_actions_are_logged(dash_app):
    reg = session.configure(wall_dt=0.05, token="s3cret")
    try:
        tw = reg.shared()
        assert tw.status()["locked"]
        with pytest.raises(session.ControlError, match="locked by the instructor"):
            tw.control("pause", who="viewer v1")
        with pytest.raises(session.ControlError, match="locked"):
            tw.control("pause", who="viewer v1", credential="s3cret")      # the token is not a credential
        tw.control("pause", who="instructor (viewer v2)", credential=reg.unlock("s3cret", "c2", "10.0.0.2"))
        top = tw.actions(1)[0]
        assert top["who"] == "instructor (viewer v2)" and top["what"] == "pause" and top["when"]
        sb = reg.open_sandbox()                           # sandboxes are never locked
        assert sb.control("speed", 5) == "speed 5x"
    finally:
        reg.shutdown()


# ---- page callbacks -----------------------------------------------------------------------------

def _components(component) -> list:
    """Every component in a layout tree, in document order."""
    out = []
    stack = [component]
    while stack:
        c = stack.pop()
        if isinstance(c, (list, tuple)):
            stack.extend(reversed(c))
            continue
        if not hasattr(c, "to_plotly_json"):
            continue
        out.append(c)
        stack.append(getattr(c, "children", None))
    return out


def _ids(component) -> list:
    """Every component id in a layout tree."""
    return [json.dumps(c.id, sort_keys=True) if isinstance(c.id, dict) else c.id
            for c in _components(component) if getattr(c, "id", None) is not None]


def test_every_layout_builds_with_unique_ids(dash_app, pages, twin_registry):
    shell = _ids(dash_app.serve_layout())
    import importlib
    failures = importlib.import_module("pages.failures")
    for mod in (pages.overview, pages.topology, pages.traffic, pages.cache, pages.tradeoffs, pages.validation,
                failures):
        ids = shell + _ids(mod.layout())
        dupes = {i for i in ids if ids.count(i) > 1}
        assert not dupes, f"{mod.__name__}: duplicate ids {dupes}"
        assert len(ids) > len(shell) + 3                          # the page's own parts are there
    view = lambda layout: next(c.data for c in _components(layout) if getattr(c, "id", None) == "topo-view")
    assert view(pages.topology.layout(view="n07")) == "n07"        # the first tick draws it (or falls back)
    assert view(pages.topology.layout(view="<bogus>")) == "supernode"


def test_overview_tick_full_then_nothing_then_only_new_points(pages, twin_registry):
    ov = pages.overview
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 3)
    tw.control("pause")
    time.sleep(0.15)
    out = ov.tick(1, "shared", None)
    figs, exts, cursor = out["figs"], out["exts"], out["cursor"]
    assert len(figs) == len(ov.CHARTS) and all(isinstance(f, dict) and f["data"] for f in figs)  # whole figures
    assert all(e is no_update for e in exts)
    assert cursor["twin"] == "shared" and cursor["v"] == tw.snapshot.version
    assert "cloudmatrix384: supernode of 48 nodes" in out["scenario"]      # the system the twin runs
    assert size(out) < 100_000

    again = ov.tick(2, "shared", cursor)
    assert all(nothing(x) for x in again.values())                      # same version: nothing at all

    tw.control("speed", 20)
    tw.control("play")
    assert wait_until(lambda: tw.snapshot.history["t"][-1] > cursor["t"] + 2)
    upd = ov.tick(3, "shared", cursor)
    assert all(f is no_update for f in upd["figs"])                     # no figure re-sent
    ext = upd["exts"][0]
    assert ext is not no_update and ext[0]["x"][0][0] > cursor["t"]     # only the new points
    assert ext[2] > 0                                                   # maxPoints: a rolling window
    assert size(upd) < 100_000


def test_overview_and_shell_follow_the_viewers_twin(pages, twin_registry, dash_app):
    sb = twin_registry.open_sandbox()
    out = pages.overview.tick(1, sb.key, None)
    assert out["cursor"]["twin"] == sb.key
    status, beat, _ = triggered(dash_app.on_tick, "shell-tick.n_intervals", 1, sb.key, None, None, None)
    assert status["shared"] is False and beat["twin"] == sb.key
    assert triggered(dash_app.on_tick, "shell-tick.n_intervals", 2, sb.key, None, None, beat)[:2] == \
        (no_update, no_update)                                          # nothing new: nothing sent
    gone = pages.overview.tick(1, "sb-deadbeef", None)                  # stopped sandbox: shared + note
    status, beat, _ = triggered(dash_app.on_tick, "shell-tick.n_intervals", 1, "sb-deadbeef", None, None, None)
    assert gone["cursor"]["twin"] == "shared" and "sandbox" in status["note"] and beat["twin"] == "shared"


def test_topology_drill_down_and_back(pages, twin_registry):
    topo = pages.topology
    twin_registry.shared()
    nav = topo.navigate
    out = triggered(nav, "topo-cy.tapNodeData", {"id": "n07", "kind": "node"}, None, "supernode", 0,
                    "supernode", "shared")
    view, elements, layout, select, crumbs = (out[k] for k in ("view", "elements", "layout", "select", "crumbs"))
    assert view == "n07" and select == "n07" and crumbs == "Supernode › node n07"
    ids = {e["data"]["id"] for e in elements}
    assert {"n07/npu3/d1", "n07/cpu2", "n07/l1-4", "sp4"} <= ids
    assert sum(1 for e in elements if e["data"].get("kind") == "die") == 16
    assert layout["name"] == "preset"

    out = triggered(nav, "topo-cy.tapNodeData", {"id": "sp4", "kind": "subplane"}, None, "supernode", 0,
                    "supernode", "shared")
    assert out["view"] == "sp4" and out["live"]["view"] == "sp4"      # drawn with its live numbers
    assert "UB sub-plane" in json.dumps(out["stats"], default=lambda o: o.to_plotly_json())   # stats of sp4
    assert sum(1 for e in out["elements"] if e["data"].get("kind") == "l2") == 16
    assert sum(1 for e in out["elements"] if "source" in e["data"]) == 48 * 16   # every L1-L2 optical link

    back = triggered(nav, "topo-back.n_clicks", None, None, "supernode", 1, "sp4", "shared")
    assert back["view"] == "supernode"
    sel = triggered(nav, "topo-cy.tapNodeData", {"id": "n07/npu3/d1", "kind": "die"}, None, "n07", 0,
                    "n07", "shared")
    assert sel["view"] is no_update and sel["sel"] == {"kind": "node", "id": "n07/npu3/d1", "view": "n07"}
    assert "NPU die" in json.dumps(sel["stats"], default=lambda o: o.to_plotly_json())


def test_topology_tick_sends_compact_utilisation(pages, twin_registry):
    from twin.topology import static
    from twin.ui import topoview
    tw = twin_registry.shared()
    tw.control("speed", 20)
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 3)
    out = pages.topology.tick(1, "shared", None, view_name="supernode", sel={"kind": "node", "id": "n03"})
    live, stats, cursor = out["live"], out["stats"], out["cursor"]
    v = topoview.view(static("cloudmatrix384"), "supernode")
    assert live["view"] == "supernode" and len(live["u"]) == v.n_edges and len(live["n"]) == len(v.node_ids)
    assert any(u > 0 for u in live["u"])                                # traffic is flowing somewhere
    assert stats is not no_update and cursor["view"] == "supernode" and cursor["system"] == "cloudmatrix384"
    assert out["canvas"].elements == v.elements and "48 nodes" in out["caption"]   # first tick draws it
    assert size(live) < 20_000
    again = pages.topology.tick(2, "shared", cursor, view_name="supernode", sel=None)
    assert again["canvas"] is no_update and again["elements"] is no_update   # same system: not redrawn


def test_traffic_and_cache_ticks(pages, twin_registry):
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 2)
    tr = pages.traffic.tick(1, "shared", None)
    heat = tr["matrix"]
    assert heat["data"][0]["type"] == "heatmap" and len(heat["data"][0]["z"]) == 48
    assert tr["now"].startswith("UB ") and " RDMA " in tr["now"] and "UB" in tr["matrix_title"]
    assert size(tr) < 150_000
    tr2 = pages.traffic.tick(2, "shared", dict(tr["cursor"], v=-1))       # a later tick: the matrix whole
    later = tr2["matrix"]                   # (a Patch fails in a browser that has not drawn the figure yet)
    assert isinstance(later, dict) and len(later["data"][0]["z"]) == 48 and later["data"][0]["x"] == heat["data"][0]["x"]
    assert later["layout"]["yaxis"]["autorange"] == "reversed" and size(tr2) < 150_000
    ca = pages.cache.tick(1, "shared", None)
    assert ca["kpis"][0] != "–" and size(ca) < 100_000


def test_tradeoffs_slo_answer_and_bad_values(pages, twin_registry):
    to = pages.tradeoffs
    fig, answer = to.on_slo(50, 4096, "cloudmatrix-infer-paper")
    text = json.dumps(answer, default=lambda o: o.to_plotly_json())
    assert '"96"' in text and "1,932" in text                         # 96 per NPU (ref 4's batch), ~1,932 tok/s (model)
    names = [t["name"] for t in fig["data"]]
    assert "paper (ref 4)" in names and fig["data"][2]["x"] == [49.4, 14.9]
    bad = to.on_slo(500, 4096, "cloudmatrix-infer-paper")
    assert bad[0] is no_update and "allowed 5 to 150" in json.dumps(bad[1], default=lambda o: o.to_plotly_json())
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 2)
    assert to.on_slo(50, 4096, None) == (no_update, no_update)         # not drawn yet: the tick draws
    first = to.tick(1, "shared", None, dep=None, slo=50, kv=4096)
    assert first["dep"] == "cloudmatrix-infer-paper" and first["fig"]["data"]   # the twin's deployment
    live = to.tick(1, "shared", {"twin": "shared", "run": 0, "v": -1, "t": 0.0, "rev": -1},
                   dep="cloudmatrix-infer-paper", slo=50, kv=4096)
    ops = live["fig"].to_plotly_json()["operations"]
    assert {tuple(o["location"][:2]) for o in ops} == {("data", 4), ("data", 5)}   # live point patched


def test_validation_page_has_a_badge_per_row(pages):
    from twin.predict.validate import rows
    layout = pages.validation.layout()
    n = len(rows())
    badges = [c for c in _components(layout) if "badge" in (getattr(c, "className", "") or "")
              and getattr(c, "children", None) in ("PASS", "FAIL")]
    assert len(badges) == n                                              # one badge per row, no more
    assert [b.children for b in badges] == ["PASS" if r["pass"] else "FAIL" for r in
                                           [r for r in rows() if r["kind"] == "validation"]
                                           + [r for r in rows() if r["kind"] == "calibration"]]


def test_run_controls_callback(dash_app, twin_registry):
    on = runcontrols.on_control
    tw = twin_registry.shared()
    base = dict(choice="shared", token=None, viewer="vtest", scenario="default", deployment="",
                trace=None, seed=0)

    def call(prop_id, speed_custom=None, load_custom=None, **over):
        a = {**base, **over}
        return triggered(on, prop_id, 0, [0] * 6, speed_custom, [0] * 7, load_custom, 0,
                         a["choice"], a["token"], a["viewer"], a["scenario"], a["deployment"],
                         a["trace"], a["seed"], None)

    def status():       # what the shell's clock draws right after a control (its message changed)
        return triggered(dash_app.on_tick, "ctl-msg.children", 1, "shared", "msg", None, beat(tw))[0]

    msg, cls = call("ctl-play.n_clicks")
    assert "pause" in msg and "msg-ok" in cls and status()["paused"]
    msg, cls = call("ctl-play.n_clicks")
    assert "play" in msg and not status()["paused"]
    msg, cls = call(pm_id("ctl-speed-btn", "100"))
    assert status()["speed"] == 100.0
    msg, cls = call("ctl-speed-custom.value", speed_custom=5000)
    assert "msg-error" in cls and "allowed 1 to 1000" in msg
    msg, cls = call(pm_id("ctl-load-btn", "90"))
    assert "msg-ok" in cls and tw.params.load == 0.9                   # the default is synthetic: load applies
    msg, cls = call("ctl-reset.n_clicks", trace="/no/such/file.jsonl")
    assert "msg-error" in cls and "Not applied" in msg and tw.run == 0
    msg, cls = call("ctl-reset.n_clicks", seed=None)
    assert "msg-error" in cls and "seed" in msg
    actions = [a["what"] for a in tw.actions(10)]
    assert "speed 100x" in actions and tw.actions(1)[0]["who"] == "viewer vtest"


def test_twin_choice_and_unlock_callbacks(dash_app, twin_registry):
    key, msg, cls = triggered(runcontrols.on_twin_choice, "ctl-sandbox.n_clicks", 1, 0, "shared", None)
    assert key.startswith("sb-") and "msg-ok" in cls
    again = triggered(runcontrols.on_twin_choice, "ctl-sandbox.n_clicks", 2, 0, key, None)
    assert again[0] is no_update                                          # one sandbox per viewer
    back = triggered(runcontrols.on_twin_choice, "ctl-shared.n_clicks", 2, 1, key, None)
    assert back[0] == "shared" and key not in twin_registry.sandboxes()
    tok, msg, _ = triggered(runcontrols.on_unlock, "ctl-unlock.n_clicks", 1, None, "anything", None)
    assert tok is no_update and "not locked" in msg


# ---- failures page ------------------------------------------------------------------------------

@pytest.fixture
def failures(dash_app):
    import importlib
    return importlib.import_module("pages.failures")


def fault_click(fl, prop_id, kind, target, at=None, dur=None, factor=None, period=None, choice="shared",
                token=None, viewer="vtest"):
    inject = 1 if prop_id.startswith("fl-inject") else 0
    return answered(triggered(fl.on_fault, prop_id, inject, 1 - inject, kind, target, at, dur, factor, period,
                              choice, token, viewer, None), "fl-ticket", choice)


def test_fault_targets_are_validated_with_the_engine_rules_without_touching_the_twin(twin_registry):
    tw = twin_registry.shared()
    assert session.fault_command({"kind": "optical_link", "target": "sp3/l2-7--n20/l1-3"}, None).spec == \
        {"kind": "optical_link", "target": "n20/l1-3--sp3/l2-7"}                  # canonical link id
    bad = ((dict(kind="l2", target="n20"), "is a node; fault kind l2 breaks an L2 UB switch"),
           (dict(kind="npu_die", target="n99/npu0/d0"), "node index 99 out of range 0..47"),
           (dict(kind="npu_die", target="n20/npu3/d7"), "die index 7 out of range"),
           (dict(kind="meteor", target="n20"), "fault kind = .meteor.: allowed npu_die"),
           (dict(kind="l2", target="sp2/l2-5", duration_s=0), "0 < duration_s"),
           (dict(kind="optical_degrade", target="n20/l1-3--sp3/l2-7", factor=1.5), "0 <= factor < 1"))
    for spec, match in bad:
        with pytest.raises(session.ControlError, match=match):
            session.fault_command(spec, None)
    time.sleep(0.2)
    assert tw.snapshot.faults == () and not any(e["kind"] == "error" for e in tw.snapshot.events)


def test_failures_picker_kinds_targets_and_suggestions():
    from twin.topology import static
    from twin.ui import faultview as faultview
    sys_ = static("cloudmatrix384")
    assert faultview.pick(sys_, "n07/npu3/d1") == ("npu_die", "n07/npu3/d1")
    assert faultview.pick(sys_, "n07/npu3/d1", "npu") == ("npu", "n07/npu3")          # the die's NPU
    assert faultview.pick(sys_, "sp4/l2-11--n07/l1-4", "optical_flap") == ("optical_flap", "n07/l1-4--sp4/l2-11")
    assert faultview.pick(sys_, "sp4") == ("subplane", "sp4") and faultview.pick(sys_, "rdma/spine-0")[0] == "rdma_plane"
    assert faultview.pick(sys_, "vpc/switch") is None and faultview.pick(sys_, "r00") is None
    assert faultview.related(sys_, "node", "n07/npu3/d1") == "n07"
    assert faultview.related(sys_, "rdma_nic", "n07/npu3/d1") == "n07/rdma3"
    assert faultview.related(sys_, "subplane", "sp2/l2-5") == "sp2"
    assert faultview.related(sys_, "l2", "n07") == "sp2/l2-5"                         # the kind's example
    assert len(faultview.ids_for(sys_, "optical_link")) == 48 * 7 * 16 and len(faultview.ids_for(sys_, "npu")) == 384
    assert faultview.suggest(sys_, "optical_link", "n20/l1-3") == \
        [f"n20/l1-3--sp3/l2-{j}" for j in range(16)]
    assert len(faultview.suggest(sys_, "npu_die", "")) == faultview.SUGGESTIONS
    assert faultview.parse_at("+30", 100.0) == 130.0 and faultview.parse_at("250", 100.0) == 250.0
    with pytest.raises(ValueError, match="now t = 100.0 s"):
        faultview.parse_at("", 100.0)


def test_failures_hint_follows_a_switch_of_system(failures, twin_registry):
    """Issue 36 (10): after an H800 run the console still said "144 GPUs" on CloudMatrix: the part
    and its hint were picked on the first draw only. A tick that finds another system than the one
    it drew re-picks them for the system now on screen."""
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 1)
    state = dict(view_name="supernode", url=None, report_id=None, whatif=None)
    cursor = failures.tick(1, "shared", None, **state)["cursor"]
    after_h800 = dict(cursor, system="gpu-cluster-h800", drawn=True)     # the page last drew the H800 cluster
    out = failures.tick(2, "shared", after_h800, **state)
    assert out["hint"] == "112 L2 UB switches (e.g. sp2/l2-5); type to filter, or click a part on the drawing"
    assert (out["kind"], out["target"]) == ("l2", "sp2/l2-5")
    assert failures.tick(3, "shared", out["cursor"], **state)["hint"] is no_update     # same system: left alone


def test_failures_click_hints_are_translated(failures, twin_registry, dash_app):
    """A click on a part the console cannot break says why in the viewer's language."""
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        rack = triggered(failures.on_pick, "fl-cy.tapNodeData", "npu_die", {"id": "vpc/switch"}, None, "", "shared")
        bundle = triggered(failures.on_pick, "fl-cy.tapEdgeData", "npu_die", None,
                           {"id": "sp2==n07", "links": 7}, "", "shared")
    assert rack["hint"] == "不是故障目标——'vpc/switch' 无法在这里注入故障：请选择节点、裸片、CPU、交换机、网卡或光链路。"
    assert bundle["hint"] == "不是故障目标——一束 7 条链路：打开一个子平面以选择其中一条光链路。"


def test_failures_inject_now_sends_a_logged_command(failures, twin_registry):
    tw = twin_registry.shared()
    msg, cls = fault_click(failures, "fl-inject.n_clicks", "l2", " sp2/l2-5 ", dur="90")
    assert "msg-ok" in cls and "injected now for 90 s" in msg and "shared twin" in msg
    assert tw.actions(1)[0] == {**tw.actions(1)[0], "who": "viewer vtest", "what": "fault l2 sp2/l2-5 for 90 s"}
    assert wait_until(lambda: any(f["target"] == "sp2/l2-5" for f in tw.snapshot.faults))
    f = tw.snapshot.faults[0]
    assert f["kind"] == "l2" and f["lost"] == 0 and "sp2/l2-5" in tw.snapshot.failed


def test_failures_bad_target_shows_the_message_and_keeps_the_twin(failures, twin_registry):
    tw = twin_registry.shared()
    n_actions = len(tw.actions(50))
    msg, cls = fault_click(failures, "fl-inject.n_clicks", "npu_die", "n20/l1-3")
    assert "msg-error" in cls and "Not applied" in msg and "is an L1 UB switch; fault kind npu_die breaks an NPU die" in msg
    msg, cls = fault_click(failures, "fl-inject.n_clicks", "optical_flap", "n20/l1-3--sp3/l2-7", period="often")
    assert "msg-error" in cls and "period_s = 'often': not a finite number" in msg
    time.sleep(0.2)
    assert tw.snapshot.faults == () and len(tw.actions(50)) == n_actions       # nothing sent, nothing logged


def test_failures_schedule_at_a_sim_time(failures, twin_registry):
    tw = twin_registry.shared()
    tw.control("pause")
    time.sleep(0.15)
    now = tw.snapshot.sim_time
    msg, cls = fault_click(failures, "fl-schedule.n_clicks", "optical_degrade", "n20/l1-3--sp3/l2-7",
                              at="+30", dur="20", factor="0.25")
    assert "msg-ok" in cls and f"scheduled at t = {now + 30:,.1f} s" in msg
    msg, cls = fault_click(failures, "fl-schedule.n_clicks", "l2", "sp2/l2-5", at="")
    assert "msg-error" in cls and "enter a sim time" in msg
    msg, cls = fault_click(failures, "fl-schedule.n_clicks", "l2", "sp2/l2-5", at=str(now - 10))
    assert "msg-error" in cls and "in the past" in msg
    tw.control("play")
    assert wait_until(lambda: len(tw.snapshot.faults) == 1)
    f = tw.snapshot.faults[0]
    assert f["kind"] == "optical_degrade" and f["at_s"] == pytest.approx(now + 30, abs=1e-3)


def test_failures_page_load_does_not_act(failures, twin_registry):
    """Dash calls the action callbacks with n_clicks = 0 when the page is inserted: no fault, no policy."""
    tw = twin_registry.shared()
    out = triggered(failures.on_fault, "fl-inject.n_clicks", 0, 0, "l2", "sp2/l2-5", None, None, None, None,
                    "shared", None, "v", None, value=0)
    assert out == (no_update, no_update)
    assert triggered(failures.on_policy, "fl-policy-apply.n_clicks", 0, 30, "off", "obs", "shared", None, "v",
                     None, value=0) == (no_update, no_update)
    demo_id = pm_id("fl-demo", "l2-loss")
    assert triggered(failures.on_demo, demo_id, [0] * 6, "shared", None, "v", None, value=0)[0] is no_update
    assert failures.on_random([], 1, "shared", None, "v", None) == (no_update,) * 3
    time.sleep(0.2)
    assert tw.run == 0 and tw.snapshot.faults == () and tw.policy["detect_s"] == 60.0


def test_failures_policy_change(failures, twin_registry):
    tw = twin_registry.shared()
    msg, cls = answered(triggered(failures.on_policy, "fl-policy-apply.n_clicks", 1, 15, "off", "obs", "shared",
                                  None, "vtest", None), "fl-ticket")
    assert "msg-ok" in cls and "redundant_experts=False" in msg and "weights_from=obs" in msg
    assert tw.policy["detect_s"] == 15.0 and tw.policy["redundant_experts"] is False
    assert wait_until(lambda: any(e["kind"] == "policy" for e in tw.snapshot.events))
    msg, cls = triggered(failures.on_policy, "fl-policy-apply.n_clicks", 2, -1, "on", "ems", "shared",
                            None, "vtest", None)
    assert "msg-error" in cls and "policy.detect_s = -1.0: allowed a number of seconds 0..86400" in msg
    assert tw.policy["detect_s"] == 15.0
    from twin.ui import faulttable
    assert "detect 15 s, redundant experts off, weights from OBS" in faulttable.policy_text(tw.policy)


def random_switch(fl, value, rate) -> tuple:
    """The random-failures switch as the page calls it, with the engine's answer."""
    out = triggered(fl.on_random, "fl-random.value", value, rate, "shared", None, "vtest", None)
    return out if out[0] is no_update else (*answered(out[:2], "fl-ticket"), out[2])


def test_failures_random_switch(failures, twin_registry):
    tw = twin_registry.shared()
    msg, cls, value = random_switch(failures, ["on"], 0)
    assert "msg-error" in cls and "0 < x <= 10 " in msg and value == []
    msg, cls, value = random_switch(failures, ["on"], 5)
    assert "msg-ok" in cls and tw.random == 5.0 and value is no_update
    assert random_switch(failures, ["on"], 7) == (no_update,) * 3   # already on
    msg, cls, value = random_switch(failures, [], 5)      # switched off
    assert "msg-ok" in cls and "random failures off" in msg.lower() and tw.random is None
    assert wait_until(lambda: any(e["message"] == "random failures off" for e in tw.snapshot.events))
    random_switch(failures, ["on"], 5)
    tw.control("reset", {"scenario": "default"})
    assert wait_until(lambda: tw.run == 1) and tw.random is None


def test_failures_policy_and_random_confirmations_read_in_chinese(dash_app, failures, twin_registry):
    """The Failures page's own confirmations go through the catalogs like every other control's."""
    import re
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        on, _, _ = random_switch(failures, ["on"], 5)
        pol, _ = answered(triggered(failures.on_policy, "fl-policy-apply.n_clicks", 1, 15, "off", "obs", "shared",
                                    None, "vtest", None), "fl-ticket")
    for msg in (on, pol):
        words = re.findall(r"[A-Za-z]{3,}", re.sub(r"'[^']*'", "", msg))   # settings are quoted as typed
        assert re.search(r"[\u4e00-\u9fff]", msg) and not words, msg


def test_failures_demo_load_replays_the_file(failures, twin_registry):
    tw = twin_registry.shared()
    tw.control("policy", {"detect_s": 5})
    msg, cls = answered(triggered(failures.on_demo, pm_id("fl-demo", "decode-die-no-redundancy"),
                                  [0, 0, 0, 1, 0, 0], "shared", None, "vtest", None), "fl-ticket")
    assert "msg-ok" in cls and "Decode die lost, no redundancy" in msg
    assert wait_until(lambda: tw.run == 1)
    snap = tw.snapshot
    assert (snap.scenario, snap.seed) == ("peak-384", 1)
    assert tw.params.faults.endswith("decode-die-no-redundancy.toml") and tw.params.load is None
    assert tw.policy["redundant_experts"] is False and tw.policy["detect_s"] == 60.0   # the file's policy
    assert [(f["kind"], f["target"], f["at_s"]) for f in snap.faults] == [("npu_die", "n36/npu3/d1", 120.0)]
    assert tw.actions(1)[0]["what"] == "reset: scenario peak-384, seed 1, faults decode-die-no-redundancy"
    out = failures.tick(1, "shared", None, view_name="supernode")     # the policy fields follow the twin
    assert (out["detect"], out["redundant"], out["weights"]) == (60.0, "off", "ems")
    assert "Demo decode-die-no-redundancy" in out["demo_line"]
    sb = twin_registry.open_sandbox()                        # a sandbox copies the demo too
    assert sb.params.faults == tw.params.faults
    with pytest.raises(session.ControlError, match="not a demo \\(allowed: .*decode-die-no-redundancy"):
        tw.control("reset", {"faults": "no-such-demo"})
    assert tw.run == 1


def test_failures_locked_twin_refuses_and_says_why(failures, dash_app):
    reg = session.configure(wall_dt=0.05, token="s3cret")
    try:
        tw = reg.shared()
        msg, cls = fault_click(failures, "fl-inject.n_clicks", "l2", "sp2/l2-5")
        assert "msg-error" in cls and "locked by the instructor" in msg
        msg, cls = fault_click(failures, "fl-inject.n_clicks", "l2", "sp2/l2-5",
                               token={"credential": reg.unlock("s3cret", "c1", None), "ok": True})
        assert "msg-ok" in cls and tw.actions(1)[0]["who"] == "instructor (viewer vtest)"
    finally:
        reg.shutdown()


def test_failures_tick_table_marks_and_patches(failures, twin_registry):
    fl = failures
    tw = twin_registry.shared()
    tw.control("speed", "max")
    assert wait_until(lambda: tw.snapshot.sim_time > 20)
    tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "duration_s": 30})
    assert wait_until(lambda: tw.snapshot.faults and tw.snapshot.faults[0]["recover_s"] is not None, timeout=30)
    tw.control("pause")
    time.sleep(0.2)
    out = fl.tick(1, "shared", None, view_name="supernode")
    figs, strips, table, cursor = out["figs"], out["strips"], out["table"], out["cursor"]
    assert strips is no_update                                            # whole figures on a first draw
    shapes = figs[0]["layout"]["shapes"]
    at = tw.snapshot.faults[0]["at_s"]
    assert {s["type"] for s in shapes} == {"rect", "line"}
    band = next(s for s in shapes if s["type"] == "rect")
    # the band is the disturbance: until the fabric rerouted (reroute_s), not the 30 s the switch is down
    assert band["x0"] == pytest.approx(at, abs=0.05) and band["x1"] == pytest.approx(at + 2, abs=0.05)
    assert figs[0]["layout"]["annotations"][0]["text"] == "#1 L2 lost"
    text = json.dumps(table, default=lambda o: o.to_plotly_json())
    assert "sp2/l2-5" in text and "lost-ok" in text and "recovered" in text and "30.0 s" in text
    assert "1 fault" in text
    assert size(out) < 60_000 and out["canvas"] is no_update              # numbers first, drawing next
    drawn = fl.tick(2, "shared", cursor, view_name="supernode")
    assert len(drawn["canvas"].elements) > 60 and drawn["table"] is no_update
    assert all(f is no_update for f in drawn["figs"])
    assert "UB sub-planes" in drawn["picker_help"]
    cursor = drawn["cursor"]
    again = fl.tick(3, "shared", cursor, view_name="supernode")
    assert all(nothing(v) for k, v in again.items() if k != "cursor")  # same version: nothing
    tw.control("fault", {"kind": "node", "target": "n20"})
    tw.control("play")
    assert wait_until(lambda: tw.snapshot.version > cursor["v"] + 1 and "n20/npu3/d1" in tw.snapshot.failed
                      and tw.snapshot.history["t"][-1] > cursor["t"])
    upd = fl.tick(3, "shared", cursor, view_name="supernode")
    assert all(f is no_update for f in upd["figs"])                       # charts never resent whole
    strips = upd["strips"]                                                # one compact update for all four
    assert strips["x"] and strips["x"][0] > cursor["t"] and strips["keep"] == figures.HISTORY_POINTS
    assert [len(y) for y in strips["y"]] == [len(spec.series) for spec in fl.CHARTS.values()]
    assert all(len(ys) == len(strips["x"]) for y in strips["y"] for ys in y)
    assert strips["notes"][-1]["text"] == "#2 node down"                  # the new fault's mark
    failed = json.dumps(upd["failed"], default=lambda o: o.to_plotly_json())
    assert "n20" in failed and "elements down" in failed
    live = upd["live"]
    assert live["ndown"] and live["view"] == "supernode"                  # n20 drawn as failed
    assert size(upd) < 30_000
    rows = faultrows.rows(tw.snapshot.faults, tw.snapshot.sim_time)
    assert rows[0]["slo_before"] is not None and rows[0]["state"].startswith("recovered")


def test_an_open_report_pins_the_charts_to_its_incident_and_closing_it_lets_them_scroll(failures, twin_registry):
    """Issue 36 item 13: with a fault's report open, the tick draws the four charts from the series the
    engine kept for the incident, the x axis fixed to the report's window; closed, the rolling charts
    come back whole (and the strips resume)."""
    fl = failures
    tw = twin_registry.shared()
    tw.control("speed", "max")
    assert wait_until(lambda: tw.snapshot.sim_time > 20)
    tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "duration_s": 10})
    assert wait_until(lambda: tw.snapshot.faults and tw.snapshot.faults[0].get("final"), timeout=60)
    tw.control("pause")
    time.sleep(0.2)
    first = fl.tick(1, "shared", None, view_name="supernode")
    drawn = fl.tick(2, "shared", first["cursor"], view_name="supernode")
    pinned = fl.tick(3, "shared", drawn["cursor"], view_name="supernode", report_id=1)
    r = tw.snapshot.faults[0]
    assert r["window_s"][0] == pytest.approx(r["at_s"] - 60, abs=1e-3) and r["back_s"] is not None
    for fig in pinned["figs"]:
        assert fig["layout"]["xaxis"]["range"] == r["window_s"] and "fault #1" in fig["layout"]["title"]["text"]
    assert pinned["cursor"]["pin"] == 1 and pinned["strips"] is no_update
    same = fl.tick(4, "shared", pinned["cursor"], view_name="supernode", report_id=1)
    assert all(f is no_update for f in same["figs"])                       # pinned: not resent
    closed = fl.tick(5, "shared", same["cursor"], view_name="supernode", report_id=None)
    assert all("range" not in f["layout"]["xaxis"] for f in closed["figs"])   # the rolling charts, whole
    assert closed["cursor"].get("pin") is None


def test_fault_marks_merge_bands_and_keep_to_the_window():
    from twin.ui import faulttable as faulttable
    reps = [{"id": 1, "kind": "l2", "at_s": 10.0, "recover_s": 5.0, "served_s": 5.0, "active": False},       # ends before t_from
            {"id": 2, "kind": "l2", "at_s": 100.0, "recover_s": 50.0, "served_s": 50.0, "detect_s": 20.0, "active": False},
            {"id": 3, "kind": "cpu", "at_s": 120.0, "recover_s": None, "served_s": None, "active": True},    # overlaps #2
            {"id": 4, "kind": "node", "at_s": 300.0, "recover_s": 10.0, "served_s": 10.0, "active": False},
            {"id": 5, "kind": "npu", "at_s": 900.0, "active": False}]                     # not struck yet
    shapes, notes = faulttable.marks(reps, 400.0, t_from=50.0)
    bands = [(s["x0"], s["x1"]) for s in shapes if s["type"] == "rect"]
    assert bands == [(100.0, 400.0)]                    # #2 and #3 (still active: to now) and #4 merged
    lines = [(s["x0"], s["line"]["color"]) for s in shapes if s["type"] == "line"]
    assert [x for x, _ in lines] == [100.0, 120.0, 300.0, 120.0]    # three strikes, one detection
    assert [n["text"] for n in notes] == ["#2 L2 lost", "#3 CPU lost", "#4 node down"]
    many = [{"id": i, "kind": "l1", "at_s": float(i), "recover_s": 0.5, "served_s": 0.5,
             "active": False} for i in range(1, 31)]
    shapes, notes = faulttable.marks(many, 40.0)
    assert len([s for s in shapes if s["type"] == "rect"]) == 30
    assert 0 < len(notes) <= faulttable.MARK_LABELS and len(notes) <= len(faulttable.LABEL_ROWS)  # crowded: only what has room
    assert notes[-1]["text"] == "#30 L1 lost"


def test_failures_layout_ids_url_target_and_topology_link(failures, pages, dash_app, twin_registry):
    shell = _ids(dash_app.serve_layout())
    ids = shell + _ids(failures.layout())
    assert not {i for i in ids if ids.count(i) > 1}
    first = failures.tick(1, "shared", None, view_name="supernode", url={"target": "n07/npu3/d1", "kind": None})
    assert first["kind"] is no_update and first["target"] is no_update      # the layout drew it from the id
    assert "n07/npu3/d1" not in first["hint"]                                 # ...and the system has it
    first = failures.tick(1, "shared", None, view_name="supernode",
                          url={"target": "sp4/l2-11--n07/l1-4", "kind": None})
    assert (first["kind"], first["target"]) == ("optical_link", "n07/l1-4--sp4/l2-11")   # canonical id
    text = json.dumps(failures.layout(target="n07/npu3/d1"), default=lambda o: o.to_plotly_json())
    assert '"target": "n07/npu3/d1"' in text                              # kept for the first tick

    out = triggered(failures.on_pick, "fl-cy.tapEdgeData", "l2", None, {"id": "n07==sp4:ub", "links": 16},
                    "sp2/l2-5", "shared")
    assert out["kind"] is no_update and "open a sub-plane" in out["hint"]
    out = triggered(failures.on_pick, "fl-kind.value", "optical_flap", None, None, "n07/l1-4", "shared")
    assert out["target"] == "n07/l1-4--sp4/l2-0" and out["period_style"] == {}     # flap period field shown
    out = triggered(failures.on_pick, "fl-cy.tapNodeData", "l2", None, None, "sp2/l2-5", "shared", value=None)
    assert all(v is no_update for v in out.values())                      # a new drawing is not a click
    href, style = pages.topology.break_link({"kind": "node", "id": "n07/npu3/d1", "view": "n07"}, "shared")
    assert href == "/failures?target=n07/npu3/d1&kind=npu_die" and style == {}
    assert pages.topology.break_link({"kind": "node", "id": "vpc/switch"}, "shared")[1] == {"display": "none"}


def test_validation_page_separates_calibration_validation_and_predictions(pages):
    layout = pages.validation.layout()
    text = json.dumps(layout, default=lambda o: o.to_plotly_json())
    assert '"va-validation"' in text and '"va-table"' in text and '"va-predictions"' in text
    assert "DeepSeek H800 prefill tok/s per GPU" in text and "DeepEP low-latency" in text
    assert "gb200-nvl72-r1" in text and '"prediction"' in text
    assert "14 of 14 validation rows within tolerance" in text     # issue 38: + 8 rows, + 2 EMS TTFT rows


def test_overview_events_show_an_injected_fault_once(pages, dash_app):
    """A fault injected now logs "scheduled now" and its strike in the same instant: the Overview's
    list shows it once (the strike); a fault scheduled ahead keeps its "scheduled at" line."""
    from types import SimpleNamespace

    from twin.engine import Engine
    eng = Engine(scenario="paper-decode")
    eng.advance(1.0)
    eng.submit(InjectFault({"kind": "l2", "target": "sp2/l2-5"}))
    eng.submit(InjectFault({"kind": "l1", "target": "n20/l1-3", "at_s": 30.0}))
    eng.advance(5.0)
    snap = SimpleNamespace(events=eng.snapshot().events)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        lines = [d.children[2].children for d in pages.overview._events(snap)]
    assert [x for x in lines if x.startswith("#1 ")] == ["#1 L2 UB switch lost on sp2/l2-5: traffic rerouted after 2.0 s",
                                                         "#1 L2 UB switch lost on sp2/l2-5"]
    assert [x for x in lines if x.startswith("#2 ")] == ["#2 L1 UB switch lost on n20/l1-3 scheduled at 30 s"]


def test_cache_page_says_why_a_ttft_line_is_missing(pages):
    """paper-prefill-cache reuses 90% of every prompt: no request is without a hit, and the page
    says so instead of leaving the line silently empty; with both kinds in the window, no note."""
    from twin.engine import Engine
    from twin.engine.metrics import HIT_WINDOW
    eng = Engine("paper-prefill-cache", seed=0)
    eng.advance(HIT_WINDOW + 5)
    h = eng.snapshot().history
    assert all(v != v for v in h["ttft_miss_p50_ms"]) and h["ttft_hit_p50_ms"][-1] > 0
    assert pages.cache.ttft_note(h).startswith("No line without a hit")
    nan = float("nan")
    assert pages.cache.ttft_note({"ttft_hit_p50_ms": [nan] * HIT_WINDOW, "ttft_miss_p50_ms": [300.0]}).startswith(
        "No line with a hit")
    assert pages.cache.ttft_note({"ttft_hit_p50_ms": [80.0, nan], "ttft_miss_p50_ms": [nan, 300.0]}) == ""
    assert pages.cache.ttft_note({"ttft_hit_p50_ms": [80.0] + [nan] * HIT_WINDOW, "ttft_miss_p50_ms": [300.0]}) \
        .startswith("No line with a hit")                                 # the hit fell out of the window
