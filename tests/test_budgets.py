"""The leak and exhaustion routes of issue 8 (dashboard side), each closed and tested here: no
browser value reaches the file system, uploads are bounded and parsed in memory, and every
viewer-controlled resource has a budget that answers with a message."""
from __future__ import annotations

import base64
import builtins
import io
import os
import time

import pytest
from dash import no_update

from twin.ui import runcontrols
from twin.live import session
from twin.live import tracestore
from twin.live.budget import RateLimit

from test_callbacks import answered, failures, pages, pm_id, triggered, wait_until  # noqa: F401 (fixtures)

SECRET_A, SECRET_B = "A" * 32, "B" * 32


@pytest.fixture
def reg(dash_app, monkeypatch):
    monkeypatch.setenv("TWIN_INSTRUCTOR_TOKEN", "tok-in-the-environment-9f3a")
    r = session.configure(wall_dt=0.05, max_sandboxes=3, ttl_s=600, token="")     # unlocked, token in env
    yield r
    r.shutdown()


def _reset(dash_app, trace, secret=SECRET_A):
    return answered(triggered(runcontrols.on_control, "ctl-reset.n_clicks", 0, [0] * 6, None, [0] * 7, None, 1,
                              "shared", None, "v1", "default", "", trace, 0, secret), "ctl-ticket")


# ---- 1. no path from a browser reaches the file system ------------------------------------------

@pytest.mark.parametrize("path", ["/proc/self/environ", "/etc/passwd", "../../etc/passwd", "/dev/zero",
                                  "twin/traces/mooncake/conversation_trace.jsonl", "/etc/shadow"])
def test_a_trace_path_from_the_browser_is_refused_naming_the_allowed_traces(dash_app, reg, path, monkeypatch):
    tw = reg.shared()
    opened = []
    real_open, real_os_open = io.open, os.open
    with monkeypatch.context() as m:
        for mod, name, real in ((builtins, "open", real_open), (io, "open", real_open), (os, "open", real_os_open)):
            m.setattr(mod, name, lambda f, *a, real=real, **k: opened.append(str(f)) or real(f, *a, **k))
        msg, cls = _reset(dash_app, path)
    assert [f for f in opened if f.endswith(path.lstrip("./"))] == []     # never opened (/dev/zero would not end)
    assert "msg-error" in cls and "not a trace this dashboard offers" in msg
    assert "mooncake_conversation" in msg and "azure_conv" in msg and "upload" in msg
    for leak in ("tok-in-the-environment", "root:", "TWIN_", "PATH=", "\\x00"):
        assert leak not in msg
    assert tw.run == 0 and len(tw.actions()) == 1             # only "shared twin started"


def test_named_and_operator_registered_traces_work_and_paths_stay_server_side(dash_app, reg, tmp_path,
                                                                          monkeypatch):
    src = tracestore.TRACES["mooncake_conversation"]
    from twin.workload import default_trace_path
    lines = default_trace_path("mooncake_conversation").read_text().splitlines()[:50]
    mine = tmp_path / "ops-trace.jsonl"
    mine.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv(tracestore.ENV, f"ops_trace={mine}, bad entry, azure_conv=/etc/passwd")
    assert tracestore.names() == ["mooncake_conversation", "azure_conv", "ops_trace"]
    tw = reg.shared()
    msg, cls = _reset(dash_app, "ops_trace")
    assert "msg-ok" in cls and "trace ops_trace" in msg and str(mine) not in msg
    assert wait_until(lambda: tw.run == 1)
    assert tw.status()["trace"] == "ops_trace" and str(tmp_path) not in str(tw.status())
    assert wait_until(lambda: tw.snapshot.sim_time > 0)
    assert src.startswith("mooncake/")
    sb = reg.open_sandbox(client="c1", addr="a")                # a sandbox copies the name, not the path
    assert sb.params.trace == "ops_trace" and str(tmp_path) not in str(sb.status())
    mine.write_text("SECRET-LINE,do not show\n")               # the operator's file goes bad
    msg, cls = _reset(dash_app, "ops_trace")
    assert "msg-error" in cls and "server's file for it cannot be used" in msg and "SECRET" not in msg


def _data_url(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_an_uploaded_trace_is_parsed_in_memory_and_replayed(dash_app, reg):
    from twin.workload import default_trace_path
    text = "\n".join(default_trace_path("mooncake_conversation").read_text().splitlines()[:200]) + "\n"
    opts, value, contents, msg, cls = triggered(runcontrols.on_upload, "ctl-trace-upload.contents",
                                                _data_url(text), "../../my trace.jsonl", [], SECRET_A)
    assert "msg-ok" in cls and "200 requests" in msg and contents is None
    assert value.startswith("upload:") and opts[-1] == {"label": "my_trace.jsonl (uploaded)", "value": value}
    tw = reg.shared()
    msg, cls = _reset(dash_app, value)
    assert "msg-ok" in cls and "trace my_trace.jsonl (uploaded)" in msg
    assert wait_until(lambda: tw.run == 1 and tw.snapshot.sim_time > 0)
    assert tw._engine.source.workload.source.startswith("mooncake:my_trace.jsonl")
    assert len(tw._engine.source.workload) == 200


@pytest.mark.parametrize("contents,why", [
    (_data_url(b"\xff\xfe\x00garbage"), "not a UTF-8 text file"),
    (_data_url("hello,world\n1,2\n"), "cannot tell the trace format"),
    (_data_url('{"a": ' * 100_000 + "1" + "}" * 100_000), "nested too deeply"),
    ("no data url", "expected a file's contents"),
    (None, None),
])
def test_a_bad_upload_gets_a_one_line_message(dash_app, reg, contents, why):
    out = triggered(runcontrols.on_upload, "ctl-trace-upload.contents", contents, "x.jsonl", [], SECRET_A)
    if why is None:
        assert out == (no_update,) * 5
        return
    assert "msg-error" in out[4] and why in out[3] and "\n" not in out[3]


def test_an_oversized_upload_is_refused_before_it_is_decoded(dash_app, reg, monkeypatch):
    big = "data:x;base64," + "A" * (tracestore.UPLOAD_MAX_BYTES * 4 // 3 + 8)
    decoded = []
    monkeypatch.setattr(tracestore.base64, "b64decode", lambda *a, **k: decoded.append(1) or b"")
    out = triggered(runcontrols.on_upload, "ctl-trace-upload.contents", big, "big.jsonl", [], SECRET_A)
    assert "larger than the 2 MB allowed" in out[3] and decoded == []


def test_uploads_are_kept_in_bounded_memory_and_throttled(dash_app, reg, monkeypatch):
    row = '{"timestamp": %d, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
    one = tracestore.cost(tracestore.parse_trace_text(row % 0, "t"))
    monkeypatch.setattr(tracestore, "UPLOAD_STORE_BYTES", 2 * one)
    keys = [tracestore.upload(_data_url(row % i), f"t{i}.jsonl")[0] for i in range(3)]
    assert tracestore.workload(keys[0]) is None and tracestore.workload(keys[2]) is not None
    with pytest.raises(tracestore.TraceChoiceError, match="no longer kept"):
        tracestore.check(keys[0])
    for i in range(session.UPLOADS_PER_MIN):
        assert "msg-ok" in triggered(runcontrols.on_upload, "ctl-trace-upload.contents", _data_url(row % i),
                                     "t.jsonl", [], SECRET_B)[4]
    out = triggered(runcontrols.on_upload, "ctl-trace-upload.contents", _data_url(row % 9), "t.jsonl", [], SECRET_B)
    assert "msg-error" in out[4] and f"at most {session.UPLOADS_PER_MIN} per minute" in out[3]


def test_a_forged_demo_or_fault_file_path_is_refused(dash_app, reg, failures):
    tw = reg.shared()
    msg, cls = triggered(failures.on_demo, pm_id("fl-demo", "/etc/passwd"), [1], "shared", None, "v", None)
    assert "msg-error" in cls and "demo buttons" in msg
    with pytest.raises(session.ControlError, match="not a demo"):
        tw.control("reset", {"faults": "/etc/passwd"})
    assert tw.run == 0


# ---- 2. budgets ------------------------------------------------------------------------------------

def test_sandboxes_per_client_per_address_and_in_total(reg):
    a = reg.open_sandbox(client=session.client_id(SECRET_A, "10.0.0.1"), addr="10.0.0.1")
    with pytest.raises(session.SandboxLimit, match="this browser already has 1"):
        reg.open_sandbox(client=session.client_id(SECRET_A, "10.0.0.1"), addr="10.0.0.1")
    reg.open_sandbox(client=session.client_id(SECRET_B, "10.0.0.1"), addr="10.0.0.1")
    with pytest.raises(session.SandboxLimit, match="from your network address"):     # a fresh secret, same address
        reg.open_sandbox(client=session.client_id("C" * 32, "10.0.0.1"), addr="10.0.0.1")
    reg.open_sandbox(client=session.client_id("C" * 32, "10.0.0.2"), addr="10.0.0.2")
    with pytest.raises(session.SandboxLimit, match="all 3 private sandboxes"):
        reg.open_sandbox(client=session.client_id("D" * 32, "10.0.0.3"), addr="10.0.0.3")
    assert a.owner == session.client_id(SECRET_A, "x") != session.client_id(None, "10.0.0.1") == "a-10.0.0.1"


def test_a_sandbox_id_alone_neither_controls_nor_closes_it(dash_app, reg):
    key, msg, cls = triggered(runcontrols.on_twin_choice, "ctl-sandbox.n_clicks", 1, 0, "shared", SECRET_A)
    assert key.startswith("sb-") and len(key) == 19
    tw = reg.get(key)
    stranger = session.client_id(SECRET_B, "127.0.0.1")
    with pytest.raises(session.ControlError, match="belongs to another browser"):
        tw.control("pause", client=stranger)
    with pytest.raises(session.ControlError, match="belongs to another browser"):
        reg.close(key, stranger)
    msg, cls = triggered(runcontrols.on_control, "ctl-play.n_clicks", 1, [0] * 6, None, [0] * 7, None, 0,
                            key, None, "v2", "default", "", None, 0, SECRET_B)
    assert "msg-error" in cls and "belongs to another browser" in msg and not tw.paused
    back = triggered(runcontrols.on_twin_choice, "ctl-shared.n_clicks", 0, 1, key, SECRET_B)
    assert back[0] == "shared" and key in reg.sandboxes()           # the stranger only stops viewing it
    msg, cls = triggered(runcontrols.on_control, "ctl-play.n_clicks", 1, [0] * 6, None, [0] * 7, None, 0,
                            key, None, "v1", "default", "", None, 0, SECRET_A)
    assert "msg-ok" in cls and tw.paused                            # the owner can
    triggered(runcontrols.on_twin_choice, "ctl-shared.n_clicks", 0, 1, key, SECRET_A)
    assert key not in reg.sandboxes()


def test_idle_is_measured_from_the_last_action_not_from_polls(dash_app, pages):
    """The clock is moved by hand (last_seen set back), not slept through: a loaded machine cannot
    stretch a gap between two actions past the TTL."""
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, ttl_s=60, token=None)
    try:
        sb = reg.open_sandbox(client="c1", addr="a")
        sb.last_seen -= 45                            # its last action 45 s ago
        for _ in range(3):                            # a page polling it
            pages.overview.tick(1, sb.key, None)
        assert sb.idle_s() >= 45 and sb.alive         # polls are not actions
        sb.last_seen -= 20                            # 65 s since the last action, viewed all along
        pages.overview.tick(1, sb.key, None)
        assert sb.key not in reg.sandboxes()          # freed while it was being polled
        assert wait_until(lambda: not sb.alive)       # and its thread ends
        sb2 = reg.open_sandbox(client="c1", addr="a")
        sb2.last_seen -= 45
        sb2.control("speed", 5, client="c1")          # an action keeps it alive
        sb2.last_seen -= 20
        assert reg.reap() == [] and sb2.alive and sb2.key in reg.sandboxes()
    finally:
        reg.shutdown()


def test_a_sandbox_whose_thread_is_starting_is_not_reaped(dash_app):
    # a poll's reap ran between `Twin.start` making the thread and starting it: it took the sandbox for
    # one whose thread had ended, freed it and joined the unstarted thread (RuntimeError in shell-tick)
    import threading
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, ttl_s=60, token=None)
    try:
        sb = reg.open_sandbox(client="c1", addr="a")
        running = sb._thread
        sb._thread = threading.Thread(target=lambda: None)         # made, not started
        assert reg.reap() == [] and sb.key in reg.sandboxes()
        sb._thread.start()
        sb._thread.join()                                           # started and ended: freed
        assert reg.reap() == [sb.key]
        sb._thread = running
    finally:
        reg.shutdown()


def test_faults_are_bounded_in_horizon_pending_count_and_rate(reg):
    tw = reg.shared()
    tw.control("pause")
    with pytest.raises(session.ControlError, match="allowed up to 86,400 s after now"):
        tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "at_s": 1e12})
    for i in range(session.MAX_PENDING_FAULTS):
        tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "at_s": 1000 + i}, client="c1")
    with pytest.raises(session.ControlError, match=f"{session.MAX_PENDING_FAULTS} scheduled faults are already waiting"):
        tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "at_s": 5000}, client="c2")
    for i in range(session.FAULTS_PER_MIN - session.MAX_PENDING_FAULTS):     # at once: each its own switch (the
        tw.control("fault", {"kind": "l2", "target": f"sp3/l2-{i}"}, client="c1")   # runner may strike one meanwhile)
    with pytest.raises(session.ControlError, match=f"at most {session.FAULTS_PER_MIN} per minute"):
        tw.control("fault", {"kind": "l2", "target": "sp2/l2-5"}, client="c1")
    tw.control("fault", {"kind": "l2", "target": "sp2/l2-6"}, client="c2")     # another client is not slowed


@pytest.mark.parametrize("rate,ok", [(10, True), (0.5, True), (10.01, False), (1e6, False),
                                     (float("nan"), False), ("x", False), (True, False)])
def test_random_failure_rate_is_bounded(reg, rate, ok):
    tw = reg.shared()
    if ok:
        assert "random failures on" in tw.control("random", rate)
    else:
        with pytest.raises(session.ControlError, match="allowed a number 0 <= x <= 10"):
            tw.control("random", rate)


def test_unlock_attempts_are_throttled_per_browser_and_per_address(dash_app):
    reg = session.configure(wall_dt=0.05, token="s3cret")
    try:
        def unlock(value, secret):
            return triggered(runcontrols.on_unlock, "ctl-unlock.n_clicks", 1, None, value, secret)
        for _ in range(session.UNLOCK_PER_MIN):
            assert "Wrong instructor token" in unlock("guess", SECRET_A)[1]
        tok, msg, cls = unlock("s3cret", SECRET_A)                   # even the right one waits
        assert tok is no_update and "at most 5 per minute" in msg and "msg-error" in cls
        assert unlock("s3cret", SECRET_B)[0]["ok"] is True
        for i in range(session.UNLOCK_PER_MIN_ADDRESS - session.UNLOCK_PER_MIN - 1):   # fresh secrets, same address
            unlock("guess", f"{i:032d}")
        assert "from this address" in unlock("s3cret", "Z" * 32)[1]
    finally:
        reg.shutdown()


def test_rate_limit_window_slides_and_its_memory_is_bounded():
    now = [0.0]
    rl = RateLimit(2, 60, max_keys=3, clock=lambda: now[0])
    assert rl.wait_s("a") == 0 and rl.wait_s("a") == 0
    assert rl.wait_s("a") == pytest.approx(60)
    now[0] = 30
    assert rl.wait_s("a") == pytest.approx(30) and rl.wait_s("b") == 0
    now[0] = 60.5
    assert rl.wait_s("a") == 0
    for k in "cdefg":
        rl.wait_s(k)
    assert len(rl._hits) == 3


def test_client_identity_is_the_secret_or_the_address():
    assert session.client_id("short", "1.2.3.4") == "a-1.2.3.4"
    assert session.client_id(["x"], None) == "a-unknown"
    a = session.client_id(SECRET_A, "1.2.3.4")
    assert a.startswith("s-") and a == session.client_id(SECRET_A, "5.6.7.8") and SECRET_A not in a


@pytest.mark.parametrize("scenario,deployment", [(["default"], ""), ({"a": 1}, ""), ("default", ["x"]),
                                                 ("no-such", ""), ("default", "no-such")])
def test_a_forged_scenario_or_deployment_is_refused_not_replaced(dash_app, reg, scenario, deployment):
    tw = reg.shared()
    msg, cls = triggered(runcontrols.on_control, "ctl-reset.n_clicks", 0, [0] * 6, None, [0] * 7, None, 1,
                            "shared", None, "v1", scenario, deployment, None, 0, SECRET_A)
    assert "msg-error" in cls and ("allowed" in msg or "unknown" in msg) and tw.run == 0


def test_arrival_rate_has_one_limit_the_scenario_models():
    from twin.engine.scenario import Scenario
    from twin.model.settings import MAX_RATE
    from twin.engine.source import SyntheticSource
    bound = next(m.le for m in Scenario.model_fields["rate"].metadata if hasattr(m, "le"))
    assert MAX_RATE == bound == 100_000
    assert session.parse_rate(MAX_RATE) == MAX_RATE
    for bad in (MAX_RATE * 1.000001, 1e6, float("nan"), "fast", [5]):
        with pytest.raises(session.ControlError, match=r"rate = .*: allowed 0 < rate <= 100,000 req/s"):
            session.parse_rate(bad)
    src = SyntheticSource.__new__(SyntheticSource)
    with pytest.raises(ValueError, match="allowed 0 < rate <= 100,000 req/s"):
        src.set_rate(0.0, 1e6)


def test_a_loaded_traces_notes_show_in_the_message_and_the_action_log(dash_app, reg, tmp_path, monkeypatch):
    from twin.workload import default_trace_path
    lines = default_trace_path("mooncake_conversation").read_text().splitlines()[:40]
    lines[9], lines[10] = lines[10], lines[9]                  # one step back in time (3000 ms, then 0)
    mine = tmp_path / "shuffled.jsonl"
    mine.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv(tracestore.ENV, f"shuffled={mine}")
    tw = reg.shared()
    msg, cls = _reset(dash_app, "shuffled")
    assert "msg-ok" in cls, msg
    note = "note: trace shuffled: rows were not in arrival order (1 step(s) back in time); sorted stably by timestamp"
    assert note in msg
    assert note in tw.actions(1)[0]["what"]
    assert str(tmp_path) not in msg                            # the server path stays server-side
    from twin.ui import eventtext
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        zh = eventtext.action(tw.actions(1)[0])["what"]
    assert "shuffled" in zh and "arrival order" not in zh and "note" not in zh, zh     # the note in Chinese too
