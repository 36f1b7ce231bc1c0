"""Every server callback, sent malformed payloads over HTTP (the Flask test client, as a browser
or an attacker would): the answer is 200 or 204, never a 500, and nothing is logged at ERROR or
with a traceback. The callbacks validate their own inputs: the app-wide on_error net (one warning
line) must not be needed either. Plus a hypothesis fuzz over the same route, and the body limit."""
from __future__ import annotations

import json
import logging
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_callbacks import _ids

BAD = ["x", "", [], [1, 2], {}, {"a": {"b": {"c": [1, {"d": None}]}}}, None, 1e308, -1e308, math.nan,
       math.inf, True, -1, 10**30, "9" * 500, "\x00", "/etc/passwd", "../../etc/passwd", "/proc/self/environ",
       {"token": [], "ok": True}, ["shared"], "sb-00000000", {"id": "n05", "links": {"x": 1}},
       {"twin": 1, "run": "x", "v": [], "t": "nan", "rev": None, "s": [], "n": "x", "t0": {}}]
NASTY = ["x", [], {}, None, math.nan, 10**30, {"a": {"b": 1}}]


def _walk_ids(component, out: dict) -> None:
    """The pattern-matching ids of a layout, by type."""
    for cid in _ids(component):
        if cid.startswith("{"):
            d = json.loads(cid)
            out.setdefault(d.get("type"), []).append(d)


@pytest.fixture(scope="module")
def http(dash_app):
    """The Flask test client, every Python callback spec, and the real pattern-matching ids."""
    import importlib

    from twin.live import session
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, ttl_s=600, token=None)
    reg.shared().control("pause")
    client = dash_app.server.test_client()
    assert client.get("/").status_code == 200          # Dash registers its callbacks on first use
    ids: dict = {}
    _walk_ids(dash_app.serve_layout(), ids)
    for name in ("overview", "topology", "traffic", "cache", "tradeoffs", "validation", "failures", "lessons",
                 "glossary"):
        _walk_ids(importlib.import_module(f"pages.{name}").layout(), ids)
    _walk_ids(importlib.import_module("pages.lessons").layout(lesson="faults", step="1"), ids)   # a step's button
    from twin.ui.faulttable import link
    ids.setdefault("fl-rep", []).append(link(1, "table").id)     # a link to a report (drawn with the table)
    from twin.ui.faultreport import WHATIF
    ids.setdefault(WHATIF, []).append({"type": WHATIF, "index": 1})   # a gray report's what-if button
    cbs = [(key, cb) for key, cb in dash_app.app.callback_map.items() if "callback" in cb]
    yield client, cbs, ids
    reg.shutdown()


def _deps(spec_list, ids, value):
    out = []
    for d in spec_list:
        cid = d["id"]
        if isinstance(cid, str) and cid.startswith("{"):
            pattern = json.loads(cid)
            out.append([{"id": i, "property": d["property"], "value": value}
                        for i in ids.get(pattern["type"], [])])
        else:
            out.append({"id": cid, "property": d["property"], "value": value})
    return out


def _outputs(cb, ids):
    outs = cb["output"] if isinstance(cb["output"], list) else [cb["output"]]
    res = []
    for o in outs:
        cid, prop = o.component_id, o.component_property
        if isinstance(cid, dict):
            res.append([{"id": i, "property": prop} for i in ids.get(cid.get("type"), [])])
        else:
            res.append({"id": cid, "property": prop})
    return res if isinstance(cb["output"], list) else res[0]


def _prop_id(dep) -> str:
    d = (dep[0] if dep else None) if isinstance(dep, list) else dep
    if not d:
        return ""
    cid = d["id"]
    cid = json.dumps(cid, sort_keys=True, separators=(",", ":")) if isinstance(cid, dict) else cid
    return f"{cid}.{d['property']}"


def _post(client, key, cb, ids, inputs, state, trig: int):
    body = {"output": key, "outputs": _outputs(cb, ids), "inputs": inputs, "state": state,
            "changedPropIds": [p for p in [_prop_id(inputs[trig])] if p]}
    return client.post("/_dash-update-component", data=json.dumps(body, allow_nan=True),
                       content_type="application/json")


def _ours(cb) -> bool:
    """A callback of this app (Dash's own page router is guarded by the on_error net only)."""
    return not cb["callback"].__module__.startswith("dash")


def _check(resp, caplog, what, ours=True):
    assert resp.status_code in (200, 204), f"{what}: HTTP {resp.status_code} {resp.data[:300]!r}"
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info
           or "\n" in r.getMessage() or "malformed callback" in r.getMessage()
           or (ours and "refused a payload" in r.getMessage())]
    assert not bad, f"{what}: logged {[r.getMessage()[:300] for r in bad]}"
    caplog.clear()


def test_every_callback_answers_malformed_payloads_without_a_500(http, caplog):
    client, cbs, ids = http
    caplog.set_level(logging.WARNING)
    assert len(cbs) >= 20 and sum(map(_ours, (cb for _k, cb in cbs))) >= 20
    for key, cb in cbs:
        for value in BAD:                     # every input and state gets the same bad value
            for trig in range(len(cb["inputs"])):
                inputs, state = _deps(cb["inputs"], ids, value), _deps(cb["state"], ids, value)
                _check(_post(client, key, cb, ids, inputs, state, trig), caplog, f"{key[:60]} <- {value!r:.40}",
                       _ours(cb))
        fields = len(cb["inputs"]) + len(cb["state"])
        for i in range(fields):               # one field bad, the others absent
            for value in NASTY:
                vals = [None] * fields
                vals[i] = value
                inputs = [_deps([d], ids, v)[0] for d, v in zip(cb["inputs"], vals)]
                state = [_deps([d], ids, v)[0] for d, v in zip(cb["state"], vals[len(inputs):])]
                _check(_post(client, key, cb, ids, inputs, state, min(i, len(inputs) - 1)), caplog,
                       f"{key[:60]} field {i} <- {value!r:.40}", _ours(cb))


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                       max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_callback_payloads(http, caplog, data):
    client, cbs, ids = http
    caplog.set_level(logging.WARNING)
    caplog.clear()
    key, cb = data.draw(st.sampled_from(cbs), label="callback")
    fields = len(cb["inputs"]) + len(cb["state"])
    vals = data.draw(st.lists(JSONISH, min_size=fields, max_size=fields), label="values")
    inputs = [_deps([d], ids, v)[0] for d, v in zip(cb["inputs"], vals)]
    state = [_deps([d], ids, v)[0] for d, v in zip(cb["state"], vals[len(inputs):])]
    trig = data.draw(st.integers(0, len(inputs) - 1), label="trigger")
    _check(_post(client, key, cb, ids, inputs, state, trig), caplog, key[:60], _ours(cb))


def test_a_structurally_broken_request_gets_400_and_one_line(http, caplog):
    client, _cbs, _ids = http
    caplog.set_level(logging.WARNING)
    for body in ("[]", "{}", '{"output": 5}', '{"output": "no-such.children", "inputs": []}', "not json"):
        r = client.post("/_dash-update-component", data=body, content_type="application/json")
        assert r.status_code == 400, (body, r.status_code)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


class _Body:
    """A request body of `size` bytes that counts what the server reads of it."""

    def __init__(self, size: int):
        self.size, self.pos, self.read_bytes = size, 0, 0

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = self.size + pos if whence == 2 else pos
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        self.pos += n
        self.read_bytes += n
        return b"x" * n


def test_an_oversized_body_gets_413_without_being_read(http):
    client, _cbs, _ids = http
    body = _Body(300 * 1024 * 1024)
    r = client.post("/_dash-update-component", input_stream=body, content_type="application/json",
                    )
    assert r.status_code == 413
    assert body.read_bytes <= 64 * 1024
