"""Colours and the base Plotly layout shared by every chart (dark, high contrast, projector-legible)."""
from __future__ import annotations

BG = "#0f1722"
PANEL = "#16202e"
GRID = "#243245"
TEXT = "#e6edf3"
MUTED = "#8da2b8"

# series colours (colour-blind friendly, readable on dark)
BLUE = "#4ea8ff"
ORANGE = "#ffa94d"
GREEN = "#51cf66"
RED = "#ff6b6b"
PURPLE = "#b197fc"
TEAL = "#3bc9db"
YELLOW = "#ffd43b"
PINK = "#f783ac"

PLANE_COLOURS = {"ub": BLUE, "rdma": ORANGE, "vpc": GREEN, "d2d": PURPLE, "nvlink": TEAL}
POOL_COLOURS = {"prefill": TEAL, "decode": PURPLE, "": "#3a4a5e"}

# utilisation ramp for links and dies: idle -> busy -> saturated. Sequential blue -> lavender, lighter as
# it gets busier and with no red or orange in it, so that a busy part never reads as a failed one (FAILED),
# also for red-green colour-blind viewers (blue survives deuteranopia and protanopia)
UTIL_STOPS = ("#2f3d50", "#1d4f8c", "#2f74c8", "#5b95ea", "#b8acfa", "#e4d4ff")
# a failed part: black fill, red dashed outline and a ✕ in its label (a marker and a pattern, not hue alone)
FAILED = "#ff4d4f"
FAILED_FILL = "#000000"
SLOW = "#ffc107"          # a part running slowly (a gray failure): amber, at least 40 CIE76 from FAILED in every vision

FONT = "Inter, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def base_layout(**over) -> dict:
    """A plain-dict Plotly layout (no go.Figure validation in hot paths)."""
    lay = {
        "paper_bgcolor": PANEL,
        "plot_bgcolor": PANEL,
        "font": {"family": FONT, "color": TEXT, "size": 13},
        "margin": {"l": 56, "r": 14, "t": 34, "b": 40},
        "xaxis": {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID},
        "yaxis": {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right",
                   "bgcolor": "rgba(0,0,0,0)", "font": {"size": 12}},
        "hovermode": "x unified",
        "uirevision": "keep",
        "title": {"font": {"size": 14, "color": TEXT}, "x": 0.01, "xanchor": "left", "y": 0.97,
                  "pad": {"l": 22}},                       # room for the chart's (i) (components.graph)
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(lay.get(k), dict):
            lay[k] = {**lay[k], **v}
        else:
            lay[k] = v
    return lay
