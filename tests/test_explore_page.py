"""Explorer page: callbacks called as functions (forged payloads, limits, progress, figures)."""
import time

import pytest

from twin.live import jobs
from twin.ui import jobform
from twin.explore import sweepjobs


@pytest.fixture(scope="module")
def E(dash_app):
    from pages import explorer
    return explorer


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_SWEEP_CACHE", str(tmp_path / "cache"))


GOOD = ("cloudmatrix-infer-paper", "paper-decode", "load", "0.4,0.8", "mtp", "true,false", 1, 10, "model")


@pytest.mark.parametrize("i, bad, words", [
    (0, ["x"], "Deployment"), (1, "mooncake-live", "Scenario: allowed"), (2, {"k": 1}, "Axis: allowed"),
    (3, "x" * 5000, "values of load"), (3, "0.9:0.1:0.1", "inverted range"), (3, None, "values of load"),
    (4, "bogus", "Axis: allowed"), (6, "abc", "Seeds"), (6, 2.5, "Seeds"), (7, 1e9, "Simulated seconds"),
    (8, "gpu", "Source"), (3, "0.1:5:0.05", "at most 60 per sweep"),
])
def test_forged_or_bad_payloads_answer_one_line(E, i, bad, words):
    args = list(GOOD)
    args[i] = bad
    job, msg, cls, tick = E.on_start(1, *args, None)
    assert job is dash_no_update() and tick is dash_no_update()
    assert cls == "ctl-msg msg-error" and words in msg and "\n" not in msg and "Traceback" not in msg


def dash_no_update():
    from dash import no_update
    return no_update


def test_a_model_sweep_runs_in_the_background_and_draws_the_frontier(E):
    job, msg, cls, tick = E.on_start(1, *GOOD, "a" * 32)
    assert cls == "ctl-msg msg-ok" and tick is False
    viewer = jobform.viewer("a" * 32)
    for _ in range(600):
        j = jobs.pool().view(job, viewer)
        if j["state"] not in ("queued", "running"):
            break
        time.sleep(0.05)
    assert j["state"] == "done" and j["total"] == 4 and len(j["result"]["rows"]) == 4
    value, mx, text, fig, disabled, msg, cls = E.progress_view(j)
    assert (value, mx, disabled) == ("4", "4", True) and "done" in text and cls == "ctl-msg msg-ok"
    names = [t["name"] for t in fig["data"]]
    assert names == ["mtp = on", "mtp = off", "Pareto frontier", "paper (decode, per NPU)"]
    # another browser cannot read this job
    assert jobs.pool().view(job, jobform.viewer("b" * 32)) is None
    assert E.on_tick(1, job, "tokens_per_s_per_user", "b" * 32)[4] is True
    # against TTFT p99 (lower is better), from a forged axis value back to the default
    ttft = E.on_tick(1, job, "ttft_ms_p99", "a" * 32)[3]
    assert ttft["layout"]["xaxis"]["title"]["text"] == "TTFT p99, ms" and len(ttft["data"]) == 3
    assert E.on_tick(1, job, {"x": 1}, "a" * 32)[3]["layout"]["xaxis"]["title"]["text"].startswith("tokens/s")


def test_pareto_figure_frontier_and_bands(E):
    pts = [{"tokens_per_s_per_user": x, "goodput_per_chip": y, "goodput_per_chip_ci95": 3.0,
            "tokens_per_s_per_user_ci95": None, "load": x} for x, y in ((10, 500), (20, 400), (15, 300))]
    fig = E.pareto_figure(pts, ["load"])
    assert fig["data"][0]["error_y"]["array"] == [3.0, 3.0, 3.0]
    assert fig["data"][0]["error_x"]["array"] == [0, 0, 0]
    front = fig["data"][1]
    assert front["x"] == [10, 20] and front["y"] == [500, 400]
    ttft = [{"ttft_ms_p99": x, "goodput_per_chip": y, "load": x} for x, y in ((100, 500), (50, 400), (80, 300))]
    front = E.pareto_figure(ttft, ["load"], "ttft_ms_p99")["data"][1]
    assert front["x"] == [50, 100] and front["y"] == [400, 500]     # (80, 300) is beaten by (50, 400)


def test_compare_page_lists_the_five_systems_and_downloads_them(dash_app):
    from pages import compare
    d = compare._compare()
    assert len(compare.table(d).children.children[1].children) == 5      # a scrolling wrapper around the table
    ep = compare.ep_figure(d)
    assert [t["name"] for t in ep["data"]] == [compare.names(d)[k] for k in d["ep_sweep"]]   # catalog names (issue 36)
    assert ep["layout"]["xaxis"]["tickvals"] == (8, 16, 32, 64, 128, 320)     # no crowded minor labels on the log axis
    assert compare.on_csv(1)["filename"] == "compare.csv"


def test_csv_needs_a_finished_sweep(E):
    data, msg, cls = E.on_csv(1, "j999999", None)
    assert "run a sweep first" in msg and cls == "ctl-msg msg-error"


# ---- a sweep is a job of the pool: its own process, its cost from its size ---------------------------
def test_an_engine_sweep_is_costed_by_rate_duration_and_runs_and_runs_outside_the_web_process(E, monkeypatch):
    args = ("cloudmatrix-infer-paper", "paper-decode", "rate", "1000,99000", "none", "", 2, 10, "engine")
    from twin.explore.points import plan, parse_vary
    small = plan("cloudmatrix-infer-paper", "paper-decode", [parse_vary("rate=1000")], 1, 10.0)
    big = plan("cloudmatrix-infer-paper", "paper-decode", [parse_vary("rate=99000")], 1, 10.0)
    assert sweepjobs.cost_s(big) > 10 * sweepjobs.cost_s(small)          # the rate counts, not only simulated seconds
    seen = {}

    def submit(kind, fn, fargs, **kw):
        seen.update(kw, kind=kind, fn=fn, n=len(fargs[0]))
        return "sw-test"
    monkeypatch.setattr(jobs.pool(), "submit", submit)
    job, msg, cls, tick = E.on_start(1, *args, "d" * 32)
    assert job == "sw-test" and seen["fn"] is sweepjobs.sweep_job and seen["n"] == 4 and seen["total"] == 4
    assert seen["cost_s"] == pytest.approx(sweepjobs.cost_s(plan("cloudmatrix-infer-paper", "paper-decode",
                                                          [parse_vary("rate=1000,99000")], 2, 10.0)))
    assert seen["client"] == jobform.viewer("d" * 32)


def test_a_sweep_too_large_for_its_cpu_budget_is_refused_before_it_starts(E):
    args = ("cloudmatrix-infer-paper", "paper-decode", "rate", "90000:99000:1000", "mtp", "true,false", 4, 60,
            "engine")
    job, msg, cls, tick = E.on_start(1, *args, "e" * 32)
    assert cls == "ctl-msg msg-error" and "CPU-seconds (allowed at most 600)" in msg, msg


def test_cancel_stops_this_browsers_sweep_only(E):
    args = ("cloudmatrix-infer-paper", "paper-decode", "load", "0.3:1.2:0.15", "none", "", 2, 30, "engine")
    job, msg, cls, tick = E.on_start(1, *args, "f" * 32)
    assert cls == "ctl-msg msg-ok", msg
    assert E.on_cancel(1, job, "g" * 32)[1] == "ctl-msg msg-error"       # not that browser's job
    assert E.on_cancel(1, job, "f" * 32) == ("Sweep cancelled.", "ctl-msg msg-ok")
    assert jobs.pool().view(job, jobform.viewer("f" * 32))["state"] == "cancelled"


def test_a_queued_sweep_shows_its_place_in_line(E):
    view = {"state": "queued", "position": 2, "wait_s": 40, "cost_s": 12.0, "done": 0, "total": 8}
    value, mx, text, fig, disabled, msg, cls = E.progress_view(view)
    assert text == "queued: 2 in line, about 40 s of work ahead; estimated 12 CPU-s" and disabled is False


def test_click_a_point_gives_sandbox_settings(E):
    job = {"state": "done", "result": {"varied": ["load"], "points": [
        {"deployment": "cloudmatrix-infer-paper", "scenario": "paper-decode", "load": 0.5}]}}
    p = E.sandbox_params(job, {"points": [{"customdata": 0}]})
    from twin.engine import Engine, load_scenario
    cap = Engine(load_scenario("paper-decode")).capacity_rps()
    assert p == {"scenario": "paper-decode", "deployment": "cloudmatrix-infer-paper", "rate": round(0.5 * cap, 3)}
    for bad in (None, {"points": "x"}, {"points": [{"customdata": 5}]}, {"points": [{"customdata": True}]}):
        with pytest.raises(ValueError, match="click a point of a finished sweep"):
            E.sandbox_params(job, bad)
    with pytest.raises(ValueError, match="cannot take mtp"):
        E.sandbox_params({**job, "result": {**job["result"], "varied": ["load", "mtp"]}}, {"points": [{"customdata": 0}]})


def test_click_opens_a_sandbox_or_says_why_not(E, twin_registry):
    assert E.on_click(None, "j-none", "c" * 32) == (dash_no_update(),) * 3      # page load: no message
    key, msg, cls = E.on_click({"points": [{"customdata": 0}]}, "j-none", "c" * 32)
    assert "click a point of a finished sweep" in msg and cls == "ctl-msg msg-error"
    viewer = jobform.viewer("c" * 32)
    job = jobs.Job("j-click", "sweep", viewer, None, 1, 1.0, 1.0, state="done", result={"rows": [], "varied": ["load"], "points": [
        {"deployment": "cloudmatrix-infer-paper", "scenario": "paper-decode", "load": 0.5, "rate": None}]})
    jobs.pool()._jobs[job.id] = job
    try:
        key, msg, cls = E.on_click({"points": [{"customdata": 0}]}, job.id, "c" * 32)
    finally:
        del jobs.pool()._jobs[job.id]
    assert cls == "ctl-msg msg-ok" and key in twin_registry.sandboxes(), msg
    tw = twin_registry.get(key)
    assert tw.owner == viewer and tw.params.scenario == "paper-decode" and tw.params.rate > 0
