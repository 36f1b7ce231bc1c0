"""The Compare page makes its case (issue 23 B): each bar panel has a title that says which way is
better, system names are never cut (the axes grow to fit them), the workload and the price and
power inputs are on the page, and one sentence says what the numbers support, from the data."""
import copy
import importlib

import pytest


@pytest.fixture(scope="module")
def cmp(dash_app):
    return importlib.import_module("pages.compare")     # after the app exists (register_page)


@pytest.fixture(scope="module")
def data(cmp):
    return cmp._compare()


def _text(node) -> str:
    """Every string under a Dash component, joined."""
    if isinstance(node, str):
        return node
    if isinstance(node, (list, tuple)):
        return " ".join(_text(c) for c in node)
    kids = getattr(node, "children", None)
    return _text(kids) if kids is not None else ""


def test_each_bar_panel_is_titled_with_which_way_is_better_and_names_fit(cmp, data):
    lay = cmp.bars_figure(data)["layout"]
    titles = [a["text"] for a in lay["annotations"]]
    assert titles == ["<b>tokens/s per TFLOPS</b> (higher is better)", "<b>tokens/s per kW</b> (higher is better)",
                      "<b>$ per million output tokens</b> (lower is better)"]
    axes = [v for k, v in lay.items() if k.startswith(("xaxis", "yaxis"))]
    assert len(axes) == 6 and all(ax["automargin"] for ax in axes)
    assert not any("title" in ax for ax in axes)                 # panel titles, no axis titles to collide
    domains = sorted(lay[k]["domain"] for k in lay if k.startswith("yaxis"))
    assert all(lo[1] < hi[0] for lo, hi in zip(domains, domains[1:]))   # panels do not overlap


def test_the_workload_and_the_price_and_power_inputs_are_on_the_page(cmp, data):
    page = _text(cmp.layout())
    assert "Workload: deepseek-r1 decode, 4,096-token prompt + 256 output tokens (mean KV 4,224 tokens), " \
           "TPOT SLO 50 ms." in page
    inputs = _text(cmp.inputs_table(data))
    for s in data["systems"]:
        assert s["usd_per_chip_hour_source"] in inputs and f"{s['usd_per_chip_hour']:.2f}" in inputs
        assert s["chip_power_source"] in inputs


def test_the_sentence_of_what_the_numbers_support_follows_the_data(cmp, data):
    said = cmp.what_it_supports(data)
    assert said.startswith("On one cost basis (TCO: capex over the service life plus power at one boundary x PUE) "
                           "gb200-nvl72-r1 costs least per million output tokens ($0.0462 against $0.0813 on "
                           "hgx-b200-r1)")
    assert "hgx-b200-r1 $1.87, capex an assumption: at $1.06 hgx-b200-r1 would tie" in said
    assert said.endswith("where gb200-nvl72-r1 leads per chip and gb200-nvl72-r1 per kW; on rental prices "
                         "cloudmatrix-infer-paper is cheapest.")
    cheaper = copy.deepcopy(data)
    cm = next(s for s in cheaper["systems"] if s["deployment"] == "cloudmatrix-infer-paper")
    cm["usd_per_million_tokens"] = 0.01
    assert "PUE) cloudmatrix-infer-paper costs least" in cmp.what_it_supports(cheaper)


def test_every_figure_is_drawn_with_its_band_and_label(cmp, data):
    """Error bars of +-band% on every bar and operating point, the label beside the value."""
    fig = cmp.bars_figure(data)
    for bar, (m, *_rest) in zip(fig["data"], cmp.METRICS):
        for s, err, text in zip(data["systems"], bar["error_x"]["array"], bar["text"]):
            b = s["bands"][m]
            assert err == pytest.approx(s[m] * b["band_pct"] / 100)
            assert text.endswith(f"±{b['band_pct']:g}% · {b['label']}")
    sglang = next(s for s in data["systems"] if s["deployment"] == "sglang-h100")
    # SGLang's decode row is batch 128 at 4K KV: Compare's operating point is not, so a prediction;
    # its prefill (16K tokens, 4K prompts, default placement) is the validation row's condition
    assert sglang["bands"]["tokens_per_s_per_tflops"]["label"] == "prediction"
    assert sglang["bands"]["prefill_tokens_per_s_per_chip"]["label"] == "validation"
    points = [t for t in cmp.curves_figure(data)["data"] if t["mode"] == "markers"]
    assert len(points) == len(data["systems"])
    for p, s in zip(points, data["systems"]):
        b = s["bands"]["tokens_per_s_per_chip"]
        assert p["error_y"]["array"] == [pytest.approx(s["tokens_per_s_per_chip"] * b["band_pct"] / 100)]
    assert cmp.band_text({"band_pct": 3.2, "label": "prediction"}) == "±3.2% · prediction"
    assert cmp.band_text({"band_pct": None, "label": "calibration"}) == "calibration"
    assert "±" in _text(cmp.table(data))
