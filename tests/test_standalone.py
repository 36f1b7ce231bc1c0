"""The repository stands alone: someone who clones it without the folders beside it gets working
links, sources and defaults. Nothing in it may point outside it (a `shared` folder beside it, `/work`)."""
from __future__ import annotations

import re
from pathlib import Path

from twin.workload import TraceNotFound, default_trace_path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "site", "__pycache__", ".pytest_cache", ".hypothesis", "test-artifacts", "runs"}   # made here, not kept
NL = b"\n"
OUTSIDE = re.compile(rb"\.\./shared|/work/(shared|main|wt)\b")


def _files():
    for path in ROOT.rglob("*"):
        if path.is_file() and not SKIP_DIRS & set(path.relative_to(ROOT).parts):
            yield path


def test_no_file_names_a_path_outside_the_repository():
    hits = []
    for path in _files():
        data = path.read_bytes()
        hits += [f"{path.relative_to(ROOT)}:{data.count(NL, 0, m.start()) + 1}" for m in OUTSIDE.finditer(data)]
    assert hits == []


def test_traces_are_found_only_inside_the_repository(monkeypatch):
    monkeypatch.delenv("TWIN_TRACES", raising=False)
    assert default_trace_path("mooncake_conversation") == ROOT / "twin/traces/mooncake/conversation_trace.jsonl"
    try:
        default_trace_path("no-such-trace.jsonl")
    except TraceNotFound as e:
        assert str(e).split("under any of: ")[1].split(" (known")[0] == str(ROOT / "twin" / "traces")
    else:
        raise AssertionError("an unknown trace was found")
