"""Languages: the catalogs are complete, converted pages show no text outside them, numbers follow
the locale, and `?lang=` / the cookie / <html lang> work on the served app."""
from __future__ import annotations

import re
import time
from functools import lru_cache

import pytest
from dash.development.base_component import Component

from twin import i18n
from twin.cli.texts import template
from twin.i18n import catalog
from twin.live import session

# Pages whose every user-visible string comes from the catalogs, with the layouts to render
# (module, kwargs). Convert a page (see twin/i18n/catalog.py) and add it here.
CONVERTED = (
    ("pages.lessons", {}),
    ("pages.lessons", {"lesson": "faults", "step": "2"}),
    ("pages.lessons", {"lesson": "no-such-lesson"}),
    ("pages.lessons", {"lesson": "kv-cache", "step": "7"}),
    ("pages.lessons", {"lang_override": "xx"}),
    ("pages.glossary", {}),
    ("twin.ui.teach:intro", {}),
    ("twin.ui.teach:tools", {}),
    ("twin.ui.teach:banner", {}),
    ("app:serve_layout", {}),
    ("pages.overview", {}),
    ("pages.topology", {}),
    ("pages.traffic", {}),
    ("pages.cache", {}),
    ("pages.compare", {}),
    ("pages.tradeoffs", {}),
    ("pages.validation", {}),
    ("pages.failures", {}),
    ("pages.cloud", {}),
    ("pages.explorer", {}),
    ("pages.region", {}),
    ("pages.maas", {}),
) + tuple(("pages.lessons", {"lesson": les, "step": str(n)})
          for les, n in (("prefill-decode", 1), ("prefill-decode", 2), ("kv-cache", 1), ("kv-cache", 2),
                         ("expert-parallel", 1), ("expert-parallel", 2), ("pipelining", 1), ("pipelining", 2),
                         ("faults", 1), ("faults", 3), ("supernode", 1), ("supernode", 2), ("cloud", 1), ("cloud", 3)))

VISIBLE_PROPS = ("children", "title", "placeholder", "label", "options", "labels")
SKIP_CLASS = "i18n-skip"            # citations and shell commands: shown as they are in every language
# Latin words that are names, not English text (products, units, acronyms spelled in lower case)
NAMES = {"Gbps", "Ascend", "Atlas", "Kunpeng", "Qingtian", "Twin", "Mooncake", "Azure",   # + the brand, trace formats
         "Kimi", "Blackwell"}                                           # a model and a GPU generation
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")


def visible_texts(c, out: list[str]) -> list[str]:
    """Every string a viewer can read in a component tree (text and tooltip-like props)."""
    if isinstance(c, str):
        out.append(c)
    elif isinstance(c, (list, tuple)):
        for x in c:
            visible_texts(x, out)
    elif isinstance(c, dict) and "label" in c:          # a dropdown's or radio list's option: its label,
        label = c["label"]                               # less its own value named in brackets ("(npu)")
        visible_texts(label.replace(f"({c.get('value')})", "") if isinstance(label, str) else label, out)
    elif isinstance(c, Component):
        if SKIP_CLASS in (getattr(c, "className", None) or "") or c._type == "Code":
            return out
        for prop in VISIBLE_PROPS:
            v = getattr(c, prop, None)
            if prop == "options" and isinstance(v, (list, tuple)):
                v = [o for o in v if isinstance(o, dict)]    # a plain option is a value, shown as typed
            elif prop == "labels" and isinstance(v, dict):   # a dropdown's own words (search box, ...)
                v = list(v.values())
            if v is not None:
                visible_texts(v, out)
    return out


def english_words(text: str) -> list[str]:
    """Plain English words in a text. Not words: identifiers (with digits, '-', '_', '/' or '.'),
    acronyms, two-letter codes (en, zh) and a viewer's own input echoed in quotes ('xx')."""
    text = re.sub(r"'[^']*'", "", text)
    return [w for w in _WORD.findall(text)
            if re.fullmatch(r"[A-Z][a-z]{2,}|[a-z]{3,}", w) and w not in NAMES]


def render(target: str, kwargs: dict):
    import importlib
    mod, _, fn = target.partition(":")
    m = importlib.import_module(mod)
    if fn:
        return getattr(m, fn)(**kwargs) if fn == "intro" else getattr(m, fn)()
    kw = dict(kwargs)
    lang = kw.pop("lang_override", "zh")
    return m.layout(lang=lang, **kw)


def test_catalogs_are_complete_and_every_msgid_has_a_chinese_translation():
    assert catalog.problems(template()) == []
    zh = catalog.read("zh")
    assert len([m for m in zh if m.id]) > 150
    assert all(m.string.strip() for m in zh if m.id)


@pytest.mark.parametrize("target,kwargs", CONVERTED)
def test_converted_pages_show_no_english_in_chinese(dash_app, target, kwargs):
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        texts = visible_texts(render(target, kwargs), [])
    assert texts, "nothing rendered"
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"text outside the catalogs: {leftovers}"
    untranslated = [t for t in texts if t.strip() in _english_only()]
    assert untranslated == [], f"shown untranslated: {untranslated}"


@pytest.mark.parametrize("target,kwargs", [c for c in CONVERTED if c[0].startswith("pages.")] + [("app:serve_layout", {})])
def test_every_dropdown_has_its_own_words_in_chinese(dash_app, target, kwargs):
    """Dash draws a dropdown's search box and "no options" in English unless given `labels`:
    every dropdown of a page is built with `components.dropdown`."""
    from dash import dcc
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        tree = render(target, kwargs)
    found, bare = [], []

    def walk(c):
        if isinstance(c, (list, tuple)):
            for x in c:
                walk(x)
        elif isinstance(c, Component):
            if isinstance(c, dcc.Dropdown):
                (found if (getattr(c, "labels", None) or {}).get("search") == "搜索" else bare).append(c.id)
            walk(getattr(c, "children", None))
    walk(tree)
    assert bare == [], f"{target}: dropdowns without their words in Chinese: {bare}"
    assert found or target != "app:serve_layout", "the run controls' dropdowns were not found"


@lru_cache(maxsize=1)
def _scenarios() -> frozenset[str]:
    """Scenario names: identifiers ("default"), shown as typed in URLs and on the command line."""
    from twin.engine import list_scenarios
    return frozenset(s["name"] for s in list_scenarios())


@lru_cache(maxsize=1)
def _english_only() -> frozenset[str]:
    """msgids whose Chinese differs from the English (so showing the msgid means a missing translation);
    read once (a page's check asks it for every text it shows)."""
    zh = catalog.read("zh")
    return frozenset(m.id for m in zh if m.id and m.string != m.id)


def test_the_check_catches_a_string_outside_the_catalogs(dash_app):
    """The guard itself: an untranslated label is found (so the test above can fail)."""
    from dash import html
    tree = html.Div([html.H2("课程"), html.Button("Start the lesson", title="按下开始")])
    assert english_words(" ".join(visible_texts(tree, []))) == ["Start", "the", "lesson"]
    assert english_words("以场景 paper-decode 重启 DeepSeek-R1 的 TTFT 与 EP320，每秒 400 Gbps") == []


@pytest.mark.parametrize("value,expected", [("zh", "zh"), ("EN", "en"), ("zh-CN", "zh"), ("zh_Hans", "zh")])
def test_language_codes(value, expected):
    assert i18n.check_lang(value) == expected


@pytest.mark.parametrize("value", ["fr", "", None, 3, "zh;drop", "x" * 500])
def test_unknown_language_names_the_allowed_ones(value):
    with pytest.raises(i18n.LangError, match="allowed en or zh"):
        i18n.check_lang(value)
    assert i18n.lang_or_default(value) == "en"


def test_gettext_translates_and_falls_back_to_english():
    assert i18n.gettext("zh")("Lessons") == "课程"
    assert i18n.gettext("en")("Lessons") == "Lessons"
    assert i18n.gettext("zh")("a text nobody translated") == "a text nobody translated"


def test_numbers_follow_the_locale():
    assert i18n.number(27197, "en") == "27,197"
    assert i18n.number(1943.24, "zh", 1) == "1,943.2"
    assert i18n.number(0.05512, "en", 2) == "0.06"
    assert i18n.percent(0.7921, "zh", 1) == "79.2%"
    assert i18n.number(None, "zh") == "–" and i18n.percent(float("nan"), "en") == "–"
    assert i18n.language_name("zh").startswith("中文")


def test_lang_query_sets_cookie_and_html_lang(dash_app):
    client = dash_app.server.test_client()
    r = client.get("/lessons?lang=zh")
    assert '<html lang="zh">' in r.get_data(as_text=True)
    assert "twin_lang=zh" in r.headers.get("Set-Cookie", "")
    r = client.get("/glossary")                      # the cookie is kept by the browser (test client)
    assert '<html lang="zh">' in r.get_data(as_text=True)
    r = client.get("/?lang=fr")                      # a bad value changes nothing, the page still loads
    assert r.status_code == 200 and '<html lang="zh">' in r.get_data(as_text=True)
    assert "Set-Cookie" not in r.headers
    r = client.get("/?lang=en")
    assert '<html lang="en">' in r.get_data(as_text=True)


def figure_texts(fig: dict) -> list[str]:
    """The words a chart shows: its title, axis titles and legend names."""
    lay = fig.get("layout") or {}
    out = [(lay.get("title") or {}).get("text") or ""]
    out += [((lay.get(ax) or {}).get("title") or {}).get("text") or "" for ax in ("xaxis", "yaxis", "yaxis2")]
    out += [a.get("text", "") for a in lay.get("annotations") or ()]
    out += [t for tr in fig.get("data") or () if "text" in (tr.get("mode") or "") for t in tr.get("text") or ()]
    return out + [tr.get("name") or "" for tr in fig.get("data") or ()]


def output_texts(value, out: list[str]) -> list[str]:
    """Visible text in a live callback's outputs (components, strings, figures, dropdown options)."""
    if isinstance(value, dict) and "layout" in value and "data" in value:
        out += figure_texts(value)
    elif isinstance(value, dict) and isinstance(value.get("label"), str):
        out.append(value["label"])
    elif isinstance(value, (list, tuple)):
        for v in value:
            output_texts(v, out)
    elif isinstance(value, (str, Component)):
        visible_texts(value, out)
    return out


# Live updates (page, tick arguments, outputs not checked: ids and data, not text)
LIVE = (("overview", {}, ()), ("topology", {"view_name": "supernode", "sel": {"kind": "node", "id": "n03"}},
         ("view", "select", "layout", "live")),     # ids and data, not text
        ("traffic", {}, ()), ("cache", {}, ()), ("tradeoffs", {"dep": None, "slo": 50, "kv": 4096}, ("dep", "slo")),
        ("failures", {"view_name": "supernode"}, ("view", "select", "layout", "live", "detect", "redundant", "weights",
                                                   "random", "random_rate", "kind", "target",
                                                   "factor_style", "period_style", "strips", "banner_cls")))


def test_live_updates_show_no_english_in_chinese(dash_app, twin_registry):
    """What the pages' live callbacks send (KPIs, chart titles and legends, help, stats, tables)."""
    import importlib
    import time
    tw = twin_registry.shared()
    t0 = time.monotonic()
    while len(tw.snapshot.history.get("t", [])) < 3 and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    scenarios = _scenarios()
    for page, state, skip in LIVE:
        mod = importlib.import_module(f"pages.{page}")
        with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
            out = mod.tick(1, "shared", None, **state)
        texts = output_texts([v for k, v in out.items() if k not in skip and k != "cursor"], [])
        leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in scenarios])}
        assert leftovers == {}, f"{page}: text outside the catalogs: {leftovers}"


@pytest.mark.parametrize("make,expected", [
    (lambda session: session.parse_speed(5000), "速度 = 5000：允许实时的 1 到 1000 倍，或 'max'"),
    (lambda session: session.parse_load(9), "负载 = 9：允许 0 < 负载 <= 5（容量的比例；1 = 100 %）"),
    (lambda session: session.parse_seed(-1), "种子 = -1：允许 0 到 2147483647 的整数"),
])
def test_control_errors_reach_the_browser_in_chinese(dash_app, make, expected):
    """The engine's English ControlError, translated at the UI boundary with its values kept; English
    and unknown forms pass through unchanged."""
    from twin.live import session
    from twin.ui.errors import explain
    with pytest.raises(session.ControlError) as info:
        make(session)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        assert explain(info.value) == expected
        assert explain(session.ControlError("a message of a new form")) == "a message of a new form"
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        assert explain(info.value) == str(info.value)


def test_explorer_callbacks_answer_in_chinese(dash_app):
    """What the Explorer sends: a refused form (its own checks and the sweep planner's, translated at
    the UI boundary), progress, the finished frontier's chart and the empty-CSV message."""
    from pages import explorer
    good = ["cloudmatrix-infer-paper", "paper-decode", "load", "0.4,0.8", "mtp", "true,false", 1, 10, "model"]
    bad = {0: "x", 3: "0.9:0.1:0.1", 3.5: None, 6: 99, 7: 1e9, 8: "gpu"}
    from twin.explore.points import KEYS
    scenarios = _scenarios() | set(KEYS)      # sweep keys: CLI names, shown as typed (as scenario names)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        msgs = []
        for i, v in bad.items():
            args = list(good)
            args[int(i)] = v if i != 3.5 else "0.1:5:0.05"
            msgs.append(explorer.on_start(1, *args, None)[1])
        job = {"state": "done", "done": 2, "total": 2, "cpu_s": 3.0, "ceiling_s": 36.0, "position": 2, "wait_s": 9,
               "cost_s": 3.0, "result": {"varied": ["load", "mtp"], "rows": [], "points": [
                   {"load": v, "mtp": m, "tokens_per_s_per_user": 20.0 + v, "goodput_per_chip": 900.0 * v}
                   for v in (0.4, 0.8) for m in (True, False)]}}
        out = list(explorer.progress_view(job)) + [explorer.on_csv(1, None, None)[1], explorer.progress_view(dict(job, state="running"))[2],
                                            explorer.progress_view(dict(job, state="queued"))[2]]
        texts = output_texts(msgs + out, [])
    assert "范围颠倒" in msgs[1] and "网格共" in msgs[2] and msgs[0] == "部署：请从列表中选择一个"
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in scenarios])}
    assert leftovers == {}, f"explorer: text outside the catalogs: {leftovers}"


def test_engine_event_lines_read_in_chinese(dash_app):
    """Fault, detection, recovery, policy, rate and refusal lines: English in the engine (unchanged for
    the CLI and JSON), Chinese on the dashboard with the fault kind in words and ids kept."""
    from twin.engine import Engine
    from twin.engine.commands import InjectFault, SetLoad, SetPolicy, SetRandom
    from twin.ui import components
    eng = Engine(scenario="paper-decode")
    eng.advance(1.0)
    for cmd in (InjectFault({"kind": "optical_flap", "target": "n20/l1-3--sp3/l2-7", "duration_s": 90}),
                InjectFault({"kind": "npu_die", "target": "n36/npu3/d1", "at_s": 5.0}),
                InjectFault({"kind": "l2", "target": "sp2/l2-5", "at_s": -5}), SetLoad(0.5),
                SetPolicy({"weights_from": "obs"}), SetRandom(0)):
        eng.submit(cmd)
    eng.advance(120.0)
    evs = list(eng.snapshot().events)
    assert "#1 optical_flap on n20/l1-3--sp3/l2-7 scheduled now" in [e["message"] for e in evs]
    assert {"fault", "detect", "recover", "error", "rate", "policy", "schedule"} <= {e["kind"] for e in evs}
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        texts = visible_texts(components.events(evs[::-1], "-"), [])
    assert "#1 光链路抖动：n20/l1-3--sp3/l2-7 立即注入" in texts
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"event lines outside the catalogs: {leftovers}"
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        assert "#1 optical link flapping on n20/l1-3--sp3/l2-7 scheduled now" in visible_texts(components.events(evs, "-"), [])


@pytest.mark.parametrize("system", ["cloudmatrix384", "gpu-cluster-h800"])
def test_topology_drawing_labels_read_in_chinese(dash_app, system):
    """The labels drawn on the topology (racks, UB planes, RDMA and VPC switches, storage) in Chinese;
    part ids (n07, L2-5, NPU3·d1) stay as they are, and English stays the engine's wording."""
    from twin.topology import static
    from twin.ui import topoview
    t = static(system)
    names = [topoview.AGG, t.node_ids()[0]] + list(t.subplane_ids()[:1])
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        labels = [el["data"]["label"] for n in names for el in topoview.view(t, n).elements if "label" in el["data"]]
    leftovers = {x: w for x in labels if (w := english_words(x))}
    assert labels and leftovers == {}, f"drawing labels outside the catalogs: {leftovers}"
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        en = {el["data"]["label"] for el in topoview.view(t, topoview.AGG).elements if "label" in el["data"]}
    assert {"RDMA spine", "VPC switch", "OBS storage"} <= en


def test_the_partition_banner_says_why_in_chinese(dash_app):
    from types import SimpleNamespace

    from twin.ui.failpanels import banner_of
    evs = [{"t": 1.0, "kind": "partition", "message": "partitioned: decode-0 cut off from the UB fabric; their "
            "requests wait until a path returns", "template": "partitioned: %(names)s cut off from the UB fabric; "
            "their requests wait until a path returns", "args": {"names": "decode-0"}},
           {"t": 2.0, "kind": "partition", "message": "KV transfer p0 -> d0: no rdma path; 3 request(s) wait"}]
    snap = SimpleNamespace(partitioned=True, message=evs[0]["message"], events=evs)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        (head, why), cls = banner_of(snap)
    assert why == "网络分区：decode-0 与 UB 网络断开；其请求等待路径恢复" and cls == "banner banner-bad"


def test_control_confirmations_and_the_action_log_read_in_chinese(twin_registry):
    """What the controls answer ("speed 20x", "reset: scenario ...") and the shared-action log: English
    for the CLI and JSON, Chinese on the dashboard (ids, names and numbers kept)."""
    import app as dash_app
    from twin.ui import eventtext
    from twin.ui import polling as live
    tw = twin_registry.shared()
    said = [tw.control("speed", 20, who="viewer ab12"), tw.control("speed", "max"), tw.control("pause"),
            tw.control("play", who="instructor (viewer ab12)"),
            tw.control("reset", {"scenario": "bursty-chat", "seed": 3, "load": 0.8}),
            tw.control("fault", {"kind": "l2", "target": "sp2/l2-5", "duration_s": 30}),
            tw.control("random", {"hours_per_sim_s": 2}), tw.control("random", {"hours_per_sim_s": 0}),
            tw.control("policy", {"detect_s": 5})]
    assert said[0] == "speed 20x"                                                # the English is unchanged
    assert said[4] == "reset: scenario bursty-chat, seed 3, load 80% of capacity"
    assert said[5] == "fault l2 sp2/l2-5 for 30 s"
    end = time.monotonic() + 15                    # the log records each answer, from the twin's thread
    while len(tw.actions(50)) < 1 + len(said) and time.monotonic() < end:
        time.sleep(0.05)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        texts = [eventtext.said(s) for s in said]
        acts = live.status_payload(tw)["actions"]
    assert texts[0] == "速度 20 倍" and texts[4] == "重置：场景 bursty-chat，种子 3，负载为容量的 80%"
    texts += [a["who"] + ": " + a["what"] for a in acts]
    assert len(acts) == live.ACTIONS_SHOWN and "template" not in acts[0]
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"confirmations outside the catalogs: {leftovers}"


def test_scenario_and_demo_descriptions_read_in_chinese(dash_app):
    """The start line's scenario description, the scenario list's hover texts and the fault demos'
    stories come from the catalog data, extracted as msgids (twin.cli.texts.data_texts)."""
    from twin.engine import Engine, list_scenarios
    from twin.ui import components
    from twin.ui import eventtext
    from twin.ui import faultconsole
    start = Engine(scenario="paper-decode").snapshot().events[0]
    assert start["kind"] == "start" and start["args"]["about"].startswith("The paper's decode setting")
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        lines = [eventtext.line({**start, "args": {**start["args"], "name": s["name"], "about": s["description"]}})
                 for s in list_scenarios() if s.get("description")]
        demos = [d.children[0].title for d in _find(faultconsole.demos(), None, "demos").children]
        scen = [o["title"] for o in _find(components.controls_bar(list_scenarios(), []), "ctl-scenario").options]
    names = [s["name"] for s in list_scenarios() if s.get("description")]
    assert len(lines) >= 10 and lines[names.index("paper-decode")].startswith("场景 paper-decode：论文的解码设置")
    assert len(demos) == 7 and all(len(t) > 40 for t in demos)
    assert scen[[s["name"] for s in list_scenarios()].index("paper-decode")].startswith("论文的解码设置")
    texts = lines + demos + scen
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"descriptions outside the catalogs: {leftovers}"


def _find(c, id_, class_name=None):
    """The component with this id (or class name) in a tree."""
    if isinstance(c, Component) and (getattr(c, "id", None) == id_ if id_ else getattr(c, "className", None) == class_name):
        return c
    for x in (c if isinstance(c, (list, tuple)) else [getattr(c, "children", None)]):
        if isinstance(x, (Component, list, tuple)) and (hit := _find(x, id_, class_name)) is not None:
            return hit
    return None


def test_co_pool_scheduler_lines_read_in_chinese(dash_app):
    """The Cloud scheduler's event lines (kind 'co-pool'): a group's move, its reason and a live knob
    change; English in the engine, Chinese on the dashboard with group names and knob names kept."""
    from twin.cloud import live
    from twin.engine import Engine
    from twin.ui import components
    eng = live.attach(Engine("copool-day", seed=3))
    eng.advance(1.5)
    eng.submit(live.SetCoPool({"policy": "dedicated", "dedicated_prefill_groups": 2, "dedicated_decode_groups": 1}))
    eng.advance(2.0)
    evs = [e for e in eng.events if e["kind"] == "copool"]
    assert evs[0]["message"] == "prefill-16 (16 NPUs) -> training: policy dedicated"
    assert evs[-1]["message"] == "co-pool: policy=dedicated, dedicated_prefill_groups=2, dedicated_decode_groups=1"
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        texts = visible_texts(components.events(evs, "-"), [])
    assert "prefill-16（16 个 NPU）→ 训练：策略 'dedicated'" in texts and "共池" in texts
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"co-pool lines outside the catalogs: {leftovers}"


REFUSALS = (  # what a viewer can be refused from the pages (free-text fault targets, the Cloud form, lists)
    ("fault", {"kind": "l2", "target": "nope"}), ("fault", {"kind": "npu_die", "target": "n99/npu3/d1"}),
    ("fault", {"kind": "l2", "target": "n20/npu3"}), ("fault", {"kind": "l2", "target": "n20/l1-3--sp3/l2-6"}),
    ("fault", {"kind": "optical_link", "target": "n20/l1-3--sp3/l2-999"}), ("fault", {"kind": "l2", "target": ""}),
    ("fault", {"kind": "bogus", "target": "n20"}), ("reset", {"scenario": "nope"}),
    ("reset", {"deployment": "nope"}), ("reset", {"trace": "nope"}), ("reset", {"faults": "nope"}),
    ("copool", {"policy": "dedicated"}))


def test_refusal_reasons_read_in_chinese(twin_registry):
    """Every refusal a page can meet is a known form (`errors.FORMS`), shown in Chinese with its values;
    part names and the topology's id hints in words too."""
    import app as dash_app
    from twin.cloud import live
    from twin.engine import Engine
    from twin.ui.errors import explain
    tw = twin_registry.shared()
    errors = []
    for action, value in REFUSALS:
        with pytest.raises(session.ControlError) as exc:
            tw.control(action, value)
        errors.append(exc.value)
    cloud = live.attach(Engine("copool-day", seed=3)).snapshot().cloud
    for knobs in ({"lend_below": 2}, {"lend_below": "x"}, {"dedicated_prefill_groups": 17},
                  {"train_from_h": 3, "train_to_h": 3}):
        with pytest.raises(ValueError) as exc:
            live.check(knobs, cloud)
        errors.append(exc.value)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        texts = [explain(e) for e in errors]
    assert texts[2] == "故障目标 'n20/npu3' 是NPU；故障类型 l2 作用于L2 UB 交换芯片（例如 'sp2/l2-5'）"
    leftovers = {t: w for t in texts if (w := [x for x in english_words(t) if x not in _scenarios()])}
    assert leftovers == {}, f"refusals outside the catalogs: {leftovers}"


def test_the_catalog_check_finds_texts_in_any_module_of_the_package(tmp_path, monkeypatch):
    """Issue 36: the sources were a list kept by hand that missed twin/engine/faults/rows.py, so its
    fault states stayed English in Chinese while `check` said complete. Any module is found now."""
    from twin.i18n import __main__ as i18n_cli
    deep = tmp_path / "twin" / "engine" / "faults"
    deep.mkdir(parents=True)
    (deep / "newmodule.py").write_text('from twin.i18n import N_\nSTATE = N_("a state nobody listed")\n')
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "newpage.py").write_text('def f(_):\n    return _("a page text nobody translated")\n')
    assert catalog.sources(tmp_path) == ["pages/newpage.py", "twin/engine/faults/newmodule.py"]
    found = catalog.problems(template(tmp_path))
    for lang in ("en", "zh"):
        assert f"{lang}: not in the catalog: 'a state nobody listed'" in found
        assert f"{lang}: not in the catalog: 'a page text nobody translated'" in found
    monkeypatch.setattr(catalog, "ROOT", tmp_path)
    assert i18n_cli.main(["check"]) == 1


def test_every_fault_state_reads_in_chinese():
    from twin.engine.faults.rows import state
    zh = i18n.gettext("zh")
    states = {state(r, 10.0) for r in ({"active": True, "served_s": 5}, {"active": True, "detect_s": 1},
                                       {"active": True}, {"recover_s": 3}, {"at_s": 20}, {"at_s": 5})}
    assert {s: zh(s) for s in states} == {
        "served again · part in repair": "已恢复服务 · 部件修复中", "active · detected": "生效中 · 已检测",
        "active": "生效中", "recovered": "已恢复", "scheduled": "已计划", "starting": "即将生效"}
