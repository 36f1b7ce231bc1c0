"""Decode throughput vs TPOT from the perf model, with the paper's points and the live operating point."""
from __future__ import annotations

import csv
import io
from functools import lru_cache

from twin.model.config import catalog
from twin.predict.perf import PerfModel, decode_curve

from twin.ui import theme
from twin.ui.figures import r4
from twin.ui.lang import N_, _, unit
from twin.ui.words import served, words

# ref 4 (CloudMatrix-Infer) decode rows: (TPOT ms, tokens/s per NPU, label), measured for PAPER_MODEL on
# PAPER_SYSTEM only
PAPER_POINTS = ((49.4, 1943.0, N_("batch 96")), (14.9, 538.0, N_("batch 8")))
PAPER_SYSTEM = "cloudmatrix384"
PAPER_MODEL = "deepseek-r1"
KV_CHOICES = (1024, 2048, 4096, 8192, 16384, 32768)
SLO_MIN, SLO_MAX = 5, 150
TRAIL = 40   # live points kept on the chart

# trace indices in the figure (the live tick patches 4 and 5)
T_CURVE, T_OVER, T_PAPER, T_BEST, T_TRAIL, T_LIVE = range(6)


@lru_cache(maxsize=256)
def best_for_slo(deployment: str, slo_ms: float, kv_len: int) -> dict:
    return PerfModel(deployment).max_batch_for_slo(slo_ms, kv_len)


@lru_cache(maxsize=32)
def operating_batch(deployment: str) -> float:
    """The deployment's decode batch cap per NPU (its operating point: 96 in the paper's)."""
    pm = PerfModel(deployment)
    return pm.dep.decode.batch_per_die * pm.dies_per_npu


def paper_points(deployment: str) -> tuple:
    """The published points measured for the deployment's own model on its own system (none otherwise:
    the paper's DeepSeek-R1 stars on an H800 or a Qwen3 curve would compare two machines or two models
    as if they were one)."""
    d = catalog().deployments[deployment]
    return PAPER_POINTS if (d.system, d.model) == (PAPER_SYSTEM, PAPER_MODEL) else ()


def default_slo(deployment: str) -> float:
    return float(PerfModel(deployment).dep.tpot_slo_ms or 50)


def figure(deployment: str, kv_len: int, slo_ms: float, trail: tuple[list, list] = ([], []),
           height: int = 520) -> dict:
    pts = decode_curve(deployment, kv_len)
    fit = [p for p in pts if p["fits_kv"]]
    over = [p for p in pts if not p["fits_kv"]]
    if fit and over:
        over = [fit[-1]] + over
    best = best_for_slo(deployment, slo_ms, kv_len)
    w, paper = words(deployment), paper_points(deployment)
    per = _("tok/s per %(chip)s") % w
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": _("model: batch per %(chip)s") % w,
         "x": [r4(p["tpot_ms"]) for p in fit], "y": [r4(p["tokens_per_s_per_npu"]) for p in fit],
         "text": [f"batch {p['batch_per_npu']}" for p in fit],
         "line": {"color": theme.BLUE, "width": 3}, "marker": {"size": 6},
         "hovertemplate": f"%{{text}}<br>TPOT %{{x:.1f}} ms<br>%{{y:.0f}} {per}<extra>model</extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": _("model: exceeds KV cache"),
         "x": [r4(p["tpot_ms"]) for p in over], "y": [r4(p["tokens_per_s_per_npu"]) for p in over],
         "text": [f"batch {p['batch_per_npu']}" for p in over],
         "line": {"color": theme.MUTED, "width": 2, "dash": "dot"}, "marker": {"size": 5},
         "hovertemplate": f"%{{text}} (KV does not fit)<br>TPOT %{{x:.1f}} ms<br>%{{y:.0f}} {per}<extra></extra>"},
        {"type": "scatter", "mode": "markers", "name": _("paper (ref 4)"),    # labels on hover: none covers the live point
         "x": [p[0] for p in paper], "y": [p[1] for p in paper],
         "text": [_("paper, %(label)s: %(ms)s ms, %(tps)s") % {"label": _(p[2]), "ms": p[0], "tps": f"{p[1]:,.0f}"}
                  for p in paper], "showlegend": bool(paper),
         "marker": {"symbol": "star", "size": 18, "color": theme.ORANGE, "line": {"color": "#fff", "width": 1}},
         "hovertemplate": "%{text}<extra>paper</extra>"},
        {"type": "scatter", "mode": "markers", "name": _("largest batch within %(slo)s ms") % {"slo": f"{slo_ms:g}"},
         "x": [r4(best["tpot_ms"])] if best["tpot_ms"] else [],
         "y": [r4(best["tokens_per_s_per_npu"])] if best["tpot_ms"] else [],
         "marker": {"symbol": "diamond", "size": 16, "color": theme.GREEN, "line": {"color": "#fff", "width": 1}},
         "hovertemplate": f"batch {best['batch_per_npu']}<br>TPOT %{{x:.1f}} ms<br>%{{y:.0f}} {per}<extra>model</extra>"},
        {"type": "scatter", "mode": "lines", "name": _("live (recent)"), "x": trail[0], "y": trail[1],
         "line": {"color": theme.PINK, "width": 1.5}, "opacity": 0.6, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers", "name": _("live operating point"),
         "x": trail[0][-1:], "y": trail[1][-1:],
         "marker": {"size": 16, "color": theme.PINK, "line": {"color": "#fff", "width": 2}},
         "hovertemplate": f"now: TPOT %{{x:.1f}} ms<br>%{{y:.0f}} {per}<extra>simulated</extra>"},
    ]
    layout = theme.base_layout(
        height=height, hovermode="closest",
        xaxis={"title": {"text": _("TPOT (ms per output token)")}, "rangemode": "tozero"},
        yaxis={"title": {"text": _("decode throughput (tokens/s per %(chip)s)") % w}},
        legend={"orientation": "v", "x": 0.99, "xanchor": "right", "y": 0.02, "yanchor": "bottom",
                "bgcolor": "rgba(22,32,46,0.85)"},
        shapes=[{"type": "line", "x0": slo_ms, "x1": slo_ms, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"color": theme.GREEN, "dash": "dash", "width": 2}}],
        annotations=[{"x": slo_ms, "yref": "paper", "y": 1.0, "text": f"SLO {slo_ms:g} {unit('ms')}", "showarrow": False,
                      "xanchor": "left", "yanchor": "top", "font": {"color": theme.GREEN}}] + ([] if paper else [
            {"xref": "paper", "x": 0.0, "yref": "paper", "y": 1.06, "showarrow": False, "xanchor": "left",
             "font": {"color": theme.MUTED}, "text": _("No published reference points for %(model)s on %(system)s: "
                                                       "the paper's are DeepSeek-R1's on CloudMatrix384") % {
                 "system": catalog().deployments[deployment].system, "model": served(deployment)["model"]}}]),
    )
    return {"data": data, "layout": layout}


def trail_from(hist: dict | None) -> tuple[list, list]:
    """Recent (TPOT p50, decode tokens/s per NPU) points of the running twin."""
    hist = hist or {}
    xs = hist.get("tpot_p50_ms") or []
    ys = hist.get("output_tps_per_npu") or []
    pts = [(r4(x), r4(y)) for x, y in zip(xs[-TRAIL:], ys[-TRAIL:]) if r4(x) is not None and r4(y) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


CSV_FIELDS = ("source", "what", "deployment", "kv_len", "batch_per_npu", "tpot_ms", "tokens_per_s_per_npu", "fits_kv")


def csv_text(deployment: str, kv_len: int, slo_ms: float, trail: tuple[list, list] = ([], [])) -> str:
    """What the chart shows, as CSV: the model curve (one row per batch), the largest batch within
    the SLO (model), the paper's points (paper, ref 4, at 4K KV) and the running twin's recent
    points (simulated, oldest first). Empty cells where a column does not apply."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for p in decode_curve(deployment, kv_len):
        w.writerow(("model", "curve", deployment, kv_len, p["batch_per_npu"], f"{p['tpot_ms']:.4f}",
                    f"{p['tokens_per_s_per_npu']:.2f}", p["fits_kv"]))
    best = best_for_slo(deployment, slo_ms, kv_len)
    if best["tpot_ms"]:
        w.writerow(("model", f"largest batch within {slo_ms:g} ms", deployment, kv_len, best["batch_per_npu"],
                    f"{best['tpot_ms']:.4f}", f"{best['tokens_per_s_per_npu']:.2f}", True))
    for tpot, tps, label in paper_points(deployment):
        w.writerow(("paper", f"ref 4, {label}", "", 4096, label.split()[-1], tpot, tps, ""))
    for x, y in zip(*trail):
        w.writerow(("simulated", "live (recent)", deployment, "", "", x, y, ""))
    return buf.getvalue()
