"""Workload loaders and generators: figures from traces/README.md, clear errors, seeded synthetics."""
import json

import numpy as np
import pytest

from twin.workload import (LengthDist, TraceError, Workload, default_trace_path, ideal_hit_ratio,
                           load_trace, synthetic)


def _trace(name):
    try:
        return default_trace_path(name)
    except TraceError:
        pytest.skip(f"shared trace {name} not available")


@pytest.fixture(scope="module")
def mooncake():
    return load_trace(_trace("mooncake_conversation"))


def test_mooncake_figures(mooncake):
    s = mooncake.summary()
    assert s["count"] == 12031
    assert s["span_s"] == pytest.approx(3537, abs=0.5)
    assert s["mean_rate_per_s"] == pytest.approx(3.40, abs=0.005)
    assert s["input_mean"] == pytest.approx(12035, abs=1)
    assert (s["input_p50"], s["input_p99"]) == (6909, 85401)
    assert (round(s["output_mean"]), s["output_p50"], s["output_p99"]) == (343, 350, 1120)
    assert s["unique_blocks"] == 182790
    assert s["ideal_block_hit_ratio"] == pytest.approx(0.366, abs=0.0005)
    assert mooncake.block_size == 512 and mooncake.skipped == 0 and mooncake.notes == ()
    assert np.all(mooncake.block_ids[mooncake.block_ptr[:-1]] == 0)  # README: shared first block


def test_both_hit_definitions_give_0366(mooncake):
    # Mooncake ids are prefix hashes, so "seen before" and "leading run seen before" coincide.
    assert ideal_hit_ratio(mooncake, prefix=False) == ideal_hit_ratio(mooncake)
    assert ideal_hit_ratio(mooncake, tokens=True) == pytest.approx(0.3736, abs=0.0001)


def test_azure_figures():
    w = load_trace(_trace("azure_conv"))
    s = w.summary()
    assert s["count"] == 19366
    assert s["mean_rate_per_s"] == pytest.approx(5.53, abs=0.005)
    assert s["input_mean"] == pytest.approx(1155, abs=1)
    assert s["output_mean"] == pytest.approx(211, abs=1)
    assert w.arrival_s[0] == 0.0 and w.arrival_s[1] == pytest.approx(4.314579)  # 7 fractional digits
    assert s["ideal_block_hit_ratio"] == 0.0  # no prefix info: every block unique
    assert np.array_equal(w.num_blocks, -(-w.input_tokens // 512))


@pytest.mark.timing
def test_mooncake_loads_fast(mooncake):
    import time
    t = time.perf_counter()
    load_trace(_trace("mooncake_conversation"))
    assert time.perf_counter() - t < 1.0


def test_workload_views(mooncake):
    w = mooncake
    assert len(w) == 12031 and list(w.blocks(0)) == list(range(14))
    part = w.slice_time(100.0, 200.0)
    assert np.all((part.arrival_s >= 100) & (part.arrival_s < 200))
    i0 = int(np.searchsorted(w.arrival_s, 100.0))
    assert np.array_equal(part.blocks(0), w.blocks(i0))
    assert part.block_ptr[0] == 0 and part.block_ptr[-1] == len(part.block_ids)
    fast = w.scaled(4)
    assert fast.summary()["mean_rate_per_s"] == pytest.approx(4 * 3.4015, rel=1e-3)
    with pytest.raises(ValueError, match="speedup = 0"):
        w.scaled(0)
    with pytest.raises(ValueError):
        w.arrival_s[0] = 5.0  # shared arrays are read-only


# ------------------------------------------------------------------ bad input

def _row(t=0, i=600, o=10, h=(0, 1)):
    return json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": list(h)})


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("bad, field", [
    (_row(i=-3), "input_length = -3: must be an integer >= 1"),
    (_row(o="7"), "output_length = '7': must be an integer >= 1"),
    (_row(t=-1), "timestamp = -1"),
    (_row(h=(0, 1, 2)), "hash_ids has 3 ids but input_length = 600 needs ceil(600 / 512) = 2"),
    (_row(h=(0, "x")), "hash_ids"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 10}', "missing field hash_ids"),
    ('{"timestamp": 0, "input_length": 6', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_mooncake_rows_name_line_and_field(tmp_path, bad, field):
    lines = [_row(t=k) for k in range(16)] + [bad] + [_row(t=99)]
    p = _write(tmp_path, "trace.jsonl", lines)
    with pytest.raises(TraceError) as exc:
        load_trace(p)
    msg = str(exc.value)
    assert "trace.jsonl line 17:" in msg and field in msg


def test_lenient_skips_and_reports(tmp_path):
    lines = [_row(t=0), _row(i=0), _row(t=5), "oops", _row(t=9)]
    w = load_trace(_write(tmp_path, "t.jsonl", lines), lenient=True)
    assert len(w) == 3 and w.skipped == 2
    assert "line 2: input_length = 0" in w.skip_reasons[0] and "line 4: not valid JSON" in w.skip_reasons[1]


def test_all_rows_bad_is_an_error_even_when_lenient(tmp_path):
    with pytest.raises(TraceError, match="all 2 rows were bad"):
        load_trace(_write(tmp_path, "t.jsonl", [_row(i=0), _row(o=0)]), lenient=True)


def test_unsorted_rows_are_sorted_stably_and_noted(tmp_path):
    lines = [_row(t=2000, h=(0, 1)), _row(t=1000, h=(0, 2)), _row(t=1000, i=1500, h=(5, 6, 7))]
    w = load_trace(_write(tmp_path, "t.jsonl", lines))
    assert list(w.arrival_s) == [1.0, 1.0, 2.0]
    assert [list(w.blocks(i)) for i in range(3)] == [[0, 2], [5, 6, 7], [0, 1]]
    assert list(w.input_tokens) == [600, 1500, 600] and "sorted stably" in w.notes[0]


def test_file_errors(tmp_path):
    with pytest.raises(TraceError, match="nope.jsonl: trace file not found"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="empty"):
        load_trace(_write(tmp_path, "e.jsonl", ["", "  "]))
    with pytest.raises(TraceError, match="cannot tell the trace format.*mooncake.*azure.*burstgpt"):
        load_trace(_write(tmp_path, "x.csv", ["a,b,c", "1,2,3"]))
    with pytest.raises(TraceError, match="fmt = 'parquet': unknown format.*mooncake"):
        load_trace(_write(tmp_path, "y.jsonl", [_row()]), fmt="parquet")
    with pytest.raises(TraceError, match="header .* is not the azure header"):
        load_trace(_write(tmp_path, "z.jsonl", [_row()]), fmt="azure")


def test_azure_rows(tmp_path):
    head = "TIMESTAMP,ContextTokens,GeneratedTokens"
    good = ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,1100,109"]
    w = load_trace(_write(tmp_path, "a.csv", [head] + good), block_size=256)
    assert list(w.arrival_s) == pytest.approx([0.0, 4.314579])
    assert list(w.num_blocks) == [2, 5] and w.block_size == 256 and w.source.startswith("azure:")
    for bad, field in [("2023-11-16 18:15:51.1,0,5", "ContextTokens = '0'"),
                       ("2023-11-16 18:15:51.1,3,x", "GeneratedTokens = 'x'"),
                       ("yesterday,3,5", "TIMESTAMP = 'yesterday'"),
                       ("2023-11-16 18:15:51.1,3", "has 2 fields, expected 3")]:
        with pytest.raises(TraceError) as exc:
            load_trace(_write(tmp_path, "a.csv", [head] + good + [bad]))
        assert "line 4:" in str(exc.value) and field in str(exc.value)
    w = load_trace(_write(tmp_path, "a.csv", [head, "soon,1,1"] + good), lenient=True)
    assert len(w) == 2 and w.skipped == 1 and "line 2: TIMESTAMP" in w.skip_reasons[0]


def test_burstgpt_rows(tmp_path):
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
             "5,ChatGPT,472,18,490,Conversation log", "45,GPT-4,1087,0,1087,API log",
             "12.5,ChatGPT,30,2,32,Conversation log"]
    p = _write(tmp_path, "b.csv", lines)
    with pytest.raises(TraceError, match="line 3: Response tokens = '0': must be an integer >= 1"):
        load_trace(p)
    w = load_trace(p, lenient=True)
    assert list(w.arrival_s) == [5.0, 12.5] and list(w.input_tokens) == [472, 30]
    assert w.skipped == 1 and w.notes == () and w.source.startswith("burstgpt:")


def test_default_trace_path(tmp_path, monkeypatch):
    (tmp_path / "mine.jsonl").write_text(_row() + "\n")
    monkeypatch.setenv("TWIN_TRACES", str(tmp_path))
    assert default_trace_path("mine.jsonl") == tmp_path / "mine.jsonl"
    with pytest.raises(TraceError, match="known names: mooncake_conversation, azure_conv"):
        default_trace_path("missing.jsonl")


# ------------------------------------------------------------------ synthetic

def test_synthetic_is_deterministic_and_hits_the_rate():
    a = synthetic(50, 2000, seed=7, input=LengthDist.uniform(100, 3000), output=LengthDist.lognormal(300, 0.8))
    b = synthetic(50, 2000, seed=7, input=LengthDist.uniform(100, 3000), output=LengthDist.lognormal(300, 0.8))
    c = synthetic(50, 2000, seed=8, input=LengthDist.uniform(100, 3000), output=LengthDist.lognormal(300, 0.8))
    for f in ("arrival_s", "input_tokens", "output_tokens", "block_ptr", "block_ids"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert len(a) / 2000 == pytest.approx(50, rel=0.03)  # 5 sigma of a Poisson count of 100,000
    assert a.arrival_s[0] >= 0 and a.arrival_s[-1] < 2000
    assert 100 <= a.input_tokens.min() and a.input_tokens.max() <= 3000
    assert a.output_tokens.mean() == pytest.approx(300, rel=0.03)
    assert ideal_hit_ratio(a) == 0.0  # reuse_rate 0: every block unique


@pytest.mark.parametrize("inp, pool, tol", [(LengthDist.fixed(4096), 100, 0.005),
                                            (LengthDist.lognormal(12035, 1.0), 10, 0.01)])
def test_synthetic_reuse_rate_converges(inp, pool, tol):
    # Tolerance: cold misses (each document's first use to each depth: ~pool x longest prefix, large
    # for heavy-tailed lengths) plus, for lognormal, the cap at a short prompt's full blocks (0.2%).
    w = synthetic(20, 3000, seed=3, input=inp, reuse_rate=0.9, prefix_pool=pool)
    assert ideal_hit_ratio(w, tokens=True) == pytest.approx(0.9, abs=tol)
    assert ideal_hit_ratio(w, tokens=True, prefix=False) == ideal_hit_ratio(w, tokens=True)


def test_gamma_cv_is_burstier_than_poisson():
    def dispersion(w):
        counts = np.bincount((w.arrival_s // 10).astype(int), minlength=1000)
        return counts.var() / counts.mean()
    poisson = synthetic(20, 10_000, seed=1)
    bursty = synthetic(20, 10_000, seed=1, arrival="gamma", cv=3.0)
    assert dispersion(poisson) == pytest.approx(1.0, abs=0.2)
    assert dispersion(bursty) > 4 and len(bursty) / 10_000 == pytest.approx(20, rel=0.05)


def test_diurnal_thinning_follows_the_sine():
    w = synthetic(10, 86_400, seed=2, diurnal_amplitude=0.8)
    day, night = np.sum(w.arrival_s < 43_200), np.sum(w.arrival_s >= 43_200)
    # expected counts: 10 * 43200 * (1 +/- 0.8 * 2 / pi)
    assert day == pytest.approx(432_000 * (1 + 1.6 / np.pi), rel=0.02)
    assert night == pytest.approx(432_000 * (1 - 1.6 / np.pi), rel=0.02)


@pytest.mark.timing
def test_synthetic_at_scale_is_fast():
    import time
    t = time.perf_counter()
    w = synthetic(1200, 1000, seed=0, reuse_rate=0.5)
    assert len(w) == pytest.approx(1.2e6, rel=0.01) and time.perf_counter() - t < 5


def test_fit_lognormal(mooncake):
    d = LengthDist.fit_lognormal(mooncake.input_tokens)
    x = d.sample(np.random.default_rng(0), 200_000)
    assert x.max() <= mooncake.input_tokens.max()
    assert x.mean() == pytest.approx(mooncake.input_tokens.mean(), rel=0.05)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(rate=0), "rate = 0: must be a number > 0"),
    (dict(duration_s=-1), "duration_s = -1"),
    (dict(seed=1.5), "seed = 1.5: must be an integer >= 0"),
    (dict(arrival="weibull"), "arrival = 'weibull': must be 'poisson' or 'gamma'"),
    (dict(cv=2.0), "only arrival='gamma' takes cv"),
    (dict(diurnal_amplitude=1.5), "diurnal_amplitude = 1.5: must be a number >= 0 and <= 1"),
    (dict(reuse_rate=-0.1), "reuse_rate = -0.1"),
    (dict(prefix_pool=0), "prefix_pool = 0: must be an integer >= 1"),
    (dict(input=4096), "input = 4096: must be a LengthDist"),
    (dict(rate=1e6, duration_s=1e6), "must be <= 20,000,000"),
])
def test_synthetic_validation(kwargs, msg):
    args = dict(rate=1.0, duration_s=10.0, seed=0) | kwargs
    with pytest.raises(ValueError, match=None) as exc:
        synthetic(**args)
    assert msg in str(exc.value)


def test_length_dist_validation():
    with pytest.raises(ValueError, match="LengthDist.uniform: hi = 5: must be an integer >= 10"):
        LengthDist.uniform(10, 5)
    with pytest.raises(ValueError, match="sigma = -1"):
        LengthDist.lognormal(100, -1)


def test_workload_checks_its_arrays():
    with pytest.raises(ValueError, match="must be sorted"):
        Workload(np.array([2.0, 1.0]), np.array([1, 1]), np.array([1, 1]), np.array([0, 1, 2]),
                 np.array([5, 6]), 512, "hand-made")


# ------------------------------------------------------------------ bounded, in-memory parsing

def test_parse_trace_text_is_what_load_trace_uses(mooncake):
    from twin.workload import parse_trace_text
    path = _trace("mooncake_conversation")
    data = path.read_bytes()
    for text in (data, data.decode()):
        w = parse_trace_text(text, str(path))
        for name in ("arrival_s", "input_tokens", "output_tokens", "block_ptr", "block_ids"):
            assert np.array_equal(getattr(w, name), getattr(mooncake, name)), name
        assert w.source == mooncake.source


def test_crlf_bom_and_leading_blank_lines_parse_the_same():
    from twin.workload import parse_trace_text
    head = "TIMESTAMP,ContextTokens,GeneratedTokens"
    rows = ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,1100,109"]
    plain = parse_trace_text("\n".join([head] + rows), "a.csv")
    odd = parse_trace_text(b"\xef\xbb\xbf\r\n\r\n" + "\r\n".join([head] + rows).encode(), "a.csv")
    assert list(odd.arrival_s) == list(plain.arrival_s) == pytest.approx([0.0, 4.314579])
    with pytest.raises(TraceError, match=r"a\.csv line 5: TIMESTAMP = 'x'"):   # line numbers count the blanks
        parse_trace_text("\n\n" + "\n".join([head, rows[0], "x,1,1"]), "a.csv")


@pytest.mark.parametrize("stamp", ["now", "today", "2023-11-16T18:15:46Z", "99999-01-01 00:00:00",
                                   "-2023-01-01 00:00:00", "2023-13-01 00:00:00", "NaT", "1e5"])
def test_azure_timestamps_are_parsed_strictly(stamp):
    # numpy alone reads 'now' as the wall clock and wraps year 99999 to 1793
    from twin.workload import parse_trace_text
    text = f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,4\n{stamp},3,4\n"
    with pytest.raises(TraceError) as exc:
        parse_trace_text(text, "a.csv")
    assert str(exc.value) == (f"a.csv line 3: TIMESTAMP = {stamp!r}: must be a date-time like "
                              f"2023-11-16 18:15:46.6805900 (years 1970-2100)")


def test_non_regular_files_are_refused_before_reading(tmp_path):
    import os
    os.mkfifo(tmp_path / "pipe")
    for path, kind in ((tmp_path / "pipe", "a FIFO (named pipe)"), (tmp_path, "a directory"),
                       ("/dev/zero", "a character device")):
        with pytest.raises(TraceError) as exc:
            load_trace(path)
        assert str(exc.value) == f"{path}: is {kind}; a trace file must be a regular file"


def test_size_and_line_limits(tmp_path, monkeypatch):
    from twin.workload import tracefile
    row = _row()
    p = _write(tmp_path, "t.jsonl", [row] * 3)
    limit = len(row) * 3 + 2                     # one byte short of the file (3 rows, 3 newlines)
    monkeypatch.setattr(tracefile, "MAX_TRACE_BYTES", limit)
    with pytest.raises(TraceError) as exc:
        load_trace(p)
    assert str(exc.value) == f"{p}: larger than {limit} bytes (the most a trace file may be)"
    assert len(load_trace(_write(tmp_path, "s.jsonl", [row, row]))) == 2
    with pytest.raises(TraceError, match=f"upload: larger than {limit} bytes"):
        tracefile.parse_trace_text("x" * (limit + 1), "upload")
    monkeypatch.setattr(tracefile, "MAX_TRACE_LINES", 3)
    with pytest.raises(TraceError, match="upload: more than 3 lines"):
        tracefile.parse_trace_text("\n" * 3, "upload")
    assert len(tracefile.parse_trace_text(row + "\n\n", "upload")) == 1
    monkeypatch.setattr(tracefile, "MAX_LINE_CHARS", len(row))
    w = load_trace(_write(tmp_path, "u.jsonl", [row, row + " "]), lenient=True)
    assert len(w) == 1 and w.skip_reasons == (
        f"{tmp_path / 'u.jsonl'} line 2: line is {len(row) + 1} characters long (at most {len(row)})",)


def test_messages_quote_a_bad_value_briefly(tmp_path):
    secret = "s" * 500
    with pytest.raises(TraceError) as exc:
        load_trace(_write(tmp_path, "t.jsonl", [_row(t=secret)]))
    assert str(exc.value).endswith("line 1: timestamp = '" + "s" * 36 + "...: must be a "
                                   "number of milliseconds 0..1e+12")


def test_binary_lines_are_bad_rows(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(_row().encode() + b"\n\x00\xff\xfe\n" + _row(t=5).encode() + b"\n")
    with pytest.raises(TraceError, match=r"t\.jsonl line 2: not UTF-8 text \(binary data\?\)"):
        load_trace(p)
    w = load_trace(p, lenient=True)
    assert len(w) == 2 and w.skipped == 1


def test_parse_trace_text_takes_only_text_or_bytes():
    from twin.workload import parse_trace_text
    with pytest.raises(TraceError, match="upload: trace text must be str or bytes, got list"):
        parse_trace_text(["a"], "upload")
