"""MaaS page: the compressed day's job (its frames replay the ledger and the moves), the form's
refusals (one line naming what is allowed, nothing queued), the budget, and the replayed day drawn."""
import pytest
from dash import no_update

from twin.cloud import maasjob
from twin.cloud.maas import load_day
from twin.live import jobs

MODELS = ["deepseek-r1", "kimi-k2", "glm-4.5", "qwen3-235b"]


@pytest.fixture(scope="module")
def M(dash_app):
    from pages import maas
    return maas


@pytest.fixture(scope="module")
def report():
    """A 60-s maas-day with Kimi K2's traffic doubled, run by the job's own function (no process)."""
    seen = []
    rep = maasjob.maas_job("maas-day", 60.0, "kimi-k2", 0, lambda done, partial: seen.append((done, partial)))
    assert [done for done, _ in seen] == list(range(1, 13))     # progress: one step a 5-s control step
    rep["partials"] = [p for _, p in seen]
    return rep


def test_the_steps_sent_while_the_day_runs_are_its_frames_and_moves(report):
    steps = report["partials"]
    assert [s["frame"] for s in steps] == report["frames"][1:]
    assert [(mv["t"], mv["from"], mv["to"]) for s in steps for mv in s["moves"]] == \
        [(mv["t"], mv["from"], mv["to"]) for mv in report["moves"]["log"]]
    assert steps[0]["models"] == MODELS and steps[0]["day_s"] == 60.0 and steps[0]["unit_npus"] == 16


def test_doubling_a_model_doubles_its_load_only_and_keeps_the_catalog_day():
    day = maasjob.day_for("maas-day", 90, "kimi-k2", 3)
    base = load_day("maas-day")
    assert day.day_s == 90 and day.seed == 3 and day.control_s == base.control_s and day.moves
    assert {m: v.load for m, v in day.models.items()} == {"deepseek-r1": 0.65, "kimi-k2": 1.3, "glm-4.5": 0.65,
                                                          "qwen3-235b": 0.65}
    assert maasjob.day_for("maas-day", 90, None, 0).models == base.models


def test_the_start_split_from_the_catalog_is_the_ledger_the_day_starts_with(report):
    owner = maasjob.start_owner(load_day("maas-day"))
    assert [o for o in owner] == ["deepseek-r1"] * 7 + ["kimi-k2"] * 7 + ["glm-4.5"] * 6 + ["qwen3-235b"] * 4
    assert [MODELS[o] if o >= 0 else None for o in report["frames"][0]["owner"]] == owner


def test_the_frames_replay_the_moves_and_end_on_the_reported_split(report):
    frames, log = report["frames"], report["moves"]["log"]
    assert len(frames) == 13 and [f["t"] for f in frames] == [5.0 * i for i in range(13)]
    assert report["conserved"] and report["requests"]["lost"] == 0 and report["moves"]["count"] == len(log) >= 1
    npus = lambda f, m: sum(o == MODELS.index(m) for o in f["owner"]) * 16
    assert {m: npus(frames[-1], m) for m in MODELS} == {m: r["npus"]["end"] for m, r in report["models"].items()}
    for f, g in zip(frames, frames[1:]):          # the ledger changes only where a move landed in between
        changed = {MODELS[o] for a, b in zip(f["owner"], g["owner"]) if a != b for o in (a, b) if o >= 0}
        movers = {m for mv in log if f["t"] - 5 < mv["t"] <= g["t"] for m in (mv["from"], mv["to"]) if m}
        assert changed <= movers | {mv["to"] for mv in log if mv["t"] <= f["t"]}
    assert sum(sum(f["completed"].values()) for f in frames) <= report["requests"]["completed"]
    assert report["models"]["kimi-k2"]["label"] == "prediction" and report["models"]["deepseek-r1"]["label"] == \
        "calibration"
    assert report["doubled"] == "kimi-k2" and report["models"]["kimi-k2"]["tpot_slo_ms"] == 50


@pytest.mark.parametrize("form,msg", [
    (("maas-week", 120, "none", 0), "Day: allowed maas-day, maas-day-static"),
    (("maas-day", 59, "none", 0), "Day length: allowed 60 to 300 simulated s"),
    (("maas-day", "1e9", "none", 0), "Day length: allowed 60 to 300 simulated s"),
    (("maas-day", None, "none", 0), "Day length: allowed 60 to 300 simulated s"),
    (("maas-day", 120, "gpt-4", 0), "Traffic doubles for: allowed none or one of deepseek-r1, kimi-k2, glm-4.5, "
                                    "qwen3-235b"),
    (("maas-day", 120, ["kimi-k2"], 0), "Traffic doubles for: allowed none or one of"),
    (("maas-day", 120, "none", 1.5), "Seed: allowed a whole number 0 to"),
    (("maas-day", 120, "none", -1), "Seed: allowed a whole number 0 to"),
])
def test_a_bad_form_gets_one_line_and_queues_nothing(M, idle_pool, form, msg):
    job, text, cls, tick = M.on_start(1, *form, "s" * 32)
    assert job is no_update and tick is no_update and cls == "ctl-msg msg-error" and text.startswith(msg)
    assert idle_pool.counts()["queued"] == 0


def test_a_good_form_queues_one_bounded_job_per_browser(M, idle_pool):
    job, text, cls, tick = M.on_start(1, "maas-day", 300, "deepseek-r1", 0, "s" * 32)
    assert cls == "ctl-msg msg-ok" and tick is False and text.startswith("MaaS day queued")
    view = idle_pool.view(job, M.jobform.viewer("s" * 32))
    assert view["state"] == "queued" and view["total"] == 60 and 0 < view["cost_s"] <= jobs.MAX_JOB_CPU_S
    assert M.on_start(1, "maas-day", 120, "none", 0, "s" * 32)[1].startswith("a job of yours is still queued")


def test_the_map_and_the_moves_follow_a_running_day(M, report):
    steps = report["partials"]
    at = next(i for i, s in enumerate(steps) if s["moves"])           # the step of the first move
    job = {"state": "running", "done": at + 1, "total": 12, "cpu_s": 1.0, "ceiling_s": 60.0, "partial": steps[:at + 1]}
    out = M.progress_view(job)
    fig, when, moves = out[11:]
    f = steps[at]["frame"]
    tiles = [t.split("<br>")[0] for t in fig["data"][-1]["text"]]
    assert tiles == [MODELS[o] if o >= 0 else "free" for o in f["owner"]]
    assert when.startswith("running, the day so far · ") and f"simulated {f['t']:g} s of 60" in when
    rows = moves.children.children[1].children
    assert len(rows) == sum(len(s["moves"]) for s in steps[:at + 1]) >= 1
    assert M.progress_view({**job, "partial": []})[11:] == (no_update,) * 3     # nothing sent yet: as it was


def test_the_finished_day_is_drawn_with_its_table_map_and_moves(M, report):
    job = {"state": "done", "done": 12, "total": 12, "result": report}
    out = M.progress_view(job)
    assert out[11:] == (no_update,) * 3                               # the slider's moment draws the map
    assert out[3] is True and out[4] == f"MaaS day done: {report['moves']['count']} moves, 0 requests lost."
    table = out[6][2].children
    assert [r.children[0].children for r in table.children[1].children] == MODELS
    assert out[7] == 12 and out[9] == 12 and out[10] is False      # the slider: at the day's end, enabled
    fig, when, moves, day = M.moment(report, 12)
    tiles = [t.split("<br>")[0] for t in fig["data"][-1]["text"]]
    assert {m: tiles.count(m) * 16 for m in MODELS} == {m: r["npus"]["end"] for m, r in report["models"].items()}
    assert [s["fillcolor"] for s in fig["layout"]["shapes"]] == [M.COLOURS[MODELS.index(m)] for m in tiles]
    assert [t["name"] for t in fig["data"][:4]] == MODELS          # the legend: one key a model
    assert when.startswith("24:00 on the day's clock (simulated 60 s of 60)")
    assert len(moves.children.children[1].children) == report["moves"]["count"]
    first = M.moment(report, 0)[2]
    assert first.children.children == "No move yet at this moment of the day."
    assert [t["name"] for t in day["data"][::2]] == MODELS
