"""The fault-kind registry (issue 35): a new kind is one declaration, and every consumer reads it.
A kind declared here (and dropped again afterwards) is accepted by the CLI's fault-file path and the
engine, listed by `python -m twin faults --kinds` and on the Failures page's kind choices, and refused
with words that name what was wrong when a fault of it is malformed."""
from __future__ import annotations

import json

import pytest

from twin.cli.main import main
from twin.engine import Engine
from twin.engine.faults import KINDS, Field, FaultKind, load_fault_file, register, unregister
from twin.live.controls import ControlError, fault_command
from twin.model.config import CatalogError

OVERHEAT = FaultKind("test_overheat", ("die",), "n36/npu3/d1", "die overheating", "die hot",
                     "A die runs hot and slows down.", "cools down when the fault ends", stops=False,
                     health={"compute": "factor"}, detect="telemetry",
                     fields=(Field("factor", 0.2, 0.9, 0.6, "compute speed kept", "0.2 <= factor <= 0.9"),))


@pytest.fixture
def overheat():
    register(OVERHEAT)
    yield OVERHEAT
    unregister(OVERHEAT.name)


def _file(tmp_path, body: str):
    p = tmp_path / "hot.toml"
    p.write_text('scenario = "paper-decode"\nduration_s = 20\n[[fault]]\nkind = "test_overheat"\n' + body)
    return p


def test_a_kind_declared_here_is_accepted_by_the_fault_file_and_the_engine(overheat, tmp_path):
    spec = load_fault_file(_file(tmp_path, 'target = "n36/npu3/d1"\nat_s = 5\nfactor = 0.4\n'))
    assert spec["fault"] == [{"kind": "test_overheat", "target": "n36/npu3/d1", "at_s": 5, "factor": 0.4}]
    eng = Engine("paper-decode", seed=1)
    f = eng.faults.check(spec["fault"][0])
    assert (f.kind, f.target, f.at_s, f.factor) == ("test_overheat", "n36/npu3/d1", 5.0, 0.4)
    assert eng.faults.check({"kind": "test_overheat", "target": "n36/npu3/d0"}).factor == 0.6   # the default


def test_a_kind_declared_here_is_listed_by_the_cli_and_on_the_failures_page(overheat, capsys, dash_app):
    assert main(["faults", "--kinds", "--json"]) == 0
    listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)}
    assert listed["test_overheat"]["fields"] == [{"name": "factor", "lo": 0.2, "hi": 0.9, "default": 0.6,
                                                  "help": "compute speed kept", "allowed": "0.2 <= factor <= 0.9"}]
    assert listed["test_overheat"]["targets"] == ["die"] and listed["test_overheat"]["gray"] is True
    import importlib
    (kind,) = _find(importlib.import_module("pages.failures").layout(kind="test_overheat"), "fl-kind")
    assert {"label": "die overheating (test_overheat)", "value": "test_overheat"} in kind.options
    assert kind.value == "test_overheat"       # /failures?kind=test_overheat: the URL's kind is a choice


def _find(component, id_: str) -> list:
    """The components of a layout with this id."""
    here = [component] if getattr(component, "id", None) == id_ else []
    kids = getattr(component, "children", None)
    kids = kids if isinstance(kids, (list, tuple)) else [kids] if kids is not None and not isinstance(kids, str) else []
    return here + [c for k in kids for c in _find(k, id_)]


def test_the_docs_kind_list_is_generated_from_the_registry(overheat):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("fault_kinds", Path(__file__).parents[1] / "docs/hooks/fault_kinds.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.render()
    assert ("| `test_overheat` | slows (compute × factor) | die (`n36/npu3/d1`) | `factor`: 0.2 <= factor <= 0.9, "
            "default 0.6 | A die runs hot and slows down. |") in page
    assert all(f"| `{name}` |" in page for name in KINDS)


@pytest.mark.parametrize("body,error", [
    ('target = "n36/npu3/d1"\nat_s = 5\nfactor = 0.95\n', "fault factor = 0.95: allowed 0.2 <= factor <= 0.9"),
    ('target = "n36"\nat_s = 5\n', "fault target = 'n36' is a node; fault kind test_overheat slows an NPU die "
                                    "(e.g. 'n36/npu3/d1')"),
    ('target = "n36/npu3/d1"\nat_s = 5\nperiod_s = 3\n', "unknown field(s) period_s (allowed: kind, target, at_s, "
                                                         "duration_s, factor, for kind test_overheat)"),
])
def test_a_malformed_fault_of_it_is_refused_naming_what_is_wrong(overheat, tmp_path, body, error):
    spec = {"kind": "test_overheat", **{k.strip(): json.loads(v) for k, v in
                                        (ln.split("=") for ln in body.strip().splitlines())}}
    with pytest.raises(ValueError) as engine:
        Engine("paper-decode", seed=1).faults.check(spec)
    assert error in str(engine.value)
    with pytest.raises(ControlError) as page:            # what the Failures page's console sends
        fault_command(spec, None)
    assert error in str(page.value)


def test_the_file_check_names_a_field_the_kind_does_not_have(overheat, tmp_path):
    with pytest.raises(CatalogError, match=r"hot\.toml: fault 1: kind test_overheat has no field\(s\) period_s "
                                           r"\(allowed: kind, target, at_s, duration_s, factor\)"):
        load_fault_file(_file(tmp_path, 'target = "n36/npu3/d1"\nat_s = 5\nperiod_s = 3\n'))


def test_a_duplicate_name_is_refused_and_unregistering_forgets_the_kind(overheat):
    with pytest.raises(ValueError, match="fault kind 'test_overheat' is already registered"):
        register(OVERHEAT)
    with pytest.raises(ValueError, match="fault kind 'node' is already registered"):
        register(FaultKind("node", ("node",), "n20", "x", "x", "x", "x"))
    unregister("test_overheat")
    assert "test_overheat" not in KINDS
    with pytest.raises(ValueError, match="fault kind = 'test_overheat': allowed npu_die, npu"):
        Engine("paper-decode", seed=1).faults.check({"kind": "test_overheat", "target": "n36/npu3/d1"})
    register(OVERHEAT)                                   # the fixture drops it again


def test_a_declaration_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="a kind that stops its part has no health effect"):
        FaultKind("bad", ("die",), "n20/npu3/d1", "x", "x", "x", "x", stops=True, health={"compute": "factor"})
    with pytest.raises(ValueError, match="detect = 'sometimes'"):
        FaultKind("bad", ("die",), "n20/npu3/d1", "x", "x", "x", "x", detect="sometimes")
    with pytest.raises(ValueError, match="none of kind, target, at_s, duration_s"):
        FaultKind("bad", ("die",), "n20/npu3/d1", "x", "x", "x", "x", stops=False, health={"compute": "at_s"},
                  fields=(Field("at_s", 0, 1, 0.5, "x", "x"),))


def test_the_gray_kinds_are_declared_with_their_fields():
    gray = {k.name for k in KINDS.values() if not k.stops}
    assert {"straggler", "hbm_degrade", "node_throttle", "cpu_slow", "optical_degrade", "optical_flap"} <= gray
    for name in ("straggler", "hbm_degrade", "node_throttle", "cpu_slow"):
        k = KINDS[name]
        assert k.detect == "telemetry" and [f.name for f in k.fields] == ["factor"]
        assert set(k.health.values()) == {"factor"}
    assert KINDS["straggler"].targets == ("die", "npu")
    assert KINDS["straggler"].health == KINDS["node_throttle"].health == {"compute": "factor", "hbm": "factor"}
    assert KINDS["hbm_degrade"].health == {"hbm": "factor"} and KINDS["cpu_slow"].health == {"cpu": "factor"}
