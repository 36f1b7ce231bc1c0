"""Fuzzing every file and flag a user hands the twin (hypothesis, derandomized so CI is repeatable).

Properties: a trace, fault file or command line either works or is refused with one line naming
the file/line/flag and what is allowed; never a traceback, never a hang (an alarm turns one into a
failure), never NaN or Infinity in printed JSON; a lenient load accounts for every row.
"""
import contextlib
import io
import json
import math
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.cli.main import main
from twin.model.config import CatalogError
from twin.engine.faults import KINDS, load_fault_file
from twin.workload import TraceError, Workload, parse_trace_text

FUZZ = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MAX_MESSAGE = 600          # a refusal is one short line, never a whole row or file


@contextlib.contextmanager
def no_hang(seconds: int = 30):
    def fail(*_):
        raise AssertionError(f"no answer within {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _strict_json(text: str):
    def refuse(c):
        raise AssertionError(f"non-strict JSON constant {c} in output")
    return json.loads(text, parse_constant=refuse)


def _one_line(msg: str, prefix: str) -> None:
    assert "\n" not in msg and len(msg) < MAX_MESSAGE, msg
    assert msg.startswith(prefix), msg


# ---- values a hostile or careless file holds ---------------------------------------------------
ODD_NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 0.5, 1e300, -0.0,
                               math.nan, math.inf, -math.inf, True, False, None])
JSON_LEAF = st.one_of(ODD_NUMBERS, st.integers(), st.floats(), st.text(max_size=12))
JSON_VALUE = st.recursive(JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                           st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                          max_leaves=12)


@st.composite
def mooncake_line(draw) -> bytes:
    """A good row, a row with one field replaced or dropped, or junk (text, bytes, deep nesting)."""
    n_in = draw(st.integers(1, 3000))
    row = {"timestamp": draw(st.integers(0, 10**7)), "input_length": n_in,
           "output_length": draw(st.integers(1, 500)),
           "hash_ids": draw(st.lists(st.integers(0, 50), min_size=-(-n_in // 512), max_size=-(-n_in // 512)))}
    kind = draw(st.sampled_from(["good", "good", "field", "drop", "text", "bytes", "nested", "json"]))
    if kind == "field":
        row[draw(st.sampled_from(sorted(row)))] = draw(JSON_VALUE)
    elif kind == "drop":
        del row[draw(st.sampled_from(sorted(row)))]
    elif kind == "text":
        return draw(st.text(max_size=40)).replace("\n", " ").encode()
    elif kind == "bytes":
        return draw(st.binary(max_size=40)).replace(b"\n", b" ")
    elif kind == "nested":
        return b"[" * draw(st.integers(500, 50_000))
    elif kind == "json":
        return json.dumps(draw(JSON_VALUE)).encode()
    return json.dumps(row).encode()      # json.dumps writes NaN/Infinity, as a careless tool would


WALLCLOCK = st.builds(lambda s: f"2023-11-16 18:{s // 60 % 60:02d}:{s % 60:02d}.{s % 9999999:07d}",
                      st.integers(0, 10**6))
CSV_FIELD = st.one_of(st.integers(-5, 5000).map(str), st.sampled_from(
    ["", "nan", "inf", "1e3", "now", "today", "99999-01-01 00:00:00", "2023-11-16T18:15:46Z", "1_000",
     "9" * 30, '"', "a,b", "\x00"]), st.text(max_size=10))


@st.composite
def azure_line(draw) -> bytes:
    kind = draw(st.sampled_from(["good", "good", "field", "arity", "bytes"]))
    fields = [draw(WALLCLOCK), str(draw(st.integers(1, 20000))), str(draw(st.integers(1, 2000)))]
    if kind == "field":
        fields[draw(st.integers(0, 2))] = draw(CSV_FIELD)
    elif kind == "arity":
        fields = fields[:draw(st.integers(0, 2))] + [draw(CSV_FIELD)] * draw(st.integers(0, 2))
    elif kind == "bytes":
        return draw(st.binary(max_size=30)).replace(b"\n", b" ")
    return ",".join(fields).replace("\n", " ").replace("\r", " ").encode()


def _check_trace(data: bytes, name: str, fmt, lenient: bool, rows: int) -> None:
    """`rows`: data lines that are not blank (and not the header)."""
    try:
        with no_hang():
            w = parse_trace_text(data, name, fmt=fmt, lenient=lenient)
    except TraceError as exc:
        _one_line(str(exc), name)
        if lenient:       # lenient refuses only a file with no usable row (or an unusable header)
            assert "no requests in the file" in str(exc) or "header" in str(exc) \
                or "cannot tell the trace format" in str(exc), str(exc)
        return
    assert isinstance(w, Workload) and len(w) >= 1
    assert len(w) + w.skipped == rows
    assert lenient or w.skipped == 0
    assert np.all(np.isfinite(w.arrival_s)) and np.all(np.diff(w.arrival_s) >= 0)
    assert w.arrival_s.min() >= 0 and w.input_tokens.min() >= 1 and w.output_tokens.min() >= 1
    assert all("\n" not in r and len(r) < MAX_MESSAGE for r in w.skip_reasons + w.notes)
    json.dumps(w.summary(), allow_nan=True)      # summary itself may hold NaN rates (span 0); no crash


def _nonblank(lines: list[bytes]) -> int:
    return sum(1 for ln in lines if ln.decode("utf-8", "surrogateescape").strip())


@FUZZ
@given(st.lists(mooncake_line(), min_size=1, max_size=12), st.booleans())
def test_fuzz_mooncake_trace(lines, lenient):
    data = b"\n".join(lines) + b"\n"
    if not data.decode("utf-8-sig", "surrogateescape").strip():
        with pytest.raises(TraceError, match="file is empty"):
            parse_trace_text(data, "fuzz.jsonl", fmt="mooncake")
        return
    _check_trace(data, "fuzz.jsonl", "mooncake", lenient, _nonblank(lines))


@FUZZ
@given(st.lists(azure_line(), min_size=1, max_size=12), st.booleans())
def test_fuzz_azure_trace(lines, lenient):
    data = b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"\n".join(lines) + b"\n"
    _check_trace(data, "fuzz.csv", None, lenient, _nonblank(lines))


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode), st.booleans())
def test_fuzz_trace_garbage(data, lenient):
    try:
        with no_hang():
            parse_trace_text(data, "junk", lenient=lenient)
    except TraceError as exc:
        _one_line(str(exc), "junk")


# ---- fault files (TOML) ------------------------------------------------------------------------
TOML_VALUE = st.one_of(st.integers(-10, 10**6).map(str), st.sampled_from(
    ["nan", "inf", "-inf", "1e300", "0.5", "-1", "true", '""', '"n20"', '"soon"', "[1, 2]", "{x = 1}",
     '"sp2/l2-5"', '"n20/npu3/d1"', '"n20/l1-3--sp3/l2-7"']))
FAULT_KEY = st.sampled_from(["kind", "target", "at_s", "duration_s", "factor", "period_s", "speed"])
TOP_KEY = st.sampled_from(["scenario", "seed", "duration_s", "description", "bogus"])


@st.composite
def good_fault(draw) -> list[str]:
    """A fault the engine accepts (a real target of the right kind) landing within a 1 s run."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    out = ["[[fault]]", f'kind = "{kind}"', f'target = "{KINDS[kind].example}"', f"at_s = {draw(st.integers(0, 9)) / 10}"]
    if draw(st.booleans()):
        out.append(f"duration_s = {draw(st.integers(1, 50)) / 10}")
    return out


@st.composite
def fault_file(draw) -> str:
    """Half the time a file the engine runs; otherwise one with odd keys, values and tables."""
    if draw(st.booleans()):
        lines = ['scenario = "paper-decode"'] + sum(draw(st.lists(good_fault(), min_size=1, max_size=3)), [])
        return "\n".join(lines) + "\n"
    out = []
    for key in draw(st.lists(TOP_KEY, unique=True, max_size=3)):
        value = '"paper-decode"' if key == "scenario" and draw(st.booleans()) else draw(TOML_VALUE)
        out.append(f"{key} = {value}")
    if draw(st.booleans()):
        out.append(f"random = {{hours_per_sim_s = {draw(TOML_VALUE)}}}")
    for _ in range(draw(st.integers(0, 3))):
        out.append("[[fault]]")
        fields = {"kind": draw(st.sampled_from([f'"{k}"' for k in sorted(KINDS) + ["meteor", ""]]) | TOML_VALUE),
                  "target": draw(TOML_VALUE), "at_s": draw(st.integers(0, 20).map(str) | TOML_VALUE)}
        for key in draw(st.lists(FAULT_KEY, unique=True, max_size=2)):
            fields[key] = draw(TOML_VALUE)
        for key in draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=1)):
            del fields[key]
        out += [f"{k} = {v}" for k, v in fields.items()]
    if draw(st.integers(0, 9)) == 0:
        out.append(draw(st.text(max_size=30)))
    return "\n".join(out) + "\n"


@FUZZ
@given(fault_file())
def test_fuzz_fault_file_loader(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("f") / "fuzz.toml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        with no_hang():
            spec = load_fault_file(p)
    except CatalogError as exc:
        _one_line(str(exc), "fuzz.toml: ")
        return
    assert spec.get("fault") or spec["random"]["hours_per_sim_s"] > 0   # never an empty scenario
    for f in spec.get("fault", []):
        assert f["kind"] in KINDS and 0 <= f["at_s"] < spec.get("duration_s", math.inf)


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with no_hang(60), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _check_cli(argv: list[str]) -> None:
    code, out, err = cli(argv)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        _one_line(err.rstrip("\n"), "error: ")
        assert err.endswith("\n") and out == ""
        assert "output: a value is not finite" not in err, (argv, err)   # a bad input that got through
    elif "--json" in argv:
        _strict_json(out)


@settings(FUZZ, max_examples=40)
@given(fault_file())
def test_fuzz_fault_file_through_the_cli(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("f") / "fuzz.toml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    _check_cli(["run", "--faults", str(p), "--duration", "1", "--json"])


# ---- command-line flags ------------------------------------------------------------------------
EDGE = ["0", "-0", "1", "-1", "0.5", "nan", "-nan", "inf", "-inf", "1e300", "-1e300", "1e-300", "2e12",
        "9223372036854775808", "", " ", "abc", "1,5", "0x10", "1_0", "unlimited", "default"]
VALUE = st.one_of(st.sampled_from(EDGE), st.floats().map(repr), st.integers().map(str),
                  st.text(max_size=6))
SHORT = st.sampled_from(["0.5", "1", "1", "1", "0", "-1", "nan", "inf", "1e300", "", "x"])   # runs stay short
PERF_FLAGS = ["--batch", "--prompt", "--output", "--kv", "--tokens-per-npu", "--reuse", "--deployment",
              "--precision", "--eplb"]
RUN_FLAGS = ["--rate", "--load", "--speedup", "--cache-capacity", "--seed", "--deployment", "--scenario",
             "--format"]


GOOD = {"--batch": ["1", "8", "96", "8192"], "--prompt": ["1", "4096", "1000000"], "--output": ["1", "256"],
        "--kv": ["1", "4096", "2000000"], "--tokens-per-npu": ["1", "16384", "1048576"],
        "--reuse": ["0", "0.9", "0.999"], "--deployment": ["cloudmatrix-infer-paper", "cloudmatrix-infer-384"],
        "--precision": ["int8", "bf16"], "--eplb": ["default", "perfect"], "--rate": ["1", "50", "500"],
        "--load": ["0.1", "1", "5"], "--speedup": ["0.001", "4", "10000"],
        "--cache-capacity": ["1", "2e12", "unlimited", "default"], "--seed": ["0", "7", "9223372036854775807"],
        "--scenario": ["paper-decode", "bursty-chat"], "--format": ["mooncake", "azure"],
        "--system": ["cloudmatrix384", "gpu-cluster-h100"]}


@st.composite
def command_line(draw) -> list[str]:
    """A subcommand with up to three flags, each value in range half the time."""
    cmd = draw(st.sampled_from(["perf", "run", "bench", "topology"]))
    argv = [cmd]
    if cmd == "perf":
        argv.append(draw(st.sampled_from(["decode", "prefill"])))
        flags = PERF_FLAGS + ["--no-mtp", "--no-microbatch"]
    elif cmd == "run":
        flags = RUN_FLAGS + ["--lenient"]
        argv += ["--scenario", draw(st.sampled_from(["paper-decode", "default", "bursty-chat"]))]
    elif cmd == "bench":
        flags = ["--load", "--seed"]
    else:
        flags = ["--system"]
    for flag in draw(st.lists(st.sampled_from(flags), unique=True, max_size=3)):
        if flag in ("--no-mtp", "--no-microbatch", "--lenient"):
            argv.append(flag)
        else:
            good = draw(st.booleans()) and flag in GOOD
            argv.append(f"{flag}={draw(st.sampled_from(GOOD[flag]) if good else VALUE)}")
    if cmd in ("run", "bench"):
        argv.append(f"--duration={draw(SHORT)}")
    return argv + ["--json"]


@settings(FUZZ, max_examples=100)
@given(command_line())
def test_fuzz_command_line(argv):
    _check_cli(argv)
