"""Overview: live KPIs of the running twin with short history charts."""
from __future__ import annotations

import dash
from dash import Output, html, no_update

from twin.ui import components as C
from twin.ui import figures as F
from twin.ui import teach
from twin.ui import theme as T
from twin.ui.live import Tick, page_stores, page_tick

dash.register_page(__name__, path="/", name="Overview", title="Overview · CloudMatrix Twin", order=0)

P = "ov"

# (element id suffix, label, unit, kpi key, formatter, hint)
KPIS = (
    ("in-tps", "Input tokens/s", "tok/s", "input_tps", C.fmt, "prompt tokens processed per second (whole supernode)"),
    ("out-tps", "Output tokens/s", "tok/s", "output_tps", C.fmt, "generated tokens per second"),
    ("in-npu", "Input per prefill NPU", "tok/s", "input_tps_per_npu", C.fmt, "prefill throughput per NPU of the prefill pool"),
    ("out-npu", "Output per decode NPU", "tok/s", "output_tps_per_npu", C.fmt, "decode throughput per NPU of the decode pool"),
    ("ttft", "TTFT p50 / p99", "s", None, None, "time to first token of recently finished requests"),
    ("tpot", "TPOT p50 / p99", "ms", None, None, "time per output token of recently finished requests"),
    ("slo", "SLO attainment", "%", "slo_attainment", C.pct, "completions meeting both TTFT and TPOT SLOs"),
    ("hit", "Cache hit ratio", "%", "token_hit_ratio", C.pct, "EMS context cache: prompt tokens found in cache"),
    ("inflight", "Requests in flight", "", "in_flight", C.fmt, "arrived, not finished"),
    ("queue", "Queued prefill / decode", "", None, None, "requests waiting for a prefill batch / a decode slot"),
    ("util-p", "Prefill NPU busy", "%", "util_prefill", C.pct, "busy fraction of the prefill pool"),
    ("util-d", "Decode NPU busy", "%", "util_decode", C.pct, "busy fraction of the decode pool"),
)

CHARTS = {
    "thr": F.StripSpec("Throughput (tokens/s)", "tok/s", (
        F.Series("input_tps", "input", T.BLUE), F.Series("output_tps", "output", T.ORANGE, axis="y2")),
        y2_title="output tok/s"),
    "ttft": F.StripSpec("Time to first token (s)", "s", (
        F.Series("ttft_p50_ms", "p50", T.TEAL, scale=1e-3), F.Series("ttft_p99_ms", "p99", T.RED, scale=1e-3, dash="dot"))),
    "tpot": F.StripSpec("Time per output token (ms)", "ms", (
        F.Series("tpot_p50_ms", "p50", T.PURPLE), F.Series("tpot_p99_ms", "p99", T.PINK, dash="dot"))),
    "util": F.StripSpec("NPU busy by pool (%)", "%", (
        F.Series("util_prefill", "prefill", T.TEAL, scale=100), F.Series("util_decode", "decode", T.PURPLE, scale=100)),
        y_range=(0, 105)),
    "slo": F.StripSpec("SLO attainment and cache hits (%)", "%", (
        F.Series("slo_attainment", "SLO met", T.GREEN, scale=100),
        F.Series("token_hit_ratio", "token hits", T.YELLOW, scale=100, dash="dot")), y_range=(0, 105)),
    "req": F.StripSpec("Requests", "requests", (
        F.Series("in_flight", "in flight", T.BLUE), F.Series("queue_prefill", "queued prefill", T.ORANGE),
        F.Series("queue_decode", "queued decode", T.PURPLE))),
}


def layout(**_kwargs):
    cards = [C.kpi(f"{P}-{sfx}", label, unit, source="sim", hint=hint) for sfx, label, unit, *_r, hint in KPIS]
    charts = [html.Div(C.graph(f"{P}-{name}-chart", F.empty_figure(spec.title), 230), className="chart")
              for name, spec in CHARTS.items()]
    return html.Div([
        *page_stores(P),
        C.page_header("Overview", "The twin serving DeepSeek-R1 live: throughput, latency, cache and load. "
                      "Every number here is simulated by the running engine.",
                      html.Div(id=f"{P}-scenario", className="scenario-line")),
        teach.intro(**_kwargs),
        html.Div(cards, className="kpi-grid"),
        html.Div(charts, className="chart-grid"),
        C.panel(html.Div(id=f"{P}-events", className="events"), "Recent engine events", "sim"),
    ])


def _kpi_values(k: dict) -> list[str]:
    out = []
    for _sfx, _label, _unit, key, fmt, _hint in KPIS:
        if key:
            out.append(fmt(k.get(key)))
        elif _sfx == "ttft":
            p50, p99 = k.get("ttft_p50_ms"), k.get("ttft_p99_ms")
            out.append(f"{C.fmt(p50 / 1e3 if p50 is not None else None)} / "
                       f"{C.fmt(p99 / 1e3 if p99 is not None else None)}")
        elif _sfx == "tpot":
            out.append(f"{C.fmt(k.get('tpot_p50_ms'))} / {C.fmt(k.get('tpot_p99_ms'))}")
        elif _sfx == "queue":
            out.append(f"{C.fmt(k.get('queue_prefill'))} / {C.fmt(k.get('queue_decode'))}")
    return out


def _events(snap) -> list:
    return C.events(list(snap.events or ())[-8:][::-1], "no events yet")


@page_tick(P, {
    "kpis": [Output(f"{P}-{sfx}", "children") for sfx, *_ in KPIS],
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
    scen = (f"{snap.scenario} · {snap.deployment} on {snap.system.title} · seed {snap.seed}"
            if t.mode == "full" else no_update)
    return {"kpis": _kpi_values(getattr(snap, "kpis", {}) or {}), "figs": list(figs), "exts": list(exts),
            "events": _events(snap), "scenario": scen}
