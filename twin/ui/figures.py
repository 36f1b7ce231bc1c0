"""Plotly figures as plain dicts, plus the compact updates (extendData) that make them grow.

Strip charts follow one pattern: `strip_figure(spec, history)` draws the whole window once;
`extend(spec, history, since_t)` returns the `extendData` payload with only the points newer than
`since_t` (or None when there are none). Values are rounded to 4 significant digits before sending.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from twin.ui import theme
from twin.ui.lang import _, unit_or_text
from twin.ui.lang import unit as in_lang

HISTORY_POINTS = 600    # points kept on a strip chart (the snapshot history is bounded too)
OUTLIER_X = 4.0         # assumption: on a `robust` chart, a point above 4x the window's 90th percentile
                        # is an outlier (a hang's 30 s TPOT, not a busy interval's ordinary p99 spike)
ROBUST_MIN = 30         # values needed before a chart is clipped (a few start-up points are no outliers)


def r4(v) -> float | None:
    """Round to 4 significant digits; None for missing, NaN or infinite values (a gap in a chart)."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return float(f"{f:.4g}")


@dataclass(frozen=True)
class Series:
    key: str              # Snapshot.history key
    label: str
    colour: str
    scale: float = 1.0    # multiply before display (e.g. 100 for ratios shown in %)
    dash: str = "solid"
    axis: str = "y"       # "y" or "y2"
    fill: bool = False
    width: float = 1.6    # px; a wide pale line under a thin one keeps two equal series both visible
    minus: str = ""       # a history key subtracted from `key` (the rest of it: NVLink = scale-up - across)
    stack: bool = False   # filled on top of the chart's earlier stacked series (parts of one total)


@dataclass(frozen=True)
class StripSpec:
    title: str
    y_title: str
    series: tuple[Series, ...]
    y2_title: str = ""
    y_range: tuple | None = None
    robust: bool = False  # clip the y axis above OUTLIER_X x the 90th percentile, saying so (`robust_axis`)

    def keys(self) -> list[str]:
        return [s.key for s in self.series]


def _values(hist: dict, s: Series, lo: int) -> list:
    vals = (hist.get(s.key) or [])[lo:]
    if s.minus:
        vals = [v - m if v is not None and m is not None else None
                for v, m in zip(vals, (hist.get(s.minus) or [])[lo:])]
    return [r4(v * s.scale) if v is not None else None for v in vals]


def _times(hist: dict, lo: int) -> list:
    return [r4(t) for t in (hist.get("t") or [])[lo:]]


def strip_figure(spec: StripSpec, hist: dict | None, height: int = 230, points: int = HISTORY_POINTS) -> dict:
    """The whole strip chart of the last `points` intervals of `hist`."""
    hist = hist or {}
    n = len(hist.get("t") or [])
    lo = max(0, n - points)
    xs = _times(hist, lo)
    data = []
    for s in spec.series:
        tr = {"type": "scatter", "mode": "lines", "name": _(s.label), "x": xs,
              "y": _values(hist, s, lo),
              "line": {"color": s.colour, "width": s.width, "dash": s.dash},
              "hovertemplate": "%{y:.4g}"}
        if s.axis == "y2":
            tr["yaxis"] = "y2"
        if s.stack:
            tr["stackgroup"] = "parts"
            tr["fillcolor"] = s.colour + "44"
        elif s.fill:
            tr["fill"] = "tozeroy"
            tr["fillcolor"] = s.colour + "22"
        data.append(tr)
    over = {"title": {"text": _(spec.title)}, "height": height,
            "xaxis": {"title": {"text": _("sim time (s)"), "font": {"size": 11, "color": theme.MUTED}}},
            "yaxis": {"title": {"text": unit_or_text(spec.y_title), "font": {"size": 11, "color": theme.MUTED}}}}
    if spec.y_range:
        over["yaxis"]["range"] = list(spec.y_range)
        over["yaxis"]["rangemode"] = "normal"
    if spec.robust:
        over["yaxis"].update(robust_axis(spec, hist, points))
    if spec.y2_title:
        over["yaxis2"] = {"title": {"text": unit_or_text(spec.y2_title), "font": {"size": 11, "color": theme.MUTED}},
                          "overlaying": "y", "side": "right", "gridcolor": "rgba(0,0,0,0)",
                          "rangemode": "tozero"}
        over["margin"] = {"l": 56, "r": 56, "t": 34, "b": 40}
    return {"data": data, "layout": theme.base_layout(**over)}


def robust_axis(spec: StripSpec, hist: dict | None, points: int = HISTORY_POINTS) -> dict:
    """y-axis settings that keep a chart readable when a few points are far out (a 30 s p99 TPOT
    during a hang): above OUTLIER_X x the 90th percentile of the window's values the axis is clipped
    and its title says so, naming the largest value and when it happened; otherwise autorange."""
    hist = hist or {}
    n = len(hist.get("t") or [])
    lo = max(0, n - points)
    xs = _times(hist, lo)
    pts = [(y, x) for s in spec.series for x, y in zip(xs, _values(hist, s, lo)) if y is not None]
    title = {"text": unit_or_text(spec.y_title), "font": {"size": 11, "color": theme.MUTED}}
    ys = sorted(y for y, _ in pts)
    ref = ys[int(0.9 * (len(ys) - 1))] if ys else 0.0
    top = max(pts) if pts else None
    if len(ys) < ROBUST_MIN or ref <= 0 or top[0] <= OUTLIER_X * ref:
        return {"autorange": True, "title": title}
    hi = float(f"{OUTLIER_X * ref:.3g}")
    num = lambda v: f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"     # noqa: E731
    title = dict(title, text=title["text"] + " · " + _("clipped at %(hi)s; max %(top)s at t=%(t)s s") % {
                     "hi": num(hi), "top": num(top[0]), "t": f"{top[1]:,.0f}"},
                 font={"size": 11, "color": theme.RED})
    return {"autorange": False, "range": [0, hi], "title": title}


def new_points_from(hist: dict | None, since_t: float | None) -> int:
    """Index of the first history point newer than since_t."""
    ts = (hist or {}).get("t") or []
    if since_t is None:
        return 0
    return bisect_right(ts, since_t)


def extend(spec: StripSpec, hist: dict | None, since_t: float | None):
    """extendData payload [update, trace indices, maxPoints] with the points after since_t, or None."""
    hist = hist or {}
    ts = hist.get("t") or []
    lo = new_points_from(hist, since_t)
    if lo >= len(ts):
        return None
    lo = max(lo, len(ts) - HISTORY_POINTS)
    xs = _times(hist, lo)
    upd = {"x": [xs for _ in spec.series], "y": [_values(hist, s, lo) for s in spec.series]}
    return [upd, list(range(len(spec.series))), HISTORY_POINTS]


def last_t(hist: dict | None) -> float | None:
    ts = (hist or {}).get("t") or []
    return float(ts[-1]) if ts else None


def empty_figure(title: str = "", message: str | None = None, height: int = 230) -> dict:
    message = _("waiting for the twin...") if message is None else message
    return {"data": [], "layout": theme.base_layout(
        title={"text": _(title)}, height=height,
        xaxis={"visible": False}, yaxis={"visible": False},
        annotations=[{"text": message, "showarrow": False, "xref": "paper", "yref": "paper",
                      "x": 0.5, "y": 0.5, "font": {"color": theme.MUTED, "size": 14}}])}


# ---- heatmap --------------------------------------------------------------------------------

LOG_DECADES = (-3, 3)    # the node matrix colours 0.001 to 1,000 GB/s (below: blank), assumption
# n00 at the top, set explicitly in every figure and update of a node matrix: Plotly keeps an axis's
# state across updates (uirevision), so one path leaving it out drew n00 at the bottom
MATRIX_Y_AUTORANGE = "reversed"


def empty_matrix(height: int = 460) -> dict:
    """A node matrix's placeholder (waiting for the twin), already in the matrix's orientation."""
    fig = empty_figure("", height=height)
    fig["layout"]["yaxis"]["autorange"] = MATRIX_Y_AUTORANGE
    return fig


def heatmap_figure(matrix, labels: list[str], title: str, unit: str = "GB/s", height: int = 460) -> dict:
    """Node-to-node traffic on a log colour scale: the MoE all-to-all of a lightly loaded decode
    instance spread over its 20 nodes (0.1 GB/s a pair) and a prefill instance's (tens of GB/s
    inside its two nodes) both show. Hover gives the value in `unit` (a termbase unit)."""
    return heatmap_from_z(*heatmap_z(matrix), labels, title, unit, height)


def heatmap_from_z(z: list, text: list, labels: list[str], title: str, unit: str = "GB/s",
                   height: int = 460) -> dict:
    """heatmap_figure() from heatmap_z()'s cells (computed once per snapshot for every viewer;
    the words around them are each viewer's language)."""
    unit = in_lang(unit)
    lo, hi = LOG_DECADES
    ticks = list(range(lo, hi + 1))
    return {"data": [{"type": "heatmap", "z": z, "text": text, "x": labels, "y": labels,
                      "colorscale": [[0, "#1c3d5a"], [0.3, "#1f77b4"], [0.6, "#fab005"], [1.0, "#e03131"]],
                      "zmin": lo, "zmax": hi, "hoverongaps": False,
                      "colorbar": {"title": {"text": unit + " (" + _("log") + ")"}, "thickness": 12,
                                   "tickvals": ticks, "ticktext": [f"{10.0 ** k:g}" for k in ticks]},
                      "hovertemplate": _("src %{y} → dst %{x}") + "<br>%{text} " + unit + "<extra></extra>"}],
            "layout": theme.base_layout(
                title={"text": title}, height=height, hovermode="closest",
                margin={"l": 48, "r": 10, "t": 34, "b": 40},
                xaxis={"title": {"text": _("destination node")}, "tickfont": {"size": 9}, "showgrid": False},
                yaxis={"title": {"text": _("source node")}, "tickfont": {"size": 9}, "autorange": MATRIX_Y_AUTORANGE,
                       "showgrid": False, "rangemode": "normal"})}


def heatmap_z(matrix) -> tuple[list, list]:
    """log10 of each cell (None, drawn blank, at or below 10^LOG_DECADES[0]) and its value as text."""
    m = np.asarray(matrix if matrix is not None else [], dtype=float)
    floor = 10.0 ** LOG_DECADES[0]
    z = np.where(m > floor, np.log10(np.maximum(m, floor)), np.nan).round(2)
    return ([[None if v != v else float(v) for v in row] for row in z],
            [[f"{v:.3g}" if v > floor else "" for v in row] for row in m])
