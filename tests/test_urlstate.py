"""Shareable state (issue 12): a link's query brings the viewed twin to its scenario, deployment,
seed, speed, load and demo through the control bar's commands; a bad value gives a message; "copy
link" writes the current state back."""
from __future__ import annotations

from dash import no_update

from twin.ui import runcontrols
from twin.live import session
from twin.ui import urlstate

from test_callbacks import triggered, wait_until

SECRET = "A" * 32


def _open(dash_app, search, done=None, choice="shared", token=None):
    """on_url as Dash calls it: (message, class, query applied, twin viewed, confirm style, pending link)."""
    return triggered(runcontrols.on_url, "url.search", search, done, choice, token, "v1", SECRET)


def test_parse_keeps_the_run_fields_only():
    assert urlstate.parse("?scenario=paper-decode&speed=50&lang=zh&x=1") == {"scenario": "paper-decode", "speed": "50"}
    assert urlstate.parse("") == {} and urlstate.parse(None) == {} and urlstate.parse(["?seed=1"]) == {}


def test_a_link_opens_in_a_private_sandbox_and_leaves_the_shared_twin(dash_app, twin_registry):
    shared = twin_registry.shared()
    search = "?scenario=bursty-chat&seed=7&speed=50&load=120&lang=zh"
    msg, cls, done, key, _style, _pending = _open(dash_app, search)
    assert "msg-ok" in cls and done == search and key.startswith("sb-"), msg
    assert "From the link: " in msg and "scenario bursty-chat, seed 7, load 120% of capacity" in msg
    assert msg.endswith("— applied to your sandbox")
    tw = twin_registry.get(key)
    assert tw.owner == session.client_id(SECRET, None)
    assert wait_until(lambda: tw.params.scenario == "bursty-chat")
    assert (tw.params.scenario, tw.params.seed, tw.params.load, tw.speed) == ("bursty-chat", 7, 1.2, 50.0)
    assert wait_until(lambda: abs(tw._engine.source.rate - 1.2 * tw._engine.capacity_rps()) < 1e-9)
    assert (shared.run, shared.params.scenario, shared.speed) == (0, "default", 1.0)      # nobody else moved
    assert _open(dash_app, search, done, choice=key) == (no_update,) * 6
    run = tw.run
    msg, *_ = _open(dash_app, "?scenario=bursty-chat&seed=7&speed=20", choice=key)   # in its sandbox: no new one
    assert msg.startswith("From the link: speed 20x") and tw.run == run and twin_registry.sandboxes() == [key]


def test_a_link_to_what_the_shared_twin_runs_opens_nothing(dash_app, twin_registry):
    twin_registry.shared()
    assert _open(dash_app, "?scenario=default&seed=0&speed=1")[1:] == (no_update, "?scenario=default&seed=0&speed=1",
                                                                       no_update, no_update, no_update)
    assert twin_registry.sandboxes() == []


def test_a_link_with_no_sandbox_free_applies_nothing(dash_app, twin_registry):
    shared = twin_registry.shared()
    for who in ("other-1", "other-2"):                 # the fixture allows 2 sandboxes in all
        twin_registry.open_sandbox(client=who)
    msg, cls, done, key, _style, _pending = _open(dash_app, "?scenario=bursty-chat&seed=7")
    assert "msg-error" in cls and key is no_update and done == "?scenario=bursty-chat&seed=7"
    assert msg.startswith("Link not applied: no private sandbox could open for it") and "private sandboxes are in use" in msg
    assert (shared.run, shared.params.scenario) == (0, "default") and len(twin_registry.sandboxes()) == 2


def test_a_link_changes_the_shared_twin_only_when_the_instructor_confirms(dash_app):
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, token="s3cret")
    try:
        shared = reg.shared()
        token = {"credential": reg.unlock("s3cret", "c1", None), "ok": True}
        search = "?scenario=bursty-chat&seed=7&speed=50"
        msg, cls, done, key, style, pending = _open(dash_app, search, token=token)
        assert key is no_update and pending == search and style == {} and done == search
        assert "change the shared twin for everyone" in msg and "scenario bursty-chat" in msg
        assert reg.sandboxes() == [] and shared.run == 0 and shared.speed == 1.0
        msg, cls, style, pending = triggered(runcontrols.on_url_confirm, "ctl-url-apply.n_clicks", 1, search, token,
                                             "v1", SECRET)
        assert "msg-ok" in cls and msg.endswith("— applied to the shared twin") and style == {"display": "none"}
        assert wait_until(lambda: shared.run == 1) and shared.params.scenario == "bursty-chat" and shared.speed == 50.0
        msg, cls, *_ = triggered(runcontrols.on_url_confirm, "ctl-url-apply.n_clicks", 2, search, None, "v1", SECRET)
        assert "msg-error" in cls and "locked by the instructor" in msg          # no credential: refused
    finally:
        reg.shutdown()


def test_a_bad_link_value_gives_a_message_and_leaves_the_twin(dash_app, twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "mooncake-live"})      # a trace scenario: a load in a link is refused
    assert wait_until(lambda: tw.run == 1)
    for search, why in (("?scenario=no-such", "scenario = 'no-such': unknown (allowed: default,"),
                        ("?speed=9000", "speed = '9000': allowed 1 to 1000"),
                        ("?load=lots", "load = 'lots': allowed a number"),
                        ("?demo=/etc/passwd", "not a demo"),
                        ("?load=90", "trace replays its own arrival times")):
        msg, cls, *_ = _open(dash_app, search)
        assert "msg-error" in cls and msg.startswith("Link not fully applied: ") and why in msg, msg
    assert tw.run == 1 and tw.speed == 1.0 and twin_registry.sandboxes() == []   # a refused link keeps no sandbox


def test_copy_link_captures_the_current_run(dash_app, twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "bursty-chat", "seed": 3})
    assert wait_until(lambda: tw.run == 1)
    tw.control("load", 0.75)
    tw.control("speed", 20)
    url = triggered(runcontrols.on_copy_link, "ctl-link.n_clicks", 1, "http://h:8050/traffic?x=1", "/traffic",
                    "shared")
    assert url == "http://h:8050/traffic?scenario=bursty-chat&seed=3&speed=20&load=75&lang=en"
    assert urlstate.parse(url.split("?", 1)[1]) == {"scenario": "bursty-chat", "seed": "3", "speed": "20", "load": "75"}


def test_every_chart_exports_png_from_its_toolbar():
    from twin.ui import components
    wrap = components.graph("tr-matrix", {})                   # the chart and its (i)
    cfg = wrap.children[0].config
    assert cfg["modeBarButtons"] == [["toImage"]] and cfg["displayModeBar"] == "hover"
    assert cfg["toImageButtonOptions"] == {"format": "png", "filename": "tr-matrix", "scale": 2}
