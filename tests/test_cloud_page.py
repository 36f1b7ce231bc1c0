"""The Cloud page's callbacks called as functions: the live day from the viewed twin's snapshot
(nothing sent while the version is unchanged), the policy knobs through the twin's action path,
a short comparison day, prices re-pricing it, and bad or forged values getting a one-line message
(never a traceback)."""
import importlib
import time

import pytest
from dash import no_update

KNOBS = (0.6, 0.8, 0.99, 0, 24, 2, 6, 1)
PRICES = (8e6, 4, 0.1, 1.3, 0.5)
ACTOR = ("shared", None, "v1", "secret-1")


@pytest.fixture(scope="module")
def cloud(dash_app):
    return importlib.import_module("pages.cloud")      # after the app exists (register_page)


SECRET = "s" * 32


@pytest.fixture(scope="module")
def run(cloud):
    data, msg, cls = cloud.on_run(1, 30, *KNOBS, SECRET)
    assert cloud._job(data, SECRET)["state"] in ("queued", "running")   # not simulated inside the request
    assert cls == "ctl-msg msg-ok" and msg == "A 30 s day under 3 policies and 3 seeds is queued as a background job."
    _wait(lambda: cloud._job(data, SECRET)["state"] not in ("queued", "running"), timeout=300)
    assert cloud._job(data, SECRET)["state"] == "done", cloud._job(data, SECRET)
    return data


@pytest.mark.slow
def test_the_comparison_ran_in_a_job_process_and_is_kept_for_this_browser_only(cloud, run):
    from twin.live import jobs
    job = cloud._job(run, SECRET)
    assert job["kind"] == "cloud" and job["done"] == 9 and set(job["result"]) == {"copool", "dedicated", "inference-only"}
    assert job["total"] == 9 and all(len(days) == 3 for days in job["result"].values())       # 3 seeds each
    assert cloud.job_text(job) == "" and cloud.on_job_tick(1, run, SECRET)[1] is True
    assert jobs.pool().view(run["job"], "s-someone-else") is None
    assert cloud.on_show(run, list(PRICES), "t" * 32)[0].children == \
        "Run the comparison to see the three policies side by side."


def _sent(fn, *args) -> tuple:
    """A sending callback's (message, class) once the twin answered (twin.ui.answer)."""
    from test_callbacks import answered, triggered
    return answered(triggered(fn, "cl-send.n_clicks", *args), "cl-ticket")


def _cells(shown) -> dict:
    rows = shown.children[0].children[1:]
    return {r.children[0].children: [c.children for c in r.children[1:]] for r in rows}


def _wait(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_the_live_day_is_drawn_from_the_snapshot_and_knobs_go_through_the_action_path(cloud, twin_registry):
    tw = twin_registry.shared()
    out = cloud.tick(1, "shared", None)
    assert "not a co-pool day" in out["live"] and out["load"] == {}
    msg, cls = _sent(cloud.on_load, 1, *ACTOR)
    assert cls == "ctl-msg msg-ok" and msg.startswith("reset: scenario copool-day")
    tw.control("speed", "max")
    _wait(lambda: tw.snapshot.cloud and len(tw.snapshot.cloud["timeline"]) >= 3)
    out = cloud.tick(2, "shared", None)
    assert out["load"] == {"display": "none"} and "policy copool" in out["live"]
    assert [t["name"] for t in out["fig"]["data"]][:4] == ["prefill NPUs", "decode NPUs", "training NPUs", "switching"]
    assert out["form"] == ["copool", 0.6, 0.8, 0.99, 0.0, 24.0, 2.0, 6, 1]
    tw.control("pause")
    cursor = out["cursor"]
    _wait(lambda: tw.snapshot.version == tw.snapshot.version)      # paused: the version stays
    same = cloud.tick(3, "shared", {**cursor, "v": tw.snapshot.version})
    assert same["fig"] is no_update and same["live"] is no_update and same["cursor"] is no_update
    msg, cls = _sent(cloud.on_apply, 1, "dedicated", 0.6, 0.8, 0.99, 0, 24, 2, 4, 0, *ACTOR)
    assert cls == "ctl-msg msg-ok" and "co-pool policy=dedicated" in msg and "dedicated_prefill_groups=4," in msg
    assert "applied to the shared twin at t = " in msg and tw.actions(1)[0]["what"].startswith("co-pool policy=dedicated")          # logged for everyone
    tw.control("play")
    _wait(lambda: tw.snapshot.cloud["params"]["policy"] == "dedicated")
    _wait(lambda: tw.snapshot.cloud["npus"]["training"] == 64.0)     # 4 x 16 NPUs after drain + switch


@pytest.mark.parametrize("policy,knobs,message", [
    ("dedicated", (0.6, 0.8, 0.99, 0, 24, 2, 17, 1), "dedicated_prefill_groups = 17: allowed 0..16"),
    ("dedicated", (0.6, 0.8, 0.99, 0, 24, 2, 6, 3), "dedicated_decode_groups"),
    ("<script>", KNOBS, "policy = '<script>': allowed copool, dedicated, inference-only"),
    ("copool", ("x",) + KNOBS[1:], "lend_below = 'x': not a number"),
    ("copool", (0.6, 0.8, 0.99, 5, 5, 2, 6, 1), "must differ from train_from_h")])
def test_bad_knobs_are_refused_with_a_message(cloud, twin_registry, policy, knobs, message):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "copool-day"})
    _wait(lambda: tw.snapshot.cloud is not None)
    msg, cls = _sent(cloud.on_apply, 1, policy, *knobs, *ACTOR)
    assert cls == "ctl-msg msg-error" and message in msg, msg


def test_knobs_on_a_twin_without_a_co_pool_day_are_refused(cloud, twin_registry):
    twin_registry.shared()
    msg, cls = _sent(cloud.on_apply, 1, "copool", *KNOBS, *ACTOR)
    assert cls == "ctl-msg msg-error" and "does not run a co-pool day; load scenario copool-day" in msg


@pytest.mark.slow
def test_a_comparison_runs_and_is_priced(cloud, run):
    table, *_ = cloud.on_show(run, list(PRICES), SECRET)
    assert set(_cells(table)) == {"copool", "dedicated", "inference-only"}
    assert _cells(table)["inference-only"][4] == "0"         # no training steps


@pytest.mark.slow
def test_each_figure_shows_its_interval_across_seeds_and_a_verdict(cloud, run):
    shown = cloud.on_show(run, list(PRICES), SECRET)[0]
    cells = _cells(shown)
    assert " ± " in cells["copool"][0] and cells["copool"][0].endswith("%")   # supernode util varies by seed
    line = shown.children[1]
    assert line.id == "cl-verdict" and line.children.startswith("Over 3 seeds (95% intervals):")


def _day(util, usd):
    return {"utilisation": {"supernode": util}, "cost_per_million_tokens": usd}


def test_the_page_says_when_the_verdict_is_not_settled(cloud):
    settled = {"copool": [_day(0.80, 1.0), _day(0.81, 1.01), _day(0.79, 0.99)],
               "dedicated": [_day(0.70, 1.1), _day(0.71, 1.12), _day(0.70, 1.09)]}
    text = cloud.verdict_line(settled).children
    assert "co-pool is ahead on utilisation" in text and "co-pool is ahead on $ per M tokens" in text
    assert "Not settled" not in text
    open_ = {"copool": [_day(0.80, 1.0), _day(0.62, 1.2), _day(0.72, 1.1)], "dedicated": settled["dedicated"]}
    text = cloud.verdict_line(open_).children
    assert "utilisation: co-pool minus dedicated [" in text and "spans zero" in text
    assert text.endswith("Not settled at this day length: run a longer day.")


def test_the_timeline_has_two_panels_and_its_switches_are_one_marker_trace(cloud):
    rows = [{"t": t, "prefill_npus": 128, "decode_npus": 192, "training_npus": 64, "switching_npus": 0,
             "arrival_rps": 10 + t, "serving_capacity_rps": 40, "useful_prefill_npus": 60, "useful_decode_npus": 90,
             "training_running": True, "steps": t} for t in range(0, 60, 2)]
    moves = [{"t": t, "to": "training" if i % 2 else "serving", "group": f"p{i}", "reason": "load"}
             for i, t in enumerate(range(4, 56, 2))]
    view = {"timeline": rows, "period_s": 60, "params": {"day_start_h": 6, "policy": "copool"},
            "npus": {"prefill": 128, "decode": 192, "training": 64}, "switches": moves, "moves": len(moves)}
    fig = cloud.timeline_figure(view)
    lay = fig["layout"]
    assert lay["title"]["text"] == "copool: 26 switches"
    assert cloud.switches_text({**view, "policy_moves": 7}) == "26 switches, 7 of them when the policy was changed"
    assert not lay.get("shapes")                                          # no line per switch
    marks = [t for t in fig["data"] if t.get("mode") == "markers"]
    assert len(marks) == 1 and len(marks[0]["x"]) == len(moves) == 26
    panels = {}
    for k, ax in lay.items():
        if k.startswith("yaxis"):
            panels.setdefault(ax.get("overlaying", "y" + k[5:]), []).append(k)
    assert len(panels) == 2 and all(len(axes) <= 2 for axes in panels.values()), panels


@pytest.mark.slow
def test_prices_reprice_without_a_rerun(cloud, run):
    cheap = _cells(cloud.on_show(run, [4e6, 4, 0.1, 1.3, 0.5], SECRET)[0])
    dear = _cells(cloud.on_show(run, [8e6, 4, 0.1, 1.3, 0.5], SECRET)[0])
    assert float(dear["inference-only"][8].split()[0]) > float(cheap["inference-only"][8].split()[0])


@pytest.mark.parametrize("day,knobs,message", [
    (5, KNOBS, "day length = '5': allowed 30 to 600"), ("x", KNOBS, "day length = 'x'"),
    (30, ("abc",) + KNOBS[1:], "lend_below = 'abc': not a number"),
    (30, (0.6, 0.8, 0.99, 3, 3, 2, 6, 1), "train_to_h = 3.0: must differ from train_from_h"),
    (30, (0.6, 9.0) + KNOBS[2:], "copool.reclaim_above = 9.0"), (30, ([1],) + KNOBS[1:], "lend_below")])
def test_bad_run_inputs_get_a_message(cloud, day, knobs, message):
    data, msg, cls = cloud.on_run(1, day, *knobs, SECRET)
    assert data is no_update and cls == "ctl-msg msg-error" and message in msg


@pytest.mark.slow
def test_bad_prices_and_forged_stores(cloud, run):
    out = cloud.on_show(run, [8e6, 4, 0.1, 0.5, 0.5], SECRET)
    assert out[2] == "ctl-msg msg-error" and "prices.pue = 0.5" in out[1]
    for forged in (None, "junk", {"job": 5}, {"job": "nope"}, {"job": ["x"]}):
        assert cloud.on_show(forged, list(PRICES), SECRET)[0].children == \
            "Run the comparison to see the three policies side by side."
