"""One typed settings model (twin.model.settings) drives the CLI flags, the live session's checks, the engine's
commands and the control bar: change a bound there and every consumer follows."""
import dataclasses

import pytest

from test_cli import cli
from twin.live import session
from twin.model import settings
from twin.cli.main import build_parser
from twin.engine import commands
from twin.engine.scenario import Scenario
from twin.ui import components


def _narrowed(monkeypatch, name: str, **change) -> settings.Setting:
    s = dataclasses.replace(settings.SETTINGS[name], **change)
    monkeypatch.setitem(settings.SETTINGS, name, s)
    return s


def _find(node, cid):
    """The component with id `cid` in a Dash layout tree (None if absent)."""
    if getattr(node, "id", None) == cid:
        return node
    kids = getattr(node, "children", None)
    for k in kids if isinstance(kids, (list, tuple)) else [kids] if kids is not None else []:
        hit = _find(k, cid)
        if hit is not None:
            return hit
    return None


def _bar():
    return components.controls_bar([{"name": "default"}], ["cloudmatrix-infer-paper"])


def _flags(sub: str) -> dict:
    p = build_parser()
    run = next(a for a in p._subparsers._group_actions[0].choices.items() if a[0] == sub)[1]
    return {o: a for a in run._actions for o in a.option_strings}


def test_scenario_fields_carry_the_declared_bounds():
    for s in settings.SETTINGS.values():
        if s.flag is None:
            continue
        meta = {type(m).__name__: getattr(m, type(m).__name__.lower()) for m in Scenario.model_fields[s.name].metadata}
        assert meta == {("Gt" if s.lo_open else "Ge"): s.lo, ("Lt" if s.hi_open else "Le"): s.hi}, s.name


def test_every_declared_flag_is_a_run_flag_with_the_settings_help():
    flags = _flags("run")
    for s in settings.SETTINGS.values():
        if s.flag:
            assert flags[s.flag].help.startswith(s.help), s.flag
    assert flags["--load"].help == "arrival rate as a fraction of capacity, synthetic scenarios (0 < value <= 5)"
    assert _flags("bench")["--duration"].help.endswith("(0 < value <= 2,592,000; default: the scenario's; 60 "
                                                      "with --scaling)")


def test_a_lower_load_bound_moves_cli_session_engine_and_control_bar(monkeypatch):
    _narrowed(monkeypatch, "load", hi=2.0, presets=(10, 20))
    code, _, err = cli("run", "--load", "3", "--duration", "1")
    assert code == 2 and err == "error: python -m twin run: argument --load: '3': allowed a number > 0 and <= 2\n"
    code, _, err = cli("bench", "--load", "2.5")
    assert code == 2 and "allowed a number > 0 and <= 2\n" in err
    with pytest.raises(session.ControlError, match=r"^load = 3: allowed 0 < load <= 2 \(fraction of capacity"):
        session.parse_load(3)
    assert session.parse_load(2) == 2.0
    with pytest.raises(ValueError, match=r"allowed 0 < load <= 2 "):
        commands.SetLoad(2.5)
    bar = _bar()
    assert _find(bar, "ctl-load-custom").placeholder == "0–200%"
    assert _find(bar, "ctl-load").children[1].children == "20%"
    assert [b.id["index"] for b in _find(bar, "ctl-load").children] == ["10", "20"]
    assert components.allowed("load") == "0 to 200"


def test_a_lower_rate_bound_moves_cli_session_and_the_source(monkeypatch):
    _narrowed(monkeypatch, "rate", hi=50)
    code, _, err = cli("run", "--rate", "60", "--duration", "1")
    assert code == 2 and err.endswith("argument --rate: '60': allowed a number > 0 and <= 50 req/s\n")
    with pytest.raises(session.ControlError, match=r"^rate = 60: allowed 0 < rate <= 50 req/s$"):
        session.parse_rate(60)
    from twin.engine.source import SyntheticSource
    src = SyntheticSource.__new__(SyntheticSource)
    with pytest.raises(ValueError, match="allowed 0 < rate <= 50 req/s"):
        src.set_rate(0.0, 60)


def test_speed_and_seed_bounds_move_the_session_and_the_control_bar(monkeypatch):
    _narrowed(monkeypatch, "speed", hi=50.0, presets=(1, 50, "max"))
    _narrowed(monkeypatch, "live_seed", hi=99)
    with pytest.raises(session.ControlError, match=r"allowed 1 to 50 \(times real time\) or 'max'"):
        session.parse_speed(60)
    assert session.parse_speed(50) == 50.0
    with pytest.raises(session.ControlError, match="allowed a whole number 0 to 99"):
        session.parse_seed(100)
    bar = _bar()
    assert _find(bar, "ctl-speed-custom").placeholder == "1–50×"
    assert [b.children for b in _find(bar, "ctl-speed").children] == ["1×", "50×", "max"]
    assert "Seed (0–99)" in str(bar)


def test_a_lower_duration_and_seed_bound_move_the_cli(monkeypatch):
    _narrowed(monkeypatch, "duration_s", hi=100)
    _narrowed(monkeypatch, "seed", hi=9)
    code, _, err = cli("run", "--duration", "101")
    assert code == 2 and err.endswith("argument --duration: '101': allowed a number > 0 and <= 100 s\n")
    code, _, err = cli("bench", "--seed", "10")
    assert code == 2 and err.endswith("argument --seed: '10': allowed an integer >= 0 and <= 9\n")


def test_the_shipped_bounds():
    """The values the README's Command-line input table documents."""
    got = {k: (s.lo, s.hi, s.lo_open) for k, s in settings.SETTINGS.items()}
    assert got == {"duration_s": (0, 2_592_000, True), "rate": (0, 100_000, True), "load": (0, 5.0, True),
                   "speedup": (0.001, 10_000, False), "deadline_s": (1, 86_400, False), "seed": (0, 2**63 - 1, False),
                   "live_seed": (0, 2**31 - 1, False), "speed": (1.0, 1000.0, False)}
    assert components.allowed("load", "–") == "0–500" and components.allowed("seed") == "0 to 2147483647"
