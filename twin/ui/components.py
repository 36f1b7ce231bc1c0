"""Small Dash component builders: provenance tags, KPI cards, panels, charts with an (i), badges,
the run-control bar."""
from __future__ import annotations

import hashlib

from dash import dcc, html

from twin.live import session
from twin.model.config import catalog
from twin.model.settings import get as setting
from twin.live.tracestore import UPLOAD_MAX_BYTES, names

from twin.ui import chartinfo, eventtext, teach
from twin.ui.lang import N_, _, unit, unit_or_text

# How a number was obtained (design convention 4): shown as a small tag next to it.
PROVENANCE = {
    "sim": (N_("simulated"), N_("Measured in the running discrete-event simulation (SimPy engine)")),
    "model": (N_("model"), N_("Computed by the calibrated operator-level performance model (twin.predict.perf)")),
    "paper": (N_("paper"), N_("Published value from the CloudMatrix384 / CloudMatrix-Infer paper")),
    "config": (N_("config"), N_("Set in the catalog or by the controls")),
}


def tag(kind: str) -> html.Span:
    text, title = PROVENANCE[kind]
    return html.Span(_(text), className=f"tag tag-{kind}", title=_(title))


def kpi(id_: str, label: str, unit: str = "", source: str = "sim", hint: str = "") -> html.Div:
    """A KPI card whose value lives in the element with id `id_` (updated by the page's tick)."""
    return html.Div([
        html.Div([html.Span(_gloss(label), id=f"{id_}-label", className="kpi-label"), tag(source)], className="kpi-head"),
        html.Div([html.Span("–", id=id_, className="kpi-value"),
                  html.Span(unit_or_text(unit), className="kpi-unit")], className="kpi-body"),
        html.Div(hint, id=f"{id_}-hint", className="kpi-hint") if hint else None,
    ], className="kpi", title=hint or label)


def info(text: str, key: str) -> html.Span:
    """An (i) whose tooltip says what a chart shows and where its numbers come from. It shows on
    hover and on keyboard focus (tab stop); the tooltip is the icon's accessible description."""
    tip = f"info-{key}"
    return html.Span([html.Span("i", className="info-i", **{"aria-hidden": "true"}),
                      html.Span(text, id=tip, className="info-tip", role="tooltip")],
                     className="info", tabIndex="0", role="note", **{"aria-describedby": tip})


def panel(children, title: str | None = None, source: str | None = None, className: str = "",
          extra=None, info_text: str | None = None) -> html.Div:
    """A titled box; `info_text` puts the (i) of the chart it holds next to the title. Glossary
    acronyms in a text title get their hover definition."""
    head = None
    if title:
        key = hashlib.sha1((info_text or "").encode()).hexdigest()[:8]
        head = html.Div([html.H3(_gloss(title)), info(info_text, key) if info_text else None,
                         tag(source) if source else None, extra], className="panel-head")
    return html.Div([head, html.Div(children, className="panel-body")], className=f"panel {className}")


def _gloss(label):
    return teach.glossed(label) if isinstance(label, str) else label


def graph(id_: str, figure: dict, height: int = 230, info_text: str | None = None):
    """A chart whose toolbar (on hover) has one button: export as PNG, named after the chart.
    The chart carries an (i) in its top-left corner saying what it shows and where its numbers
    come from: `info_text`, else its entry in `chartinfo.INFO` (every page chart has one, here or in
    its panel's head)."""
    g = dcc.Graph(id=id_, figure=figure, style={"height": f"{height}px"}, config={
        "displayModeBar": "hover", "displaylogo": False, "modeBarButtons": [["toImage"]],
        "toImageButtonOptions": {"format": "png", "filename": id_, "scale": 2}, "responsive": True})
    info_text = info_text or chartinfo.text(id_)
    if not info_text:
        return g
    return html.Div([g, info(info_text, id_)], className="graph-wrap")


def dropdown(**kw) -> dcc.Dropdown:
    """A dcc.Dropdown whose own words (search box, 'no options found', ...) are in the viewer's
    language; Dash draws them in English otherwise."""
    return dcc.Dropdown(labels={
        "search": _("Search"), "no_options_found": _("No options found"), "clear_search": _("Clear search"),
        "clear_selection": _("Clear selection"), "select_all": _("Select all"), "deselect_all": _("Deselect all"),
        "selected_count": _("{num_selected} selected")}, **kw)


def badge(ok: bool, text_ok: str = N_("PASS"), text_bad: str = N_("FAIL")) -> html.Span:
    return html.Span(_(text_ok if ok else text_bad), className="badge " + ("badge-ok" if ok else "badge-bad"))


def page_header(title: str, lede: str, extra=None) -> html.Div:
    return html.Div([html.Div([html.H2(title), html.P(lede, className="lede")]), extra],
                    className="page-header")


def fmt(v, digits: int = 3, unit: str = "") -> str:
    """Human number: 1,943 / 49.4 / 0.537 / 12.3k / 1.2M; '–' for missing."""
    if v is None:
        return "–"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if f != f or f in (float("inf"), float("-inf")):
        return "–"
    a = abs(f)
    if a >= 1e6:
        s = f"{f / 1e6:.{max(digits - 1, 1)}g}M"
    elif a >= 1e4:
        s = f"{f / 1e3:,.1f}k"
    elif a >= 100:
        s = f"{f:,.0f}"
    elif a >= 1:
        s = f"{f:.{digits}g}"
    elif a == 0:
        s = "0"
    else:
        s = f"{f:.{digits}g}"
    return s + unit


def pct(v) -> str:
    if v is None:
        return "–"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "–"
    if f != f:
        return "–"
    return f"{f * 100:.1f}"


# ---- run-control bar (shell) ------------------------------------------------------------------

def trace_options() -> list[dict]:
    """The Trace list: the scenario's own workload, then every named trace (no paths)."""
    return [{"label": _("scenario's workload"), "value": ""}] + [{"label": n, "value": n} for n in names()]


# The control bar's number fields: the declared setting each one sets, and the scale it is shown in.
CONTROL_FIELDS = {"speed": ("speed", 1), "load": ("load", 100), "seed": ("live_seed", 1)}   # load in %


def allowed(field: str, sep: str = " to ") -> str:
    """A control-bar field's bounds, from its declared setting (twin.model.settings): "0 to 500" (load, %)."""
    key, scale = CONTROL_FIELDS[field]
    s = setting(key)
    return sep.join(f"{x * scale:.0f}" if s.integer else f"{x * scale:g}" for x in (s.lo, s.hi))


def bounds(field: str) -> dict:
    """A control-bar field's bounds as message values: {"lo": "1", "hi": "1000"}."""
    return dict(zip(("lo", "hi"), allowed(field, " ").split()))


def presets(field: str) -> tuple:
    """The preset buttons of a control-bar field (its declared setting's presets)."""
    return setting(CONTROL_FIELDS[field][0]).presets


def deployment_options(deployments: list[str]) -> list[dict]:
    """The deployment list's options: each id over its one-line catalog description (translated), the
    description hidden in the closed box (assets/42_dropdown.css) and searched too."""
    cat = catalog().deployments
    return [{"label": _("scenario's deployment"), "value": ""}] + [
        {"label": html.Span([html.Span(d, className="dd-id"), html.Span(_(cat[d].description), className="dd-desc")]),
         "value": d, "title": _(cat[d].description), "search": f"{d} {_(cat[d].description)}"} for d in deployments]


def controls_bar(scenarios: list[dict], deployments: list[str]) -> html.Div:
    """Run controls shown on every page. Values are per-viewer; actions go to the viewed twin.

    Number fields carry no HTML min/max on purpose: an out-of-range value would then never reach
    the server and the user would get no explanation. The allowed range is in the placeholder or
    label, and the server answers a bad value with a message naming it."""
    scen_opts = [{"label": s["name"], "value": s["name"], "title": _(s.get("description", ""))}
                 for s in scenarios]
    dep_opts = deployment_options(deployments)
    live_row = html.Div([
        html.Div([
            html.Button(_("Pause"), id="ctl-play", className="btn btn-primary", n_clicks=0,
                        title=_("Play or pause the twin you are viewing")),
        ], className="ctl-group"),
        html.Div([
            html.Span(_("Speed"), className="ctl-label"),
            html.Div([html.Button(_("max") if v == "max" else f"{v}×", id={"type": "ctl-speed-btn", "index": str(v)},
                                  className="pill", n_clicks=0,
                                  title=(_("as fast as possible") if v == "max" else _("%(v)s times real time") % {"v": v}))
                      for v in presets("speed")], className="pills", id="ctl-speed"),
            html.Div(dcc.Input(id="ctl-speed-custom", type="number", step=1,
                               debounce=True, placeholder=f"{allowed('speed', '–')}×",
                               className="num-input"),
                     title=_("Custom speed: %(lo)s to %(hi)s times real time (Enter to apply)") % bounds("speed")),
        ], className="ctl-group"),
        html.Div([
            html.Span(_("Load"), className="ctl-label",
                      title=_("Offered load as a fraction of the deployment's capacity (synthetic workloads)")),
            html.Div([html.Button(f"{v}%", id={"type": "ctl-load-btn", "index": str(v)}, className="pill",
                                  n_clicks=0, title=_("arrivals at %(v)s%% of the deployment's capacity") % {"v": v})
                      for v in presets("load")], className="pills", id="ctl-load"),
            html.Div(dcc.Input(id="ctl-load-custom", type="number", step=1, debounce=True,
                               placeholder=f"{allowed('load', '–')}%", className="num-input"),
                     title=_("Custom load: %(lo)s to %(hi)s %% of capacity (Enter to apply)") % bounds("load")),
        ], className="ctl-group", id="ctl-load-wrap"),
        html.Div([
            html.Span(id="ctl-status-state", className="state-pill"),
            html.Span(id="ctl-status-time", className="status-num", title=_("simulated time")),
            html.Span(id="ctl-status-speed", className="status-num",
                      title=_("set speed / achieved speed (sim seconds per wall second)")),
        ], className="ctl-group ctl-status"),
    ], className="ctl-row")

    setup_row = html.Details([
        html.Summary([html.Span(_("Scenario & twin"), className="summary-title"),
                      html.Span(id="ctl-status-scenario", className="summary-note")]),
        html.Div([
            html.Div([
                html.Label(_("Scenario"), htmlFor="ctl-scenario", className="ctl-label"),
                dropdown(id="ctl-scenario", options=scen_opts, value="default", clearable=False,
                             className="dd dd-wide"),
            ], className="field"),
            html.Div([
                html.Label(_("Deployment"), htmlFor="ctl-deployment", className="ctl-label"),
                dropdown(id="ctl-deployment", options=dep_opts, value="", clearable=False,
                             className="dd dd-wide"),
            ], className="field"),
            html.Div([
                html.Label(_("Trace"), htmlFor="ctl-trace", className="ctl-label"),
                html.Div([
                    dropdown(id="ctl-trace", options=trace_options(), value="", clearable=False,
                                 className="dd dd-wide"),
                    dcc.Upload(html.Button(_("Upload…"), className="btn btn-small", n_clicks=0),
                               id="ctl-trace-upload", max_size=UPLOAD_MAX_BYTES, multiple=False,
                               className="upload"),
                ], className="trace-pick",
                    title=_("A trace the twin ships or the operator registered, or upload your own (Mooncake "
                            "JSONL, Azure or BurstGPT CSV; at most %(mb)s MB, checked and kept in memory; "
                            "only you see it in this list)") % {"mb": UPLOAD_MAX_BYTES // 2**20}),
            ], className="field"),
            html.Div([
                html.Label(_("Seed") + f" ({allowed('seed', '–')})", htmlFor="ctl-seed", className="ctl-label"),
                dcc.Input(id="ctl-seed", type="number", step=1, value=0,
                          className="num-input num-wide"),
            ], className="field"),
            html.Button(_("Apply & reset"), id="ctl-reset", className="btn", n_clicks=0,
                        title=_("Restart the viewed twin with these settings (the running twin is kept "
                                "if they are invalid)")),
            html.Div(className="ctl-sep"),
            html.Div([
                html.Button(_("Open private sandbox"), id="ctl-sandbox", className="btn", n_clicks=0,
                            title=_("Your own twin, not shared (one per browser, at most %(n)s at once; freed "
                                    "after %(min)s min without an action)") % {
                                "n": session.MAX_SANDBOXES, "min": f"{session.SANDBOX_TTL_S / 60:.0f}"}),
                html.Button(_("Back to shared twin"), id="ctl-shared", className="btn", n_clicks=0),
            ], className="field field-row"),
            html.Div([
                dcc.Input(id="ctl-token-input", type="password", placeholder=_("instructor token"),
                          className="text-input", debounce=True, autoComplete="off"),
                html.Button(_("Unlock"), id="ctl-unlock", className="btn", n_clicks=0),
                html.Button(_("Sign out"), id="ctl-signout", className="btn", n_clicks=0, style={"display": "none"},
                            title=_("End this tab's instructor credential: the shared controls lock again here")),
            ], className="field field-row", id="ctl-token-wrap"),
        ], className="setup-grid"),
    ], className="ctl-setup", id="ctl-setup")

    return html.Div([
        live_row,
        setup_row,
        html.Div([
            html.Div(id="ctl-msg", className="ctl-msg", role="status"),
            html.Span(html.Button(_("Apply this link to the shared twin"), id="ctl-url-apply", n_clicks=0,
                                  className="btn btn-small", title=_(
                                      "Restart the shared twin, for everyone watching it, with the settings of "
                                      "the link you opened")), id="ctl-url-confirm", style={"display": "none"}),
            html.Div(id="ctl-lock-note", className="lock-note"),
        ], className="ctl-feedback"),
        html.Details([
            html.Summary([html.Span(_("Shared actions"), className="summary-title"),
                          html.Span(id="ctl-log-last", className="summary-note")]),
            html.Div(id="ctl-log", className="action-log"),
        ], className="ctl-log-wrap", id="ctl-log-details"),
    ], className="controls", id="controls")


def events(evs, empty: str, t_format: str = ".1f", extra=None) -> list:
    """Engine events (dicts {"t", "kind", "message"}), newest first, one line each, in the viewer's
    language (`eventtext`); `extra(event)` may add a component at the end of a line (a link)."""
    if not evs:
        return [html.Div(empty, className="muted")]
    s = unit("s")
    return [html.Div([html.Span(f"t={e.get('t', 0):{t_format}} {s}", className="ev-t"),
                      html.Span(eventtext.kind(e), className=f"ev-kind ev-{e.get('kind', '')}"),
                      html.Span(eventtext.line(e), className="ev-msg"), extra(e) if extra else None],
                     className="ev")
            for e in evs]
