"""`bench --against` (two checkouts timed in turns on the same run) and `bench --fingerprint` (hashes
of what fixed-seed runs produce)."""
from __future__ import annotations

import pytest

from twin.cli.bench_turns import HERE, WARMUP_S, in_turns
from twin.cli.fingerprint import fingerprint


@pytest.mark.slow
def test_a_checkout_against_itself_takes_turns_slice_by_slice():
    r = in_turns(str(HERE), "paper-decode", 3.0, slice_s=1.0)
    assert r["slices"] == 2 and r["timed_from_s"] == WARMUP_S        # 1..2 and 2..3 s, the first second a warm-up
    assert r["cpu_seconds_this"] > 0 and r["cpu_seconds_other"] > 0
    assert 0.25 < r["ratio"] < 4 and r["other"] == r["this"]           # the same code: about even


def test_not_a_checkout_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="not a checkout of the twin"):
        in_turns(str(tmp_path), "paper-decode", 3.0)


def test_an_engine_that_fails_is_reported_with_its_last_words(tmp_path):
    (tmp_path / "twin" / "engine").mkdir(parents=True)
    (tmp_path / "twin" / "__init__.py").write_text("")
    (tmp_path / "twin" / "engine" / "__init__.py").write_text("raise ImportError('this twin is broken')\n")
    with pytest.raises(ValueError, match="stopped: ImportError: this twin is broken"):
        in_turns(str(tmp_path), "paper-decode", 3.0)


def test_both_checkouts_take_a_first_snapshot_inside_the_warm_up(tmp_path):
    """A snapshot's one-time indexes are built before the timing starts, on either side: an engine
    whose advance() returns no snapshot is asked for one after the warm-up, as an older engine
    built one inside its warm-up advance; each turn then takes one."""
    (tmp_path / "twin" / "engine").mkdir(parents=True)
    (tmp_path / "twin" / "__init__.py").write_text("")
    log = tmp_path / "calls.txt"
    (tmp_path / "twin" / "engine" / "__init__.py").write_text(f"""
class Engine:
    def __init__(self, name, seed, duration_s):
        self.sim_time = 0.0
    def _log(self, what):
        with open({str(log)!r}, "a") as f:
            f.write(what + "\\n")
    def advance(self, s):
        self.sim_time += s
        self._log(f"advance {{s:g}}")
    def snapshot(self):
        self._log("snapshot")
""")
    in_turns(str(tmp_path), "paper-decode", 3.0, slice_s=1.0)
    assert log.read_text().split("\n")[:-1] == ["advance 1", "snapshot"] + ["advance 1", "snapshot"] * 2


def test_a_run_no_longer_than_the_warm_up_is_refused():
    with pytest.raises(ValueError, match="need duration > 1.0 s"):
        in_turns(str(HERE), "paper-decode", 1.0)


def test_a_fingerprint_repeats_for_a_seed_and_tells_a_change():
    a = fingerprint("diurnal", 20)
    assert a == fingerprint("diurnal", 20) and a["request_rows"] > 1000
    other = fingerprint("diurnal", 20, seed=1)               # other arrivals: every hash differs
    assert all(a[k] != other[k] for k in ("rows", "summary"))
    faults = fingerprint("diurnal", 20, random_faults=True)
    assert faults["events"] != a["events"] and faults["run"].endswith("random faults")
