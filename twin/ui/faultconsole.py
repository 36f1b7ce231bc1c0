"""The Failures page's layout parts: fault console, fault policy, random failures, demos and the
topology picker, plus the KPI charts it marks faults on. System-free on purpose: the page's first
tick fills in everything that depends on the system the viewer's twin runs."""
from __future__ import annotations

from dash import dcc, html

from twin.engine.faults import KINDS, RANDOM_MAX
from twin.topology import StaticTopology

from twin.ui import components
from twin.ui import faultview
from twin.ui import figures
from twin.ui import theme
from twin.ui import topostyle
from twin.ui import topoview
from twin.ui.lang import N_, _, unit

P = "fl"
CHART_H = 230
DEFAULT_KIND = "l2"

CHARTS = {
    "tpot": figures.StripSpec(N_("Time per output token (ms)"), "ms", (
        figures.Series("tpot_p50_ms", "p50", theme.PURPLE), figures.Series("tpot_p99_ms", "p99", theme.PINK, dash="dot")),
        robust=True),
    "ttft": figures.StripSpec(N_("Time to first token p50 (s)"), "s", (
        figures.Series("ttft_p50_ms", "p50", theme.TEAL, scale=1e-3),), robust=True),
    # both counted when a request finishes (its output tokens, meeting the SLOs or not): one basis, so
    # goodput <= all output; tokens counted as generated ("output_tps") run ahead in a stall's backlog
    "good": figures.StripSpec(N_("Goodput (output tokens/s meeting the SLOs)"), "tok/s", (
        figures.Series("goodput_tps", N_("goodput"), theme.GREEN, fill=True),
        figures.Series("finished_output_tps", N_("all finished output"), theme.ORANGE, dash="dot"))),
    "slo": figures.StripSpec(N_("SLO attainment (%)"), "%", (
        figures.Series("slo_attainment", N_("TTFT and TPOT met"), theme.BLUE, scale=100),), y_range=(0, 105)),
}

def picker_help(info) -> str:
    """How to pick a part on the drawing of the system on screen."""
    if info.supernode:
        return _("Click a part to pick it (the fault kind follows). The whole supernode shows nodes, UB "
                 "sub-planes and RDMA switches; open a node for its dies, CPUs, L1 switches and NICs, or a "
                 "sub-plane for its L2 switches and optical links. Failed parts are black with a red dashed outline; "
                 "a red ring and ✕n mark a group with n failed parts inside.")
    return _("Click a part to pick it (the fault kind follows). The whole cluster shows its servers and RDMA "
             "switches; open a server for its GPUs, NVSwitch, CPUs and NICs. Failed parts are black with a red dashed "
             "outline; a red ring and ✕n mark a group with n failed parts inside.")


def initial(t: StaticTopology | None, target: str | None, kind: str | None) -> tuple[str, str]:
    """Kind and target from the URL (?target=<id>&kind=<kind>), checked against the system on screen
    (`t`; None before the first tick: the part read from its id). A target wins over the kind: the
    kind becomes the one that breaks it; a target that cannot be broken is kept as given (the hint
    says why), never swapped for another part."""
    target = (target or "").strip()
    kind = kind if kind in KINDS else None
    if not target:
        kind = kind or DEFAULT_KIND
        return kind, faultview.example(kind)
    picked = faultview.pick(t, target, kind)
    return picked if picked else (kind or DEFAULT_KIND, target)


def extra_styles(kind: str) -> tuple[dict, dict]:
    """Which of the kind-specific inputs (factor, period) the kind's declaration asks for."""
    show = getattr(faultview.extra_field(kind), "name", None)
    return ({} if show == "factor" else {"display": "none"}), ({} if show == "period_s" else {"display": "none"})


def field_titles(kind: str) -> tuple[str, str]:
    """The tooltips of the factor and period inputs: the kind's own help for them (a fraction of
    what is kept, how often a link flaps), empty for a field the kind does not have."""
    k = KINDS.get(kind) if isinstance(kind, str) else None
    return tuple(_(k.field(name).help) if k and k.field(name) else "" for name in ("factor", "period_s"))


def field(label: str, child, title: str = "", **kw) -> html.Div:
    return html.Div([html.Label(label, className="ctl-label"), child], className="field", title=title, **kw)


def console(kind: str, target: str) -> html.Div:
    fstyle, pstyle = extra_styles(kind)
    ftitle, ptitle = field_titles(kind)
    return components.panel([
        html.Div([
            field(_("Fault"), components.dropdown(id=f"{P}-kind", options=faultview.kind_options(), value=kind, clearable=False,
                                         searchable=True, className="dd fl-kind")),
            field(_("Part (topology id)"), html.Div([
                dcc.Input(id=f"{P}-target", type="text", value=target, list=f"{P}-target-list",
                          className="text-input fl-target", autoComplete="off", spellCheck=False,
                          placeholder=faultview.example(kind)),
                html.Datalist(id=f"{P}-target-list"),
            ]), title=_("A topology id: dies nNN/npuP/dD, NPUs nNN/npuP, CPUs nNN/cpuC, nodes nNN, L1 "
                        "nNN/l1-K, L2 spK/l2-J, sub-planes spK, optical links nNN/l1-K--spK/l2-J, RDMA NICs "
                        "nNN/rdmaP, RDMA switches rdma/spine-0, VPC cards nNN/vpc")),
        ], className="fl-row"),
        html.Div(id=f"{P}-target-hint", className="hint fl-hint"),
        html.Div([
            field(_("At sim time (s)"), dcc.Input(id=f"{P}-at", type="text", placeholder=_("e.g. 300 or +30"),
                                                className="num-input", autoComplete="off"),
                   title=_("For Schedule: a sim time in seconds, or +N for N seconds from now")),
            field(_("Duration (s, optional)"), dcc.Input(id=f"{P}-dur", type="text", placeholder=_("until repaired"),
                                                       className="num-input", autoComplete="off"),
                   title=_("How long the part stays broken; empty = until detected and repaired (policy)")),
            field(_("Capacity kept (0–1)"), dcc.Input(id=f"{P}-factor", type="text", placeholder="0.5",
                                                    className="num-input", autoComplete="off"),
                   title=ftitle, id=f"{P}-factor-wrap", style=fstyle),
            field(_("Flap period (s)"), dcc.Input(id=f"{P}-period", type="text", placeholder="10",
                                                className="num-input", autoComplete="off"),
                   title=ptitle,
                   id=f"{P}-period-wrap", style=pstyle),
            html.Div([
                html.Button(_("Inject now"), id=f"{P}-inject", className="btn btn-danger", n_clicks=0,
                            title=_("Break the part at the current sim time")),
                html.Button(_("Schedule"), id=f"{P}-schedule", className="btn", n_clicks=0,
                            title=_("Break the part at the sim time given on the left")),
            ], className="field-row fl-buttons"),
        ], className="fl-row fl-row-end"),
        html.Div(id=f"{P}-msg", className="ctl-msg", role="status"),
        html.Div(id=f"{P}-lock", className="lock-note"),
    ], _("Fault console"), "config", className="fl-console")


def policy() -> html.Div:
    return components.panel([
        html.Div([
            field(_("Detect after (s)"), dcc.Input(id=f"{P}-detect", type="number",
                                                 className="num-input", debounce=True),
                   title=_("Seconds from a fault to its detection (0 to 86,400); ref 6: about one minute")),
            field(_("Redundant experts"), dcc.RadioItems(
                id=f"{P}-redundant", options=[{"label": _("on"), "value": "on"}, {"label": _("off"), "value": "off"}],
                inline=True,
                className="radio-pills"),
                title=_("On: a redundant expert takes over a lost decode die in about a second. Off: the "
                        "decode instance restarts and reloads its weights")),
            field(_("Weights from"), dcc.RadioItems(
                id=f"{P}-weights", options=[{"label": _("EMS cache"), "value": "ems"},
                                            {"label": _("object storage"), "value": "obs"}],
                inline=True, className="radio-pills"),
                title=_("Where a restarting instance loads the model: the EMS model cache (seconds) or "
                        "OBS object storage (minutes)")),
            html.Button(_("Apply policy"), id=f"{P}-policy-apply", className="btn", n_clicks=0),
        ], className="fl-row fl-row-end"),
        html.Div(id=f"{P}-policy-now", className="hint"),
        html.Div(_("A policy change applies to faults that start after it."), className="hint small"),
    ], _("Fault policy"), "config")


def random_failures() -> html.Div:
    return components.panel([
        html.Div([
            dcc.Checklist(id=f"{P}-random", options=[{"label": " " + _("Random failures"), "value": "on"}],
                          value=[], className="switch"),
            field(_("Failure-clock hours per sim second"), dcc.Input(
                id=f"{P}-random-rate", type="number", value=1, className="num-input", debounce=True),
                title=_("How fast the failure clock runs (0 < x <= %(max)s): at 1, a simulated second stands "
                        "for an hour of component MTBF (catalog assumptions)") % {"max": f"{RANDOM_MAX:g}"}),
        ], className="fl-row fl-row-end"),
        html.Div(id=f"{P}-random-now", className="hint"),
    ], _("Random failures"), "model")


def demos() -> html.Div:
    items = []
    for d in faultview.demos():
        at = ", ".join(f"{a:g}" for a in d["at_s"])
        meta = _("%(scenario)s · seed %(seed)s · fault at %(at)s s") % {"scenario": d["scenario"], "seed": d["seed"],
                                                                       "at": at}
        story = _(d["description"])          # a catalog msgid (twin.cli.texts.data_texts)
        items.append(html.Div([
            html.Button(_(d["title"]), id={"type": f"{P}-demo", "index": d["name"]}, className="btn demo-btn",
                        n_clicks=0, title=f"{story} ({d['name']}: {meta}, {d['duration_s']:g} {unit('s')})".strip()),
            html.Div(meta, className="demo-meta"),
        ], className="demo"))
    return components.panel([
        html.Div(items, className="demos"),
        html.Div(_("A demo resets the twin you view to its scenario, seed, policy and faults, so it replays "
                   "exactly. Hover a button for the story; at 20× a fault at 120 s comes in 6 s."),
                 className="hint small"),
    ], _("Demos"), "config")


def legend() -> html.Div:
    return html.Div([
        html.Span([html.Span(className="swatch", style={"background": theme.RED, "opacity": 0.5}), _("service disturbed (until rerouted or recovered)")]),
        html.Span([html.Span(className="swatch swatch-line", style={"background": theme.RED}), _("struck")]),
        html.Span([html.Span(className="swatch swatch-dash", style={"borderColor": theme.YELLOW}), _("detected")]),
    ], className="legend")


def canvas(info=None, v=None):
    """The picker's drawing: empty at first, then the view `v` of the system `info` (a new one
    whenever the system changes, see `topostyle.canvas`)."""
    return topostyle.canvas(f"{P}-cy", topostyle.picker_stylesheet(), padding=14, height=420, class_name="topo-cy fl-cy",
                     elements=v.elements if v else [], view=f"{info.name}:{v.name}" if v else "")


def picker() -> html.Div:
    """The topology picker; its elements arrive with the second tick (drawing them takes the browser
    about a second, which would otherwise hold back the page's first numbers)."""
    return components.panel([
        html.Div([
            components.dropdown(id=f"{P}-view-select", options=[], value=topoview.AGG,
                         clearable=False, className="dd dd-wide"),
            html.Span(id=f"{P}-picker-help", className="hint small"),
        ], className="fl-topo-bar"),
        topostyle.legend(busy=False),
        html.Div(canvas(), id=f"{P}-cy-wrap"),
        html.Div(id=f"{P}-failed", className="fl-failed"),
    ], _("Pick a part · failed parts in red"), "sim")

