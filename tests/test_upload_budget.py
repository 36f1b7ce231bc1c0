"""Issue 22: routes by which a trace upload held unbounded memory or showed internals, each closed
here. (1) budgets in tokens, block ids and rows, checked before the trace's arrays exist; (2)
wall-clock timestamps outside 1970..2100; (3) the upload store bounded in bytes, with uploads a live
twin replays pinned; (4) uploads limited per remote address, not only per browser secret; (5) no
server path or upload key shown to a viewer; (6) the worst allowed upload parses and builds an
engine in a couple of seconds."""
from __future__ import annotations

import base64
import secrets
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

from twin.ui import runcontrols
from twin.live import session
from twin.live import tracestore
from twin.workload import TRACES, TraceError, default_trace_path, load_trace, parse_trace_text
from twin.workload import tracefile

from test_callbacks import triggered, wait_until

ROOT = Path(__file__).resolve().parents[1]
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = '{"timestamp": %d, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
MiB = 1 << 20


def _data_url(text: str) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(text.encode()).decode()


def _azure(rows: int, inp: int, out: int = 1) -> str:
    return AZURE_HEAD + "".join(f"2023-11-16 18:15:{i % 60:02d},{inp},{out}\n" for i in range(rows))


@pytest.fixture(autouse=True)
def empty_store():
    """Each test starts and ends with no uploads and no pins (the store is process-wide; a pin is
    kept with its upload)."""
    tracestore._uploads.clear()
    yield
    tracestore._uploads.clear()


@pytest.fixture
def reg(dash_app):
    r = session.configure(wall_dt=0.05, max_sandboxes=3, ttl_s=600, token="")
    yield r
    r.shutdown()


def _peak_mib(fn) -> float:
    """Peak of memory allocated (Python and numpy) while fn runs, in MiB."""
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / MiB


# ---- 1. budgets in tokens, block ids and rows ----------------------------------------------------

def test_a_one_kilobyte_upload_cannot_hold_a_gigabyte():
    """32 rows of 2**31 - 1 tokens held 1 GiB of block ids; now the first row is refused, small."""
    bomb = _azure(32, 2_147_483_647)
    assert len(bomb) < 1500
    errors = []
    peak = _peak_mib(lambda: errors.append(pytest.raises(TraceError, tracestore.upload, _data_url(bomb), "bomb.csv")))
    msg = str(errors[0].value)
    assert msg == (f"bomb.csv line 2: ContextTokens = '2147483647': must be an integer >= 1 "
                   f"(and <= {tracefile.UPLOAD_LIMITS.row_tokens})")
    assert peak < 2, peak


def test_output_tokens_per_row_are_capped_too():
    with pytest.raises(TraceError, match=r"x.csv line 2: GeneratedTokens = '2147483647': must be an integer "
                                         rf">= 1 \(and <= {tracefile.UPLOAD_LIMITS.row_tokens}\)"):
        parse_trace_text(_azure(1, 10, 2_147_483_647), "x.csv", limits=tracefile.UPLOAD_LIMITS)


def test_rows_each_within_the_row_cap_cannot_sum_past_the_block_id_budget():
    per_row = -(-tracefile.UPLOAD_LIMITS.row_tokens // 512)
    rows = tracefile.UPLOAD_LIMITS.block_ids // per_row + 1
    text = _azure(rows, tracefile.UPLOAD_LIMITS.row_tokens)
    assert len(text) < tracestore.UPLOAD_MAX_BYTES
    errors = []
    peak = _peak_mib(lambda: errors.append(pytest.raises(TraceError, tracestore.upload, _data_url(text), "b.csv")))
    assert str(errors[0].value) == (
        f"b.csv line {rows + 1}: block ids (ContextTokens / 512, rounded up) in total reach "
        f"{rows * per_row:,} with this row: allowed at most {tracefile.UPLOAD_LIMITS.block_ids:,} per trace")
    assert peak < 4, peak        # far below the block ids' own 8 bytes each


@pytest.mark.parametrize("what,over,text,msg", [
    ("rows", {"rows": 2}, _azure(3, 10),
     "t line 4: rows in total reach 3 with this row: allowed at most 2 per trace"),
    ("tokens", {"tokens": 25}, _azure(3, 10),
     "t line 4: tokens (ContextTokens + GeneratedTokens) in total reach 33 with this row: allowed at most 25 per trace"),
    ("hash ids", {"block_ids": 3},
     "".join('{"timestamp": %d, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n' % i for i in range(3)),
     "t line 2: block ids (hash_ids) in total reach 4 with this row: allowed at most 3 per trace"),
    ("burstgpt rows", {"rows": 1},
     "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,m,1,1,2,R\n1,m,1,1,2,R\n",
     "t line 3: rows in total reach 2 with this row: allowed at most 1 per trace"),
])
def test_every_trace_total_has_a_budget_even_when_lenient(what, over, text, msg):
    limits = replace(tracefile.FILE_LIMITS, **over)
    for lenient in (False, True):      # a whole-trace budget is not a bad row to skip
        with pytest.raises(TraceError) as e:
            parse_trace_text(text, "t", lenient=lenient, limits=limits)
        assert str(e.value) == msg


def test_the_shipped_traces_still_load_and_fit_an_upload():
    for name in TRACES:
        w = load_trace(default_trace_path(name))
        assert len(w) > 10_000
    moon = default_trace_path("mooncake_conversation").read_bytes()
    head = moon[:tracestore.UPLOAD_MAX_BYTES].rsplit(b"\n", 1)[0].decode()
    assert len(parse_trace_text(head, "m", limits=tracefile.UPLOAD_LIMITS)) > 7_000
    assert len(parse_trace_text(default_trace_path("azure_conv").read_text(), "a", limits=tracefile.UPLOAD_LIMITS)) == 19_366


# ---- 2. wall-clock timestamps ---------------------------------------------------------------------

@pytest.mark.parametrize("stamp", ["1700-01-01 00:00:00", "2199-12-31 23:59:59", "1969-12-31 23:59:59"])
def test_an_azure_timestamp_outside_1970_to_2100_is_refused(stamp):
    text = AZURE_HEAD + f"2023-11-16 18:15:46.6805900,10,5\n{stamp},10,5\n"
    with pytest.raises(TraceError) as e:
        parse_trace_text(text, "x.csv")
    assert str(e.value) == (f"x.csv line 3: TIMESTAMP = {stamp!r}: must be a date-time like "
                            "2023-11-16 18:15:46.6805900 (years 1970-2100)")


def test_the_1700_and_2199_pair_no_longer_wraps_to_a_negative_arrival():
    text = AZURE_HEAD + "1700-01-01 00:00:00,10,5\n2199-12-31 23:59:59,10,5\n2023-01-01 00:00:00,10,5\n"
    w = parse_trace_text(text, "x.csv", lenient=True)
    assert len(w) == 1 and w.skipped == 2 and w.arrival_s.min() >= 0 and w.notes == ()


@pytest.mark.parametrize("stamp", ["1970-01-01 00:00:00", "2100-12-31 23:59:59.9999999"])
def test_the_ends_of_the_allowed_years_are_accepted(stamp):
    assert len(parse_trace_text(AZURE_HEAD + f"{stamp},10,5\n", "x.csv")) == 1


# ---- 3. the store: bytes, least recently used, pinned uploads kept --------------------------------

def _one_row(i: int) -> tuple[str, int]:
    key, w = tracestore.upload(_data_url(ROW % i), f"t{i}.jsonl")
    return key, tracestore.cost(w)


def test_the_store_is_bounded_in_bytes_and_drops_the_least_recently_used(monkeypatch):
    size = tracestore.cost(parse_trace_text(ROW % 0, "t"))
    monkeypatch.setattr(tracestore, "UPLOAD_STORE_BYTES", 3 * size)
    keys = [_one_row(i)[0] for i in range(3)]
    assert tracestore.workload(keys[0]) is not None          # used: now the most recent
    keys.append(_one_row(3)[0])
    assert tracestore.workload(keys[1]) is None and tracestore.held_bytes() == 3 * size
    assert all(tracestore.workload(k) is not None for k in (keys[0], keys[2], keys[3]))


def test_an_upload_bigger_than_the_whole_store_is_refused(monkeypatch):
    monkeypatch.setattr(tracestore, "UPLOAD_STORE_BYTES", 100)
    with pytest.raises(tracestore.TraceChoiceError, match=r"upload t0.jsonl: needs [\d,]+ bytes in memory, "
                                                          r"more than the 100 all uploads may hold"):
        _one_row(0)


def test_a_pinned_upload_is_never_dropped_and_a_store_full_of_them_refuses(monkeypatch):
    size = tracestore.cost(parse_trace_text(ROW % 0, "t"))
    monkeypatch.setattr(tracestore, "UPLOAD_STORE_BYTES", 2 * size)
    k0, _ = _one_row(0)
    tracestore.pin(k0, "twin-a")
    for i in range(1, 5):
        _one_row(i)
    assert tracestore.workload(k0) is not None
    k5, _ = _one_row(5)
    tracestore.pin(k5, "twin-b")
    with pytest.raises(tracestore.TraceChoiceError, match="traces that running twins replay"):
        _one_row(6)
    tracestore.unpin(k0, "twin-a")
    _one_row(6)
    assert tracestore.workload(k0) is None and tracestore.workload(k5) is not None


def test_pins_count_per_holder_and_release_drops_a_holders_pins():
    k0, _ = _one_row(0)
    tracestore.pin(k0, "t")
    tracestore.pin(k0, "t")            # a reset onto the same upload: pinned twice, unpinned once
    tracestore.unpin(k0, "t")
    assert tracestore.pinned(k0)
    tracestore.release("t")
    assert not tracestore.pinned(k0)
    with pytest.raises(tracestore.TraceChoiceError, match="no longer kept"):
        tracestore.pin("upload:0000000000000000", "t")


def test_twins_pin_the_upload_they_replay_until_they_drop_it(reg, monkeypatch):
    size = tracestore.cost(parse_trace_text(ROW % 0, "t"))
    monkeypatch.setattr(tracestore, "UPLOAD_STORE_BYTES", 2 * size)
    k0, _ = _one_row(0)
    tw = reg.shared()
    tw.control("reset", {"trace": k0})
    assert wait_until(lambda: tw.run == 1)
    for i in range(1, 4):
        _one_row(i)
    assert tracestore.workload(k0) is not None           # the shared twin replays it
    sb = reg.open_sandbox(client="c1", addr="a")        # copies the shared twin's trace
    assert sb.params.trace == k0
    tw.control("reset", {"trace": None})
    assert wait_until(lambda: tw.run == 2)
    for i in range(1, 4):
        _one_row(i)
    assert tracestore.workload(k0) is not None           # the sandbox still replays it
    reg.close(sb.key, "c1")
    assert not tracestore.pinned(k0)
    _one_row(4)
    _one_row(5)
    assert tracestore.workload(k0) is None


def test_a_failed_reset_or_twin_leaves_no_pin(reg):
    k0, _ = _one_row(0)
    tw = reg.shared()
    with pytest.raises(session.ControlError):
        tw.control("reset", {"trace": k0, "deployment": "no-such-deployment"})
    assert not tracestore.pinned(k0)
    with pytest.raises(Exception):
        session.Twin("t", params={"trace": k0, "deployment": "no-such-deployment"})
    assert not tracestore.pinned(k0)


# ---- 4. uploads per remote address ---------------------------------------------------------------

def test_fresh_browser_secrets_do_not_buy_more_uploads_from_one_address(dash_app, reg):
    def upload_from(addr: str, i: int):
        with dash_app.server.test_request_context("/", environ_base={"REMOTE_ADDR": addr}):
            return triggered(runcontrols.on_upload, "ctl-trace-upload.contents", _data_url(ROW % i), "t.jsonl", [],
                             secrets.token_hex(16))
    outs = [upload_from("10.0.0.7", i) for i in range(16)]       # the audit's 16 secrets in 0.2 s
    assert "msg-error" in outs[-1][4]
    assert sum("msg-ok" in o[4] for o in outs) == session.UPLOADS_PER_MIN_ADDRESS
    assert f"trace uploads from this address: at most {session.UPLOADS_PER_MIN_ADDRESS} per minute" in outs[-1][3]
    assert "msg-ok" in upload_from("10.0.0.8", 99)[4]


# ---- 5. nothing internal reaches a viewer --------------------------------------------------------

def test_a_reset_on_an_upload_no_longer_kept_says_so_without_a_path(reg):
    k0, _ = _one_row(0)
    tw = reg.shared()
    tw.control("reset", {"trace": k0})
    assert wait_until(lambda: tw.run == 1)
    assert tw.status()["trace"] == "t0.jsonl (uploaded)" and k0 not in str(tw.status())
    tracestore._uploads.clear()                   # gone behind the twin's back (pins now prevent this)
    with pytest.raises(session.ControlError) as e:
        tw.control("reset", {"seed": 3})
    assert str(e.value) == "trace: that upload is no longer kept (upload it again)"
    with pytest.raises(session.ControlError) as e:
        reg.open_sandbox(client="c1", addr="a")
    assert "/" not in str(e.value)


def test_a_shipped_trace_missing_on_the_server_is_reported_without_its_folders(reg, monkeypatch):
    monkeypatch.setitem(TRACES, "ghost", "nowhere/ghost.jsonl")
    with pytest.raises(TraceError, match="under any of"):       # a CLI user is told where it looked
        default_trace_path("ghost")
    tw = reg.shared()
    with pytest.raises(session.ControlError) as e:
        tw.control("reset", {"trace": "ghost"})
    assert str(e.value) == "trace ghost: not available on this server"
    assert str(ROOT.parent) not in str(e.value)


# ---- 6. the worst allowed upload is quick ---------------------------------------------------------

@pytest.mark.timing
def test_the_worst_allowed_upload_parses_and_builds_an_engine_in_seconds():
    from twin.engine import Engine
    per_row = -(-tracefile.UPLOAD_LIMITS.row_tokens // 512)
    text = _azure(tracefile.UPLOAD_LIMITS.block_ids // per_row, tracefile.UPLOAD_LIMITS.row_tokens, 1000)
    t0 = time.perf_counter()
    key, w = tracestore.upload(_data_url(text), "worst.csv")
    Engine(scenario="mooncake-live", trace=key, workload="trace")
    assert time.perf_counter() - t0 < 5.0
