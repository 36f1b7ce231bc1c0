"""The command-line reference page, generated at build time from the parsers themselves.

`python -m twin`'s flags are generated from the settings model (`twin.model.settings` through
`twin.cli.args`), so this page reads the same parsers: every command, every flag, its help, default
and allowed values (a numeric flag's bounds come from the `Setting` its type checks). The tools with
their own parsers (lessons, soak, load test, attack, screenshots) are read the same way, by stopping
their `main` at `parse_args`. Nothing is copied by hand, so a new flag or a moved bound shows here at
the next `make docs`. MkDocs hook (`mkdocs.yml` `hooks:`); `render()` is also what the test reads.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/cli.md"

# Tools run as modules with parsers of their own: (module, what it is for).
TOOLS = (
    ("twin.lessons", "check and re-measure the lessons"),
    ("twin.cli.soak", "soak the live twin under random failures"),
    ("twin.cli.loadtest", "load test of the web app (`make bench-ui`)"),
    ("twin.cli.attack", "one hostile viewer against a room (`make bench-room`)"),
    ("twin.cli.screenshots", "the screenshots in docs/screenshots (`make screenshots`)"),
)


class _Parsed(Exception):
    """Raised in place of parsing: carries the parser a tool's `main` built."""

    def __init__(self, parser):
        super().__init__()
        self.parser = parser


@contextmanager
def _capture():
    """While open, `parse_args` hands back its parser instead of reading arguments."""
    original = argparse.ArgumentParser.parse_args

    def stop(self, *args, **kwargs):
        raise _Parsed(self)
    argparse.ArgumentParser.parse_args = stop
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def tool_parser(module: str) -> argparse.ArgumentParser:
    """The parser that `python -m module` builds (its `main` is stopped before it reads anything)."""
    main = importlib.import_module(module if module.startswith("twin.cli.") else module + ".__main__").main
    with _capture():
        try:
            main([])
        except _Parsed as p:
            return p.parser
    raise RuntimeError(f"{module}.main built no argparse parser")


def twin_parser() -> argparse.ArgumentParser:
    from twin.cli.main import build_parser
    return build_parser()


def _subcommands(parser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def flags(parser) -> list[argparse.Action]:
    """The parser's own arguments (not its subcommands, not -h)."""
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def allowed(action: argparse.Action) -> str:
    """What a value may be: the declared Setting's bounds, the choices, or on/off."""
    setting = getattr(action.type, "setting", None)
    if setting is not None:
        kind = "integer" if setting.integer else "number"
        return f"{kind}, {setting.between('value')}" + (f" {setting.unit}" if setting.unit else "")
    if action.choices:
        return ", ".join(f"`{c}`" for c in action.choices)
    if action.nargs == 0:
        return "flag (no value)"
    if action.type is int:
        return "integer"
    if action.type is float:
        return "number"
    return "text"


def _default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is False or d == argparse.SUPPRESS or action.nargs == 0:
        return ""
    return f"`{d}`"


def _table(parser) -> list[str]:
    rows = flags(parser)
    if not rows:
        return ["No flags."]
    out = ["| argument | allowed | default | help |", "|---|---|---|---|"]
    for a in rows:
        names = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest}` (positional)"
        if a.nargs == "?" and a.option_strings:
            names += " [value]"
        out.append(f"| {names} | {_cell(allowed(a))} | {_default(a)} | {_cell(a.help or '')} |")
    return out


def _command(prog: str, help_text: str, parser, level: str) -> list[str]:
    lines = [f"{level} `{prog}`", ""]
    if help_text or parser.description:
        lines += [_cell(help_text or parser.description), ""]
    subs = _subcommands(parser)
    if subs:
        for name, sub_help, sub in subs:
            lines += _command(f"{prog} {name}", sub_help, sub, level + "#")
        return lines
    lines += _table(parser) + [""]
    return lines


def render() -> str:
    """The whole page as Markdown."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    lines = [
        "# Command-line reference",
        "",
        "Generated at build time from the parsers (`docs/hooks/cli_reference.py`); the bounds of `run` and "
        "`bench` come from the settings model, `twin/model/settings.py`, which the dashboard's controls share. "
        "Every bad value prints one line naming the flag and what is allowed, and exits with status 2. "
        "Input limits beyond the flags (trace and fault files, `--out`) and worked examples: "
        "[command-line input](cli-input.md).",
        "",
    ]
    lines += _command("python -m twin", "", twin_parser(), "##")
    lines += ["## Tools", "",
              "`python -m twin.i18n update | check`: re-extract the translatable strings into the catalogs, "
              "or check them (exit 1 when a msgid is missing, untranslated in Chinese or not formattable); "
              "see [translate](../how-to/translate.md).", ""]
    for module, what in TOOLS:
        lines += _command(f"python -m {module}", what, tool_parser(module), "###")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    """MkDocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File
    files.append(File.generated(config, PAGE, content=render()))
    return files
