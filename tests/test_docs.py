"""The front door and the generated reference: a short README whose first commands are `make run` and
`make test` and whose links resolve, and a CLI page that lists every flag with its declared bounds."""
import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from twin.model import settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _hook():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def hook():
    return _hook()


@pytest.fixture(scope="module")
def page(hook):
    return hook.render()


def test_readme_is_short_and_its_first_two_commands_are_make_run_and_make_test():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"]


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 20
    missing = [l for l in links if "://" not in l and not (ROOT / l.split("#")[0]).exists()]
    assert missing == []


def _help_flags(parser) -> set[str]:
    """Every --flag the parser's own help text names (read independently of the page generator)."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", parser.format_help())) - {"--help"}


def _all_parsers(hook):
    """(prog, parser) of every leaf command: `python -m twin X [Y]` and the tools."""
    out, todo = [], [("python -m twin", hook.twin_parser())]
    todo += [(f"python -m {m}", hook.tool_parser(m)) for m, _ in hook.TOOLS]
    while todo:
        prog, p = todo.pop()
        subs = hook._subcommands(p)
        todo += [(f"{prog} {name}", sub) for name, _, sub in subs]
        if not subs:
            out.append((prog, p))
    return out


def test_cli_page_lists_every_command_and_every_flag(hook, page):
    parsers = _all_parsers(hook)
    assert len(parsers) >= 18          # 11 of python -m twin, 3 of twin.lessons, 4 tools
    for prog, p in parsers:
        head = f"`{prog}`"
        assert head in page, prog
        section = page.split(head, 1)[1].split("\n#", 1)[0]
        for flag in _help_flags(p):
            assert f"`{flag}`" in section, (prog, flag)


def _section(page: str, prog: str) -> str:
    return page.split(f"`{prog}`\n", 1)[1].split("\n#", 1)[0]


def test_cli_page_gives_run_and_bench_the_settings_bounds(page):
    """`run` and `bench` take their flags from twin.model.settings: each row shows the declared range."""
    flagged = [s for s in settings.SETTINGS.values() if s.flag]
    assert {s.flag for s in flagged} >= {"--duration", "--rate", "--load", "--speedup", "--seed"}
    for prog in ("python -m twin run", "python -m twin bench"):
        rows = _section(page, prog).splitlines()
        for s in flagged:
            row = [line for line in rows if line.startswith(f"| `{s.flag}` |")]
            if prog.endswith("run") or row:
                assert len(row) == 1 and s.between("value") in row[0].split(" | ")[1], (prog, s.flag, row)


def test_cli_page_follows_a_changed_bound(hook, monkeypatch):
    """Generated, not copied: narrowing a setting moves the page."""
    monkeypatch.setitem(settings.SETTINGS, "rate",
                        dataclasses.replace(settings.SETTINGS["rate"], hi=777))
    row = next(line for line in _section(hook.render(), "python -m twin run").splitlines()
               if line.startswith("| `--rate` |"))
    assert "0 < value <= 777 req/s" in row
