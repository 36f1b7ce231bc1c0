"""Region page: callbacks called as functions (the job's report drawn, refusals, budgets, drill-down)."""
from urllib.parse import parse_qs

import pytest
from dash import html, no_update

from twin.live import jobs
from twin.ui import jobform, regionreport, theme
from twin.region import pagejob
from twin.region.driver import member_seed

GOOD = ("cm384-pair", "least-load", "off", 10, 1, "1", 5, 0, 0.9, "none", "1", 3, None)
LINK = ("0", "1", 3, 4)          # the link between supernodes 0 and 1 down at 3 s for 4 s


@pytest.fixture(scope="module")
def R(dash_app):
    from pages import region
    return region


@pytest.fixture(scope="module")
def report():
    """A 10-s cm384-pair losing supernode 1 at 5 s, run by the job's own function (no process)."""
    seen = []
    rep = pagejob.region_job("cm384-pair", 10.0, "least-load", "off", 1.0, ("supernode:1@5",), 0, 0.9, seen.append)
    assert seen == list(range(1, 11))               # progress: one step a window
    return rep


def _fetching(faults: tuple) -> dict:
    """A 10-s cm384-pair whose sessions stay put and fetch their prefixes over the link."""
    return pagejob.region_job("cm384-pair", 10.0, "session-affinity", "fetch", 1.0, faults, 0, 0.9, lambda _d: None)


@pytest.fixture(scope="module")
def link_report():
    """The same pair fetching prefixes, its link down at 2.5 s for 4 s (so from the 3 s edge to the 7 s
    one) and supernode 1 lost at 8 s (both faults, as the form sends them), and the run without them."""
    return _fetching(("supernode:1@8", "link:0-1@2.5+4")), _fetching(())


@pytest.fixture
def idle_pool(monkeypatch):
    """A job pool that queues but starts nothing (no supervisor): what on_start submits stays queued."""
    return _pool(monkeypatch)


def _pool(monkeypatch, **kw) -> jobs.JobPool:
    pool = jobs.JobPool(**kw)
    monkeypatch.setattr(pool, "_start_supervisor", lambda: None)
    monkeypatch.setattr(jobs, "_pool", pool)
    return pool


def _texts(c, out):
    from tests.test_i18n import visible_texts
    return visible_texts(c, out)


def test_a_finished_run_shows_the_audit_the_table_and_the_failed_supernode(R, report, dash_app):
    assert report["regional"]["requests"]["lost"] == 0 and report["regional"]["requests"]["moved"]["in"] > 0
    job = {"state": "done", "done": 10, "total": 10, "result": report}
    with dash_app.server.test_request_context("/"):
        value, mx, text, res, disabled, msg, cls, opts, pick, fig = R.progress_view(job)
        texts = _texts(res, [])
    assert (value, mx, disabled, cls) == ("10", "10", True, "ctl-msg msg-ok") and "done" in text
    assert msg == "Region run done: 2 supernodes, 0 requests lost."
    assert [o["value"] for o in opts] == ["0", "1"] and pick == "1"          # the failed one is drilled into first
    r = report["regional"]["requests"]
    audit = next(t for t in texts if t.startswith("Arrived"))
    assert audit == (f"Arrived {r['arrived']:,} · completed {r['completed']:,} · rejected 0 · timed out 0 · "
                     f"in flight 0 · moved {r['moved']['in']:,} · lost 0 (the lifecycle audit)")
    assert any("window 1 s" in t and "last window edge" in t for t in texts)     # what the figures are
    table = res[-1].children
    rows = table.children[1].children
    assert len(rows) == 2 and rows[1].className == "row-failed"
    cells = [c.children for c in rows[1].children]
    assert cells[:5] == [1, "cloudmatrix-infer-paper", "256", "failed at 5 s", f"{report['supernodes'][1]['routed']:,}"]
    assert fig == R.figure(report) and fig["data"][0]["marker"]["color"] == [theme.BLUE, theme.RED]
    assert fig["data"][0]["text"] == ["", "failed at 5 s"] and fig["data"][0]["customdata"] == [0, 1]


def test_drill_down_shows_every_figure_of_a_supernode_and_its_sandbox_link(R, report, dash_app):
    s = report["supernodes"][1]
    with dash_app.server.test_request_context("/"):
        d = R.detail(report, 1)
    rows = d.children[2].children.children.children
    shown = {r.children[0].children for r in rows}
    leaves = [p for p, _v in regionreport.flatten({k: v for k, v in s.items() if k != "supernode"})
              if not p.startswith("requests.errors.")]
    assert len(rows) == len(leaves) + 1                       # every figure, and the lifecycle errors row
    assert {regionreport.LABELS[p] for p in leaves} <= shown             # each under its label (none shown raw)
    link = d.children[3].children[0]
    q = {k: v[0] for k, v in parse_qs(link.href[2:]).items()}
    up = s["routed"] / 5.0 / s["capacity_rps"] * 100
    assert link.href.startswith("/?") and q == {"scenario": "default", "deployment": "cloudmatrix-infer-paper",
                                                "seed": str(member_seed(0, 1)), "load": f"{up:.0f}"}


def test_the_page_in_chinese_shows_no_english(R, report, link_report, dash_app):
    from tests.test_i18n import english_words
    job = {"state": "done", "done": 10, "total": 10, "result": report}
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        out = R.progress_view(job)
        texts = _texts([out[2], out[3], out[5], out[7], R.detail(report, 0), R.detail(report, 1)], [])
        texts += [t["name"] for t in R.figure(report)["data"]]
        texts += [a["text"] for a in R.figure(None)["layout"]["annotations"]]     # before a run: a line, not bare axes
        texts = _texts([R.results(link_report[0]), regionreport.link_lines({**report, "link_faults": [
            {"link": [0, 1], "at_s": 2.5, "for_s": None, "down_s": 3.0, "up_s": None}]})], texts)
        assert any("链路故障" in t for t in texts) and any("未计入" in t for t in texts)
        refused = [R.on_start(1, *GOOD[:4], 0.003, *GOOD[5:], None)[1], R.on_start(1, *GOOD[:6], 99, *GOOD[7:], None)[1],
                   R.on_start(1, *GOOD[:8], 3, *GOOD[9:], None)[1],
                   R.on_start(1, *GOOD[:9], "0", "0", 3, None, None)[1], R.on_start(1, *GOOD[:9], *LINK[:3], -2, None)[1]]
    leftovers = {t: w for t in texts + refused if (w := english_words(t))}
    assert leftovers == {} and "区域运行完成" in out[5]
    assert refused == ["窗口：允许 0.1 到 10 秒，且为 0.005 秒到达节拍的整数倍", "故障时间：允许 0 到小于到达时长（仿真 10 秒）",
                       "负载：允许 0.1 到 2，即区域容量的比例（1 = 全部容量）", "链路故障：允许无链路故障，或两个不同的超节点 0 到 1",
                       "链路断开时长：允许留空（断开到运行结束）或大于 0 的仿真秒数"]


@pytest.mark.parametrize("i, bad, words", [
    (0, "atlas-region", "Region: allowed cm384-pair, cm384-trio"), (0, {"x": 1}, "Region: allowed"),
    (1, "random", "Router policy: allowed least-load, prefix-affinity, session-affinity"),
    (2, "copy", "Cache reuse: allowed off, fetch"), (3, 1e9, "Simulated seconds: allowed 5 to 120"),
    (3, "abc", "Simulated seconds: allowed 5 to 120"), (4, 0.003, "Window: allowed 0.1 to 10 s"),
    (4, 0.1234, "a multiple of the 0.005 s arrival tick"), (5, "2", "Fail: allowed no failure or a supernode 0 to 1"),
    (6, 10, "Failure time: allowed 0 to less than the 10 simulated s"), (6, None, "Failure time"),
    (7, -1, "Seed: allowed a whole number 0 to 2147483647"), (7, 1.5, "Seed: allowed"),
    (8, 0, "Load: allowed 0.1 to 2, a fraction of the region's capacity (1 = all of it)"), (8, 2.5, "Load: allowed"),
    (8, "most", "Load: allowed"), (8, None, "Load: allowed"), (8, float("nan"), "Load: allowed"),
    # the inter-supernode link failure (GOOD[9:] = LINK's ends, time and duration)
    (9, "2", "Link failure: allowed no link failure or two different supernodes 0 to 1"),
    (9, "-1", "Link failure: allowed no link failure or two different supernodes 0 to 1"),
    (9, {"x": 1}, "Link failure: allowed no link failure or two different supernodes"),
    (10, "0", "Link failure: allowed no link failure or two different supernodes 0 to 1"),      # 0 - 0: no link
    (10, "5", "Link failure: allowed no link failure or two different supernodes 0 to 1"),
    (10, None, "Link failure: allowed no link failure or two different supernodes"),
    (11, 10, "Link failure time: allowed 0 to less than the 10 simulated s of arrivals"),
    (11, -0.5, "Link failure time: allowed 0 to less than the 10 simulated s"), (11, None, "Link failure time"),
    (11, "soon", "Link failure time"),
    (12, -1, "Link down for: allowed empty (to the end of the run) or simulated seconds above 0"),
    (12, 0, "Link down for: allowed empty"), (12, "long", "Link down for: allowed empty"),
    (12, float("inf"), "Link down for: allowed empty"),
])
def test_bad_form_values_get_one_line_naming_what_is_allowed(R, idle_pool, i, bad, words):
    args = list(GOOD)
    if i >= 9:
        args[9:] = LINK
    args[i] = bad
    job, msg, cls, tick = R.on_start(1, *args, "a" * 32)
    assert job is no_update and tick is no_update and cls == "ctl-msg msg-error"
    assert words in msg and "\n" not in msg and "Traceback" not in msg, msg
    assert idle_pool.counts()["queued"] == 0


def test_a_link_failure_in_a_region_of_one_supernode_is_refused(R, idle_pool, monkeypatch):
    solo = R.region("cm384-pair").resized(1)
    monkeypatch.setattr(R, "names", lambda: ("cm384-pair", solo.name))
    monkeypatch.setattr(R, "region", lambda n: solo if n == solo.name else pagejob.region(n))
    assert R.link_options(solo.name) == ([{"label": "no link failure", "value": "none"}],
                                         [{"label": "supernode 0", "value": "0"}])
    job, msg, cls, _t = R.on_start(1, solo.name, *GOOD[1:5], "none", 5, 0, 0.9, *LINK, "a" * 32)
    assert job is no_update and cls == "ctl-msg msg-error"
    assert msg == f"Link failure: allowed no link failure only, region {solo.name} has one supernode"
    assert idle_pool.counts()["queued"] == 0


def test_the_job_receives_the_link_fault_as_the_runners(R, idle_pool):
    for link, fault in ((LINK, "link:0-1@3+4"), (("1", "0", 2.5, None), "link:1-0@2.5"),
                        (("0", "1", "0", ""), "link:0-1@0"), (("0", "1", 9.999999999, 1e-7), "link:0-1@9.999999999+0.0000001")):
        job, msg, cls, _t = R.on_start(1, *GOOD[:9], *link, "g" * 32)
        assert cls == "ctl-msg msg-ok", msg
        assert idle_pool._jobs[job].args[5] == ("supernode:1@5", fault)
        assert R.on_cancel(1, job, "g" * 32)[1] == "ctl-msg msg-ok"
    job, *_ = R.on_start(1, *GOOD[:5], "none", None, 0, 0.9, *LINK, "g" * 32)       # the link alone
    assert idle_pool._jobs[job].args[5] == ("link:0-1@3+4",)
    # a link fault adds nothing to the estimate (measured: the docs' Region page section)
    assert idle_pool.view(job, jobform.viewer("g" * 32))["cost_s"] == pytest.approx(
        pagejob.cost_s("cm384-pair", 10, 1), abs=0.05)


def test_a_run_with_a_link_failure_reports_it_and_loses_nothing(R, link_report, dash_app):
    cut, whole = link_report
    assert cut["link_faults"] == [{"link": [0, 1], "at_s": 2.5, "for_s": 4.0, "down_s": 3.0, "up_s": 7.0}]
    assert whole["link_faults"] == [] and cut["supernodes"][1]["failed_at_s"] == 8.0       # both faults ran
    assert 0 < cut["regional"]["fetch"]["requests"] < whole["regional"]["fetch"]["requests"]   # none while down
    for rep in link_report:
        assert rep["regional"]["requests"]["lost"] == 0 and rep["regional"]["requests"]["in_flight"] == 0
    job = {"state": "done", "done": 10, "total": 10, "result": cut}
    with dash_app.server.test_request_context("/"):
        out = R.progress_view(job)
        links = _find(html.Div(out[3]), "rg-links")
        texts = _texts(links, [])
    assert out[5] == "Region run done: 2 supernodes, 0 requests lost."
    f = cut["regional"]["fetch"]
    assert texts[0] == ("Link failure: supernode 0 – supernode 1 down at 3 s, up again at 7 s (asked: at 2.5 s for "
                        "4 s; the router applies faults at window edges)")
    assert texts[1].startswith(f"Inter-supernode links, all together (the region model keeps no per-link figures): "
                               f"{f['requests']:,} prefix fetches, {f['blocks']:,} blocks, {f['bytes'] / 1e9:,.2f} GB;")
    assert f"mean {R.components.fmt(f['mean_delay_ms'])} ms" in texts[1] and "each link 400 Gbps" in texts[1]
    assert len(texts) == 2
    # to the end of the arrivals; cache reuse off says the link changes nothing; no link, no fetch: no lines
    with dash_app.server.test_request_context("/"):
        rest = {"link": [1, 0], "at_s": 2.5, "for_s": None, "down_s": 3.0, "up_s": None}
        late = {"link": [0, 1], "at_s": 2.0, "for_s": 7.5, "down_s": 2.0, "up_s": None}
        off = _texts(regionreport.link_lines({**cut, "cache_reuse": "off", "link_faults": [rest, late]}), [])
        assert regionreport.link_lines({**cut, "cache_reuse": "off", "link_faults": []}) == []
    assert off == ["Link failure: supernode 1 – supernode 0 down at 3 s to the end of the arrivals (asked: at 2.5 s, "
                   "for the rest of the run; the router applies faults at window edges)",
                   "Link failure: supernode 0 – supernode 1 down at 2 s to the end of the arrivals (asked: at 2 s for "
                   "7.5 s, but no window edge was left before the arrivals ended to bring it up; the router applies "
                   "faults at window edges)",
                   "Cache reuse is off: nothing crosses the inter-supernode links, so the link failure changes no "
                   "figure of this run."]


def test_a_run_is_a_job_of_the_pool_costed_by_its_size(R, idle_pool, monkeypatch):
    def never(*_a, **_k):
        raise AssertionError("a region ran in the web process")
    monkeypatch.setattr(pagejob, "region_job", never)         # only the job's process may call it
    job, msg, cls, tick = R.on_start(1, *GOOD, "b" * 32)
    assert cls == "ctl-msg msg-ok" and tick is False and "queued" in msg
    view = idle_pool.view(job, jobform.viewer("b" * 32))
    assert view["state"] == "queued" and view["total"] == 10
    assert view["cost_s"] == pytest.approx(pagejob.cost_s("cm384-pair", 10, 1), abs=0.05)
    j = idle_pool._jobs[job]
    assert j.fn is never and j.args == ("cm384-pair", 10.0, "least-load", "off", 1.0, ("supernode:1@5",), 0, 0.9)
    # one run per browser: a second one is refused, naming the limit; another browser's cancel does nothing
    job2, msg, cls, _t = R.on_start(1, *GOOD, "b" * 32)
    assert job2 is no_update and "a job of yours is still queued or running" in msg
    assert R.on_cancel(1, job, "c" * 32)[1] == "ctl-msg msg-error"
    assert R.on_cancel(1, job, "b" * 32) == ("Region run cancelled.", "ctl-msg msg-ok")
    # no failure: no fault reaches the job
    job3, *_ = R.on_start(1, *GOOD[:5], "none", None, 3, 1.5, *GOOD[9:], "b" * 32)
    assert idle_pool._jobs[job3].args[5:] == ((), 3, 1.5)
    assert idle_pool.view(job3, jobform.viewer("b" * 32))["cost_s"] == pytest.approx(
        pagejob.cost_s("cm384-pair", 10, 1, 1.5), abs=0.05)


def test_a_run_past_the_cpu_budget_is_refused_before_it_starts(R, monkeypatch):
    pool = _pool(monkeypatch, max_cost_s=5.0)
    assert pagejob.cost_s("cm384-quad", 120, 0.1) > 5.0 > pagejob.cost_s("cm384-pair", 5, 1)
    job, msg, cls, _t = R.on_start(1, "cm384-quad", "least-load", "off", 120, 0.1, "none", 0, 0, 0.9, *GOOD[9:], "d" * 32)
    assert job is no_update and "CPU-seconds (allowed at most 5)" in msg
    assert pool.counts()["queued"] == 0


def test_the_load_sets_the_regions_rate_and_the_runs_cost(R, report, dash_app):
    """The form starts at the scenario's load; half of it is half the arrival rate, in the report and
    in the cost estimate's requests."""
    with dash_app.server.test_request_context("/"):
        field = _find(R.layout(), "rg-load")
    assert field.value == pagejob.default_load("cm384-pair") == 0.9
    half = pagejob.region_job("cm384-pair", 10.0, "least-load", "off", 1.0, (), 0, 0.45, lambda _d: None)
    assert half["rate_rps"] == pytest.approx(report["rate_rps"] / 2, abs=1e-3)
    assert half["rate_rps"] == round(pagejob.region_rate("cm384-pair", 0.45), 3)     # the rate the cost counts
    assert half["regional"]["requests"]["arrived"] < 0.6 * report["regional"]["requests"]["arrived"]
    assert pagejob.region_rate("cm384-pair", 0.45) == pytest.approx(pagejob.region_rate("cm384-pair") / 2)
    assert pagejob.cost_s("cm384-pair", 10, 1, 2.0) > pagejob.cost_s("cm384-pair", 10, 1) > \
        pagejob.cost_s("cm384-pair", 10, 1, 0.45)


def _find(node, ident):
    """The component with id `ident` under `node` (depth first), or None."""
    if getattr(node, "id", None) == ident:
        return node
    kids = getattr(node, "children", None)
    for k in kids if isinstance(kids, (list, tuple)) else [kids] if kids is not None else []:
        if not isinstance(k, str) and (hit := _find(k, ident)) is not None:
            return hit
    return None


def test_progress_of_a_queued_and_a_running_run(R):
    view = {"state": "queued", "position": 2, "wait_s": 40, "cost_s": 12.0, "done": 0, "total": 30}
    assert R.progress_view(view)[2] == "queued: 2 in line, about 40 s of work ahead; estimated 12 CPU-s"
    run = {"state": "running", "done": 7, "total": 30, "cpu_s": 2.0, "ceiling_s": 40.0}
    value, mx, text, res, disabled, *_ = R.progress_view(run)
    assert (value, mx, disabled, res) == ("7", "30", False, no_update)
    assert text == "7 of 30 windows · 2 of at most 40 CPU-s"
    err = R.progress_view({**run, "state": "error", "message": "the job's process ended without a result"})
    assert err[5] == "Region run failed: the job's process ended without a result" and err[4] is True


def test_drill_down_reads_only_this_browsers_finished_run(R, report, idle_pool):
    viewer = jobform.viewer("e" * 32)
    idle_pool._jobs["rg-x"] = jobs.Job("rg-x", "region", viewer, None, 10, 1.0, 1.0, state="done", result=report)
    assert R.on_pick("1", "rg-x", "e" * 32).children[0].children.startswith("Supernode 1: cloudmatrix-infer-paper")
    for pick, job, secret in (("1", "rg-x", "f" * 32), ("7", "rg-x", "e" * 32), ({"x": 1}, "rg-x", "e" * 32),
                              ("0", "nope", "e" * 32)):
        assert "Run a region, then choose" in R.on_pick(pick, job, secret).children
    assert R.on_click({"points": [{"customdata": 1}]}) == "1"
    assert R.on_click({"points": [{"customdata": True}]}) is no_update and R.on_click("x") is no_update
    opts, value, a_opts, a, b_opts, b = R.on_region("cm384-trio", "2", "2", "0")
    assert [o["value"] for o in opts] == ["none", "0", "1", "2"] and value == "2"
    assert [o["value"] for o in a_opts] == ["none", "0", "1", "2"] and [o["value"] for o in b_opts] == ["0", "1", "2"]
    assert (a, b) == ("2", "0")                                   # choices the new region still has are kept
    pair = R.on_region("cm384-pair", "2", "2", "2")
    assert pair[1] == "none" and (pair[3], pair[5]) == ("none", "1")
    assert R.on_region({"bad": 1}, "1", "0", "1") == ([opts[0]], "none", [a_opts[0]], "none", [], None)
