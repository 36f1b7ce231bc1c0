"""Shareable state (issue 12): a link's query brings the viewed twin to its scenario, deployment,
seed, speed, load and demo through the control bar's commands; a bad value gives a message; "copy
link" writes the current state back."""
from __future__ import annotations

from dash import no_update

from twin.ui import urlstate as U

from test_callbacks import triggered, wait_until


def _open(dash_app, search, done=None):
    return triggered(dash_app.on_url, "url.search", search, done, "shared", None, "v1", "A" * 32)


def test_parse_keeps_the_run_fields_only():
    assert U.parse("?scenario=paper-decode&speed=50&lang=zh&x=1") == {"scenario": "paper-decode", "speed": "50"}
    assert U.parse("") == {} and U.parse(None) == {} and U.parse(["?seed=1"]) == {}


def test_a_link_sets_scenario_speed_and_load_through_the_control_path(dash_app, twin_registry):
    tw = twin_registry.shared()
    msg, cls, done = _open(dash_app, "?scenario=bursty-chat&seed=7&speed=50&load=120&lang=zh")
    assert "msg-ok" in cls and done == "?scenario=bursty-chat&seed=7&speed=50&load=120&lang=zh", msg
    assert msg.startswith("From the link: reset: scenario bursty-chat, seed 7, load 120% of capacity; speed 50x")
    assert wait_until(lambda: tw.run == 1)
    assert (tw.params.scenario, tw.params.seed, tw.params.load, tw.speed) == ("bursty-chat", 7, 1.2, 50.0)
    assert wait_until(lambda: abs(tw._engine.source.rate - 1.2 * tw._engine.capacity_rps()) < 1e-9)
    assert _open(dash_app, "?scenario=bursty-chat&seed=7&speed=50&load=120&lang=zh", done) == (no_update,) * 3
    msg, _, _ = _open(dash_app, "?scenario=bursty-chat&seed=7&speed=20")      # same run: no restart
    assert msg.startswith("From the link: speed 20x") and tw.run == 1


def test_a_bad_link_value_gives_a_message_and_leaves_the_twin(dash_app, twin_registry):
    tw = twin_registry.shared()
    for search, why in (("?scenario=no-such", "scenario = 'no-such': unknown (allowed: default,"),
                        ("?speed=9000", "speed = '9000': allowed 1 to 1000"),
                        ("?load=lots", "load = 'lots': allowed a number"),
                        ("?demo=/etc/passwd", "not a demo"),
                        ("?load=90", "trace replays its own arrival times")):
        msg, cls, _ = _open(dash_app, search)
        assert "msg-error" in cls and msg.startswith("Link not fully applied: ") and why in msg, msg
    assert tw.run == 0 and tw.speed == 1.0


def test_copy_link_captures_the_current_run(dash_app, twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "bursty-chat", "seed": 3})
    assert wait_until(lambda: tw.run == 1)
    tw.control("load", 0.75)
    tw.control("speed", 20)
    url = triggered(dash_app.on_copy_link, "ctl-link.n_clicks", 1, "http://h:8050/traffic?x=1", "/traffic",
                    "shared")
    assert url == "http://h:8050/traffic?scenario=bursty-chat&seed=3&speed=20&load=75&lang=en"
    assert U.parse(url.split("?", 1)[1]) == {"scenario": "bursty-chat", "seed": "3", "speed": "20", "load": "75"}


def test_every_chart_exports_png_from_its_toolbar():
    from twin.ui import components as C
    wrap = C.graph("tr-matrix", {})                   # the chart and its (i)
    cfg = wrap.children[0].config
    assert cfg["modeBarButtons"] == [["toImage"]] and cfg["displayModeBar"] == "hover"
    assert cfg["toImageButtonOptions"] == {"format": "png", "filename": "tr-matrix", "scale": 2}
