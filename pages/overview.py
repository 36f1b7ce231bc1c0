"""Overview: live KPIs of the running twin with short history charts."""
from __future__ import annotations

import dash
from dash import Output, html, no_update

from twin.model.config import catalog
from twin.ui import components
from twin.ui import eventtext
from twin.ui import runnable
from twin.ui import figures
from twin.ui import teach
from twin.ui import theme
from twin.ui import words
from twin.ui.polling import Tick, page_stores, page_tick
from twin.ui import lang
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/", name=N_("Overview"), title=lang.title("Overview"),
                   order=0, live=("ov-cursor", "#ov-out-tps"))

P = "ov"

# (element id suffix, label, unit, kpi key, formatter, hint)
KPIS = (
    ("in-tps", N_("Input tokens/s"), "tok/s", "input_tps", components.fmt, N_("prompt tokens processed per second (%(whole)s)")),
    ("out-tps", N_("Output tokens/s"), "tok/s", "output_tps", components.fmt, N_("generated tokens per second")),
    ("in-npu", N_("Input per prefill %(chip)s"), "tok/s", "input_tps_per_npu", components.fmt, N_("prefill throughput per %(chip)s of the prefill pool")),
    ("out-npu", N_("Output per decode %(chip)s"), "tok/s", "output_tps_per_npu", components.fmt, N_("generated tokens per second per %(chip)s of the decode pool")),
    ("ttft", N_("TTFT p50 / p99"), "s", None, None, N_("time to first token of recently finished requests")),
    ("tpot", N_("TPOT p50 / p99"), "ms", None, None, N_("time per output token of recently finished requests")),
    ("slo", N_("SLO attainment"), "%", "slo_attainment", components.pct, N_("completions meeting both TTFT and TPOT SLOs")),
    ("hit", N_("Cache hit ratio"), "%", "token_hit_ratio", components.pct, N_("EMS context cache: prompt tokens found in cache")),
    ("inflight", N_("Requests in flight"), "", "in_flight", components.fmt, N_("arrived, not finished")),
    ("gaveup", N_("Refused / timed out"), "", None, None,
     N_("arrivals refused (overloaded, or more KV than a die holds) / requests whose client gave up waiting for prefill")),
    ("queue", N_("Queued prefill / decode"), "", None, None, N_("requests waiting for a prefill batch / a decode slot")),
    ("util-p", N_("Prefill %(chip)s busy"), "%", "util_prefill", components.pct, N_("busy fraction of the prefill pool")),
    ("util-d", N_("Decode %(chip)s busy"), "%", "util_decode", components.pct, N_("share of time a decode step runs, whatever its batch")),
    ("useful", N_("Decode useful work"), "%", "decode_useful", components.pct, None),
)

CHARTS = {
    "thr": figures.StripSpec(N_("Throughput (tokens/s)"), "tok/s", (
        figures.Series("input_tps", N_("input"), theme.BLUE), figures.Series("output_tps", N_("output"), theme.ORANGE, axis="y2")),
        y2_title=N_("output tok/s")),
    "ttft": figures.StripSpec(N_("Time to first token (s)"), "s", (
        figures.Series("ttft_p50_ms", N_("p50"), theme.TEAL, scale=1e-3), figures.Series("ttft_p99_ms", N_("p99"), theme.RED, scale=1e-3, dash="dot"))),
    "tpot": figures.StripSpec(N_("Time per output token (ms)"), "ms", (
        figures.Series("tpot_p50_ms", N_("p50"), theme.PURPLE), figures.Series("tpot_p99_ms", N_("p99"), theme.PINK, dash="dot"))),
    "util": figures.StripSpec(N_("Busy vs useful work (%)"), "%", (
        figures.Series("util_prefill", N_("prefill busy"), theme.TEAL, scale=100),
        figures.Series("util_decode", N_("decode busy"), theme.PURPLE, scale=100, dash="dot"),
        figures.Series("decode_useful", N_("decode useful work"), theme.ORANGE, scale=100)),
        y_range=(0, 105)),
    "slo": figures.StripSpec(N_("SLO attainment and cache hits (%)"), "%", (
        figures.Series("slo_attainment", N_("SLO met"), theme.GREEN, scale=100),
        figures.Series("token_hit_ratio", N_("token hits"), theme.YELLOW, scale=100, dash="dot")), y_range=(0, 105)),
    "req": figures.StripSpec(N_("Requests"), N_("requests"), (
        figures.Series("in_flight", N_("in flight"), theme.BLUE), figures.Series("queue_prefill", N_("queued prefill"), theme.ORANGE),
        figures.Series("queue_decode", N_("queued decode"), theme.PURPLE))),
}


def _useful_card(label: str) -> html.Div:
    """Decode useful work: simulated tokens/s per decode NPU against the model's capacity at the
    deployment's operating point, so both tags show; its hint line is filled live."""
    return html.Div([
        html.Div([html.Span(label, id=f"{P}-useful-label", className="kpi-label"), html.Span([components.tag("sim"), " / ", components.tag("model")], style={"whiteSpace": "nowrap"})],
                 className="kpi-head"),
        html.Div([html.Span("–", id=f"{P}-useful", className="kpi-value"), html.Span("%", className="kpi-unit")],
                 className="kpi-body"),
        html.Div("", id=f"{P}-useful-hint", className="kpi-hint"),
    ], className="kpi", title=_("Decode useful work: simulated output tokens/s per decode chip divided by the "
                                "model's tokens/s per NPU at the deployment's operating point (its batch cap, "
                                "4K context), a healthy fabric"))


WARM_S = 120.0    # the first two simulated minutes: the decode batch still fills (assumption: paper-decode's
#                   useful work climbs from ~25 % to its level over about that long at load 0.9)
PREFILL_CARDS = ("in-tps", "in-npu", "hit", "util-p")    # nothing to show on a decode-only scenario


def useful_hint(k: dict, w: dict, sim_time: float = WARM_S) -> str:
    """The useful-work card's hint: simulated vs model tok/s per chip, and the batch now; in the first
    WARM_S it says the twin is warming up (steps run at a small batch: busy, not yet useful)."""
    warm = (_("warming up: the decode batch is still filling, so the busy %(chip)s do little useful work yet") % w
            + " · ") if sim_time < WARM_S else ""
    return warm + (_("%(sim)s of %(cap)s tok/s per %(chip)s (model, operating point) · batch now %(batch)s per %(chip)s, "
              "model %(now)s tok/s") % {"sim": components.fmt(k.get("output_tps_per_npu")), "cap": components.fmt(k.get("decode_op_tps_per_npu")),
                                       "batch": components.fmt(k.get("decode_batch_per_npu")),
                                       "now": components.fmt(k.get("decode_model_tps_per_npu")), "chip": w["chip"]})


def slo_why(k: dict, deployment: str) -> str:
    """Why SLO attainment is low when no fault explains it: which SLO the median request misses. A
    deployment run at its TPOT SLO's edge falls off a cliff when its decode batch drifts up a little
    (Qwen3 on the default scenario near t = 2,800 s: TPOT p50 49.5 -> 50.4 ms at 60 -> 63 per NPU)."""
    slo = k.get("slo_attainment")
    dep = catalog().deployments.get(deployment)
    if dep is None or slo is None or not slo == slo or slo >= 0.9:
        return ""
    tpot, ttft = k.get("tpot_p50_ms"), k.get("ttft_p50_ms")
    if dep.tpot_slo_ms and tpot is not None and tpot > dep.tpot_slo_ms:
        return _("low: TPOT p50 %(v)s ms is over the %(slo)s ms SLO; the decode batch (%(batch)s per chip) runs at "
                 "the SLO's edge, so a small rise tips most requests over") % {
            "v": f"{tpot:.1f}", "slo": f"{dep.tpot_slo_ms:g}", "batch": components.fmt(k.get("decode_batch_per_npu"))}
    if dep.ttft_slo_ms and ttft is not None and ttft > dep.ttft_slo_ms:
        return _("low: TTFT p50 %(v)s s is over the %(slo)s s SLO: requests wait for prefill") % {
            "v": f"{ttft / 1000:.2f}", "slo": f"{dep.ttft_slo_ms / 1000:g}"}
    return ""


def _labels(w: dict, scenario: str | None = None) -> tuple[list, list]:
    """Every card's label and hint in the words of the system shown (twin.ui.words); on a decode-only
    scenario the input, prefill and cache cards say why they read 0 or "–"."""
    empty = scenario is not None and runnable.decode_only(scenario)
    return ([teach.glossed(_(label) % w) for _sfx, label, *_r in KPIS],
            [_(runnable.NO_PREFILL) % {"scenario": scenario} if empty and sfx in PREFILL_CARDS else
             _(hint) % w if hint else "" for sfx, *_r, hint in KPIS])


def layout(**_kwargs):
    labels, hints = _labels(words.words(None))      # neutral words until the first tick names the system
    cards = [_useful_card(label) if sfx == "useful" else components.kpi(f"{P}-{sfx}", label, unit, source="sim", hint=hint)
             for (sfx, _l, unit, *_r), label, hint in zip(KPIS, labels, hints)]
    charts = [html.Div(components.graph(f"{P}-{name}-chart", figures.empty_figure(spec.title), 230), className="chart")
              for name, spec in CHARTS.items()]
    return html.Div([
        *page_stores(P),
        components.page_header(_("Overview"), html.Span(_lede(words.words(None), teach.DEFAULT_DEPLOYMENT), id=f"{P}-lede"),
                      html.Div(id=f"{P}-scenario", className="scenario-line")),
        teach.intro(**_kwargs),
        html.Div(cards, className="kpi-grid"),
        html.Div(charts, className="chart-grid"),
        components.panel(html.Div(id=f"{P}-events", className="events"), _("Recent engine events"), "sim"),
    ])


def _kpi_values(k: dict) -> list[str]:
    out = []
    for _sfx, _label, _unit, key, fmt, _hint in KPIS:
        if key:
            out.append(fmt(k.get(key)))
        elif _sfx == "ttft":
            p50, p99 = k.get("ttft_p50_ms"), k.get("ttft_p99_ms")
            out.append(f"{components.fmt(p50 / 1e3 if p50 is not None else None)} / "
                       f"{components.fmt(p99 / 1e3 if p99 is not None else None)}")
        elif _sfx == "tpot":
            out.append(f"{components.fmt(k.get('tpot_p50_ms'))} / {components.fmt(k.get('tpot_p99_ms'))}")
        elif _sfx == "gaveup":
            out.append(f"{components.fmt(k.get('rejected'))} / {components.fmt(k.get('timed_out'))}")
        elif _sfx == "queue":
            out.append(f"{components.fmt(k.get('queue_prefill'))} / {components.fmt(k.get('queue_decode'))}")
    return out


def _events(snap) -> list:
    return components.events(eventtext.once(snap.events)[-8:][::-1], _("no events yet"))


@page_tick(P, {
    "kpis": [Output(f"{P}-{sfx}", "children") for sfx, *_ in KPIS],
    "useful": Output(f"{P}-useful-hint", "children"),
    "labels": [Output(f"{P}-{sfx}-label" if sfx != "useful" else f"{P}-useful-label", "children") for sfx, *_ in KPIS],
    "hints": [Output(f"{P}-{sfx}-hint", "children") for sfx, *_ in KPIS if sfx != "useful"],
    "intro": [Output(f"teach-intro-{part}", "children") for part in teach.INTRO_SYSTEM],
    "lede": Output(f"{P}-lede", "children"),
    "figs": [Output(f"{P}-{name}-chart", "figure") for name in CHARTS],
    "exts": [Output(f"{P}-{name}-chart", "extendData") for name in CHARTS],
    "events": Output(f"{P}-events", "children"),
    "scenario": Output(f"{P}-scenario", "children"),
})
def tick(t: Tick) -> dict:
    """KPIs plus the new chart points (nothing if the snapshot is unchanged)."""
    if not t.changed:
        return {}
    snap = t.snap
    figs, exts = zip(*(t.strip(spec) for spec in CHARTS.values()))
    scen = (_("%(scenario)s · %(deployment)s on %(system)s · seed %(seed)s") % {
        "scenario": snap.scenario, "deployment": snap.deployment, "system": lang.system_title(snap.system), "seed": snap.seed}
            if t.mode == "full" else no_update)
    k = getattr(snap, "kpis", {}) or {}
    w = words.words(snap.system)
    out = {"kpis": _kpi_values(k), "useful": useful_hint(k, w, float(snap.sim_time)), "figs": list(figs), "exts": list(exts),
           "events": _events(snap), "scenario": scen}
    labels, hints = _labels(w, snap.scenario)
    why = slo_why(k, snap.deployment)
    hints = [why or h if sfx == "slo" else h for (sfx, *_r), h in zip(KPIS, hints) if sfx != "useful"]
    if t.mode == "full" or why or t.prior.get("why"):   # the SLO card says why while attainment is low
        out["hints"] = hints
    out["cursor"] = dict(t.cursor, why=bool(why))
    if t.mode == "full":              # the system may have changed: every word that names it
        out.update(labels=labels,
                   intro=teach.intro_system(snap.system, snap.deployment), lede=_lede(w, snap.deployment))
    return out


def _lede(w: dict, deployment: str) -> str:
    """The page's first line: the system and the model the viewed twin's deployment serves."""
    return _("The twin serving %(model)s live on a %(system)s: throughput, latency, cache and load. Every "
             "number here is simulated by the running engine.") % {**w, **words.served(deployment)}
