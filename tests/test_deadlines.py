"""Clients that give up (twin.engine.deadlines): a request waiting in a queue past its client's
deadline times out, a terminal state the audit counts; one being worked on, or one that has
streamed decode tokens, never does; under the largest random-failure rate the overload is shed by
deadlines, not refused at the door, and completions do not fall."""
import json

import numpy as np
import pytest

from test_cli import cli
from twin.model.config import CatalogError
from twin.engine import Engine
from twin.engine.faults import RANDOM_MAX
from twin.engine.requests import TIMED_OUT, RequestTable
from twin.engine.scenario import load_scenario
from twin.predict.constant import ConstantPredictor

DEP = "qwen3-235b-cloudmatrix"       # 4 prefill instances, 1 decode instance (as test_engine_exact)
DECODE_S = 0.04


def _engine(tmp_path, rows, prefill_s=0.25, **overrides) -> Engine:
    """A trace of (arrival ms, input, output) rows on the constant predictor, not yet advanced."""
    path, lines, block = tmp_path / "trace.jsonl", [], 0
    for t_ms, i, o in rows:
        blocks = list(range(block, block + -(-i // 512)))
        block += len(blocks)
        lines.append(json.dumps({"timestamp": t_ms, "input_length": i, "output_length": o, "hash_ids": blocks}) + "\n")
    path.write_text("".join(lines))
    pred = ConstantPredictor(DEP, prefill_ms=prefill_s * 1e3, decode_ms=DECODE_S * 1e3)
    return Engine(None, seed=0, deployment=DEP, workload="trace", trace=str(path), duration_s=60,
                  predictor=pred, **overrides)


def _conserved(eng) -> dict:
    a = eng.audit()
    assert a["conserved"] and a["orphaned"] == 0 and a["held_terminal"] == 0, a
    assert a["arrived"] == a["completed"] + a["rejected"] + a["timed_out"] + a["in_flight"]
    return a


def test_the_audit_counts_timed_out_requests_and_a_finish_after_is_an_error():
    t = RequestTable(capacity=4)
    t.add(np.arange(5.0), np.full(5, 100), np.full(5, 10))
    t.time_out(np.array([1, 3]), np.array([601.0, 603.0]))
    a = t.audit()
    assert (a["arrived"], a["completed"], a["rejected"], a["timed_out"], a["in_flight"]) == (5, 0, 0, 2, 3)
    assert a["conserved"] is True and list(t.in_flight_ids()) == [0, 2, 4]
    assert t.state[1] == TIMED_OUT and t.finish[1] == 601.0
    assert t.frame()["state"].tolist()[1] == "timed_out"
    t.generated[[0]] = 10
    assert list(t.complete([0, 1], 700.0)) == [0]          # 1 has timed out: not finished, counted
    a = t.audit()
    assert (a["completed"], a["timed_out"], a["in_flight"]) == (1, 2, 2)
    assert a["errors"]["finish_timed_out"] == 1 and a["conserved"] is False and t.finish[1] == 601.0


def test_the_table_keeps_its_first_arrival_below_which_no_client_can_have_waited():
    """Deadlines read no queue before first_arrival + deadline_s: the earliest arrival ever staged,
    out of order or not, NaN ignored (no client hears anything before its request arrives)."""
    t = RequestTable(capacity=4)
    assert t.first_arrival == float("inf")
    t.stage(np.array([3.0, 2.5, np.nan]), np.full(3, 100), np.full(3, 10))
    t.admit(3)
    t.add(np.array([7.0, 1.75]), np.full(2, 100), np.full(2, 10))
    assert t.first_arrival == 1.75 and type(t.first_arrival) is float


def test_a_request_queued_past_its_deadline_times_out_one_in_prefill_does_not(tmp_path):
    """Eight prompts of a whole batch budget at t = 0 over four prefill instances, 1.5 s a batch, a
    1 s deadline: the first on each instance is in prefill at 1 s and finishes at 1.5 s; the second
    is still queued at 1 s and times out then, exactly."""
    eng = _engine(tmp_path, [(0, 200_000, 1)] * 8, prefill_s=1.5, deadline_s=1.0)
    eng.advance(3.0)
    df = eng.req.frame().set_index("id")
    done, out = df[df.state == "done"], df[df.state == "timed_out"]
    assert len(done) == 4 and len(out) == 4
    np.testing.assert_allclose(done["finish"], 1.5)           # past their deadline, in prefill: served
    np.testing.assert_allclose(out["finish"], 1.0)            # arrival + deadline
    assert out["prefill_start"].isna().all()
    assert all(not p.queue and p.queued_tokens == 0 for p in eng.prefill)
    a = _conserved(eng)
    assert (a["completed"], a["timed_out"], a["in_flight"]) == (4, 4, 0)
    assert eng.kpis()["timed_out"] == 4 and eng.metrics.history["timed_out"][-1] == 4
    assert [e["args"]["s"] for e in eng.events if e["message"].startswith("Requests timing out")] == ["1"]


def test_a_decode_queue_wait_times_out_a_decoding_request_does_not(tmp_path):
    """A (101 tokens, 4 s of decode) decodes past its 1 s deadline and finishes; the decode
    instance is then held idle: A's batch waits (not a queue) and B, prefilled at 0.85 s, waits in
    the decode queue and times out 1 s after its first token."""
    eng = _engine(tmp_path, [(0, 1000, 101), (600, 1000, 101)], deadline_s=1.0)
    eng.advance(0.5)
    dec = eng.decode[0]
    dec.hold("test", "held by the test")
    eng.advance(2.5)
    df = eng.req.frame().set_index("id")
    assert df.loc[1, "state"] == "timed_out"
    assert df.loc[1, "finish"] == pytest.approx(df.loc[1, "prefill_end"] + 1.0, abs=1e-9)
    assert df.loc[0, "state"] == "decoding"                  # held in its batch, not queued
    eng.bring_online(dec, "test")
    eng.advance(10)
    df = eng.req.frame().set_index("id")
    assert df.loc[0, "state"] == "done" and df.loc[0, "finish"] > df.loc[0, "arrival"] + 1.0
    assert _conserved(eng)["timed_out"] == 1


def test_a_request_sent_back_after_streaming_tokens_never_times_out(tmp_path):
    """A decodes, a fault-like eviction sends it back to a prefill pool that is down; it waits
    there far past its deadline and is served when prefill returns. C, arriving fresh meanwhile,
    times out."""
    eng = _engine(tmp_path, [(0, 1000, 1001), (3000, 1000, 11)], deadline_s=1.0)
    eng.advance(2.0)
    for p in eng.prefill:
        p.hold("test", "held by the test")
    eng.requeue(eng.decode[0].evict())
    assert eng.req.generated[0] > 1 and eng.req.state[0] == 0      # QUEUED, tokens streamed
    eng.advance(8.0)                                                # t = 10: 8 s queued
    df = eng.req.frame().set_index("id")
    assert df.loc[0, "state"] == "queued" and df.loc[1, "state"] == "timed_out"
    assert df.loc[1, "finish"] == pytest.approx(4.0)
    for p in eng.prefill:
        eng.bring_online(p, "test")
    eng.advance(60)
    assert eng.req.frame().set_index("id").loc[0, "state"] == "done"
    assert _conserved(eng)["timed_out"] == 1


@pytest.mark.slow
def test_normal_load_is_unchanged_by_a_deadline_it_never_reaches():
    """The paper deployment at 90% load for 120 s: no queue wait reaches 30 s, so every request
    row is the same as with no deadline to speak of."""
    rows = {}
    for d in (30.0, 86_400.0):
        eng = Engine("default", seed=0, duration_s=120, deadline_s=d)
        eng.advance(120)
        rows[d] = eng.req.frame()
        assert eng.req.timed_out == 0
    assert rows[30.0].equals(rows[86_400.0])


@pytest.mark.slow
def test_under_the_largest_random_failure_rate_deadlines_shed_the_overload():
    """The default under random failures at RANDOM_MAX (from their own generator, so both runs meet
    the same faults) for 400 s, with an admission limit of 20,000 in flight so the window policy
    bites within a test: without a deadline (a day) arrivals are refused as overloaded; with a 60 s
    deadline none is, clients time out instead, and as many requests complete (within 1%)."""
    got = {}
    for d in (86_400.0, 60.0):
        eng = Engine("default", seed=0, duration_s=400, deadline_s=d, max_in_flight=20_000)
        eng.faults.set_random(RANDOM_MAX, np.random.default_rng(1))
        eng.advance(400)
        got[d] = _conserved(eng)
    window, deadline = got[86_400.0], got[60.0]
    assert window["rejected_by_reason"]["overloaded"] > 0.05 * window["arrived"] and window["timed_out"] == 0
    assert deadline["rejected_by_reason"]["overloaded"] == 0 and deadline["timed_out"] > 0.1 * deadline["arrived"]
    assert deadline["completed"] >= 0.99 * window["completed"]


@pytest.mark.parametrize("value", [0, 0.5, 86_401, float("nan"), float("inf"), "soon"])
def test_bad_deadlines_are_refused_naming_the_field_and_range(value):
    with pytest.raises(CatalogError, match=r"deadline_s = .*allowed: >= 1 and <= 86400"):
        load_scenario("default", deadline_s=value)


def test_the_cli_takes_a_deadline_and_refuses_bad_ones():
    code, _, err = cli("run", "--deadline", "0", "--duration", "1")
    assert code == 2 and err.endswith("argument --deadline: '0': allowed a number >= 1 and <= 86,400 s\n")
    code, _, err = cli("run", "--deadline", "nan", "--duration", "1")
    assert code == 2 and "argument --deadline: 'nan': allowed" in err
    code, _, err = cli("run", "--scenario", "paper-decode", "--deadline", "60", "--duration", "1")
    assert code == 2 and "--deadline: scenario 'paper-decode' is decode-only" in err
    code, out, err = cli("run", "--deadline", "120", "--duration", "2", "--json")
    assert code == 0 and json.loads(out)["requests"]["timed_out"] == 0
