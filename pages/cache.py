"""Cache: the EMS context cache (CPU DRAM pooled over UB) and what its hits buy."""
from __future__ import annotations

import dash
from dash import Output, html

from twin.engine.metrics import HIT_MIN, HIT_WINDOW
from twin.ui import runnable
from twin.ui import components
from twin.ui import figures
from twin.ui import theme
from twin.ui.polling import Tick, page_stores, page_tick
from twin.ui import lang
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/cache", name=N_("Cache"), title=lang.title("Cache"),
                   order=3, live=("ca-cursor", "#ca-dram"))

P = "ca"

CHARTS = {
    "hit": figures.StripSpec(N_("EMS hit ratio (%)"), "%", (
        figures.Series("block_hit_ratio", N_("blocks"), theme.YELLOW, scale=100, width=6),
        figures.Series("token_hit_ratio", N_("tokens"), theme.RED, scale=100, width=1.6)), y_range=(0, 100)),
    "tier": figures.StripSpec(N_("Tier occupancy (GB)"), "GB", (
        figures.Series("ems_dram_gb", "DRAM", theme.BLUE, fill=True), figures.Series("ems_ssd_gb", "SSD", theme.PURPLE))),
    "bytes": figures.StripSpec(N_("Bytes moved per cache-hit request (MB)"), "MB", (
        figures.Series("ub_bytes_per_hit_mb", N_("per hit"), theme.TEAL),)),
    "ttft": figures.StripSpec(N_("TTFT p50 with vs without a cache hit, rolling (s)"), "s", (
        figures.Series("ttft_hit_p50_ms", N_("with hit"), theme.GREEN, scale=1e-3),
        figures.Series("ttft_miss_p50_ms", N_("without"), theme.RED, scale=1e-3, dash="dot"))),
}

KPIS = (
    ("block", N_("Block hit ratio"), "%", N_("interval: blocks of prompt KV found in EMS")),
    ("token", N_("Token hit ratio"), "%", N_("interval: prompt tokens whose KV was found in EMS; equal to "
                                            "blocks when every prompt is whole 512-token blocks (4K synthetic prompts)")),
    ("total", N_("Block hits, whole run"), "%", N_("hit blocks / looked-up blocks since the start")),
    ("dram", N_("DRAM tier"), "GB", N_("KV blocks held in the pooled CPU DRAM")),
    ("ssd", N_("SSD tier"), "GB", N_("KV blocks demoted to SSD")),
    ("servers", N_("Cache servers live"), "", N_("EMS servers (CPUs) that are up")),
)


def layout(**_kwargs):
    return html.Div([
        *page_stores(P),
        components.page_header(_("Context cache (EMS)"), _("Prompt prefixes seen before are loaded from the Elastic Memory "
                                                  "Service (CPU DRAM of the nodes, pooled over the UB plane) instead "
                                                  "of being recomputed. A hit costs bytes over UB and saves prefill "
                                                  "compute.")),
        html.Div([components.kpi(f"{P}-{k}", _(label), unit, "sim", _(hint)) for k, label, unit, hint in KPIS],
                 className="kpi-grid"),
        html.Div([html.Div(components.graph(f"{P}-{k}", figures.empty_figure(spec.title), 250), className="chart")
                  for k, spec in CHARTS.items()], className="chart-grid grid-2"),
        html.Div(id=f"{P}-ttft-note", className="hint"),
        html.Div(_("Hit ratio: the wide yellow line counts blocks, the thin red one tokens; they differ only by the "
                   "partial last block of a prompt, so they coincide when prompts are whole blocks. TTFT with vs "
                   "without a hit (at least half the prompt from EMS): medians over the last %(window)s intervals (seconds by default), drawn "
                   "once that window is full and holds at least %(n)s requests of the kind.") % {
                       "window": HIT_WINDOW, "n": HIT_MIN}, className="hint"),
        components.panel(html.Div(id=f"{P}-totals", className="hint"), _("Since the start"), "sim"),
    ])


def _kpis(snap) -> list[str]:
    k = getattr(snap, "kpis", {}) or {}
    c = getattr(snap, "cache", {}) or {}
    servers = c.get("per_server") or {}
    live = c.get("live_servers")
    return [components.pct(k.get("block_hit_ratio")), components.pct(k.get("token_hit_ratio")),
            components.pct(k.get("total_block_hit_ratio", c.get("block_hit_ratio"))),
            components.fmt(k.get("ems_dram_gb")), components.fmt(k.get("ems_ssd_gb")),
            f"{live if live is not None else '–'} / {len(servers) or '–'}"]


def ttft_note(hist: dict | None) -> str:
    """Why a TTFT line is missing over the last HIT_WINDOW intervals, when one is: a scenario where
    every prompt reuses the same share (paper-prefill-cache: 90%) has no request without a hit."""
    hist = hist or {}
    seen = lambda key: any(v == v for v in (hist.get(key) or [])[-HIT_WINDOW:] if v is not None)
    hit, miss = seen("ttft_hit_p50_ms"), seen("ttft_miss_p50_ms")
    if hit and not miss:
        return _("No line without a hit: every request finished lately took at least half its prompt from EMS "
                 "(each prompt reuses the same share here). The kv-cache lesson compares this scenario with "
                 "paper-prefill, which has no reuse.")
    if miss and not hit:
        return _("No line with a hit: no request finished lately took half its prompt or more from EMS.")
    return ""


def _totals(snap) -> str:
    c = getattr(snap, "cache", {}) or {}
    if not c:
        return _("This deployment has no EMS cache.")
    n = {k: components.fmt(c.get(k)) for k in ("lookups", "hit_blocks", "dram_hit_blocks", "ssd_hit_blocks", "miss_blocks",
                                      "stored_blocks", "demoted_blocks", "evicted_blocks", "lost_blocks")}
    parts = [_("%(lookups)s lookups") % n,
             _("%(hit_blocks)s blocks hit (%(dram_hit_blocks)s from DRAM, %(ssd_hit_blocks)s from SSD)") % n,
             _("%(miss_blocks)s missed") % n, _("%(stored_blocks)s stored") % n,
             _("%(demoted_blocks)s demoted") % n, _("%(evicted_blocks)s evicted") % n,
             _("%(lost_blocks)s lost to failures") % n]
    return " · ".join(parts)


@page_tick(P, {
    "kpis": [Output(f"{P}-{k}", "children") for k, *_ in KPIS],
    "figs": [Output(f"{P}-{k}", "figure") for k in CHARTS],
    "exts": [Output(f"{P}-{k}", "extendData") for k in CHARTS],
    "totals": Output(f"{P}-totals", "children"),
    "note": Output(f"{P}-ttft-note", "children"),
})
def tick(t: Tick) -> dict:
    if not t.changed:
        return {}
    figs, exts = zip(*(t.strip(spec, height=250) for spec in CHARTS.values()))
    if runnable.decode_only(t.snap.scenario):     # nothing is looked up: say why the cards read "–"
        note = _("Cache hits: %(why)s.") % {"why": _(runnable.NO_PREFILL) % {"scenario": t.snap.scenario}}
    else:
        note = ttft_note(getattr(t.snap, "history", None))
    return {"kpis": _kpis(t.snap), "figs": list(figs), "exts": list(exts), "totals": _totals(t.snap), "note": note}
