"""The Cloud page's callbacks called as functions: a short day runs, prices re-price it, and bad or
forged values get a one-line message (never a traceback)."""
import importlib

import pytest
from dash import no_update

KNOBS = (0.6, 0.8, 0.99, 0, 24)
PRICES = (8e6, 4, 0.1, 1.3, 0.5)


@pytest.fixture(scope="module")
def cloud(dash_app):
    return importlib.import_module("pages.cloud")      # after the app exists (register_page)


@pytest.fixture(scope="module")
def run(cloud):
    data, msg, cls = cloud.on_run(1, 30, *KNOBS)
    assert cls == "ctl-msg msg-ok" and msg == "Simulated a 30 s day under 3 policies."
    return data


def _cells(table) -> dict:
    rows = table.children[1:]
    return {r.children[0].children: [c.children for c in r.children[1:]] for r in rows}


def test_a_day_runs_and_is_drawn(cloud, run):
    fig, table, *_ = cloud.on_show(run, "copool", list(PRICES))
    names = [t["name"] for t in fig["data"]]
    assert names[:4] == ["prefill NPUs", "decode NPUs", "training NPUs", "switching"]
    assert set(_cells(table)) == {"copool", "dedicated", "inference-only"}
    assert _cells(table)["inference-only"][4] == "0"         # no training steps


def test_prices_reprice_without_a_rerun(cloud, run):
    cheap = _cells(cloud.on_show(run, "copool", [4e6, 4, 0.1, 1.3, 0.5])[1])
    dear = _cells(cloud.on_show(run, "copool", [8e6, 4, 0.1, 1.3, 0.5])[1])
    assert float(dear["inference-only"][8]) > float(cheap["inference-only"][8])


@pytest.mark.parametrize("day,knobs,message", [
    (5, KNOBS, "day length = '5': allowed 30 to 600"), ("x", KNOBS, "day length = 'x'"),
    (30, ("abc", 0.8, 0.99, 0, 24), "lend_below = 'abc': not a number"),
    (30, (0.6, 0.8, 0.99, 3, 3), "train_to_h = 3.0: must differ from train_from_h"),
    (30, (0.6, 9.0, 0.99, 0, 24), "copool.reclaim_above = 9.0"), (30, ([1], 0.8, 0.99, 0, 24), "lend_below")])
def test_bad_run_inputs_get_a_message(cloud, day, knobs, message):
    data, msg, cls = cloud.on_run(1, day, *knobs)
    assert data is no_update and cls == "ctl-msg msg-error" and message in msg


def test_bad_prices_and_forged_stores(cloud, run):
    out = cloud.on_show(run, "copool", [8e6, 4, 0.1, 0.5, 0.5])
    assert out[3] == "ctl-msg msg-error" and "prices.pue = 0.5" in out[2]
    for forged in (None, "junk", {"key": 5}, {"key": "nope"}):
        assert cloud.on_show(forged, "copool", list(PRICES))[1].children == "Run the day to compare the policies."
    fig = cloud.on_show(run, "<script>", list(PRICES))[0]                  # unknown policy: the co-pool day
    assert fig["layout"]["title"]["text"].startswith("copool:")
