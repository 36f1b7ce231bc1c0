"""Validation: calibration rows (a constant was fitted to each) and validation rows (nothing fitted:
the GPU serving throughputs), each with a pass/fail badge, then every deployment's figures, with the
systems no published figure checks (GB200 NVL72, HGX B200) labelled "prediction"."""
from __future__ import annotations

from functools import lru_cache

import dash
from dash import html

from twin.ui import components as C
from twin.validate import predictions, rows as validation_rows
from twin.ui import lang as Lg
from twin.ui.lang import N_

dash.register_page(__name__, path="/validation", name=N_("Validation"), title=Lg.title("Validation"),
                   order=5)

P = "va"


@lru_cache(maxsize=1)
def _tables() -> tuple[list[dict], list[dict]]:
    return validation_rows(), predictions()


def _num(v, digits=4) -> str:
    return "–" if v is None else f"{v:,.{digits}g}" if abs(v) < 1e4 else f"{v:,.0f}"


def calibration_table(rows: list[dict], id_: str | None = None) -> html.Table:
    head = html.Tr([html.Th("row"), html.Th("kind"), html.Th("published", className="num"),
                    html.Th("twin", className="num"), html.Th("error", className="num"),
                    html.Th("tolerance", className="num"), html.Th("result"), html.Th("source")])
    body = [html.Tr([
        html.Td(r["name"]),
        html.Td(html.Span(r["kind"], className=f"tag tag-{'model' if r['kind'] == 'calibration' else 'sim'}",
                          title="a constant was fitted to this row" if r["kind"] == "calibration"
                          else "nothing was fitted to this row: the twin predicts it")),
        html.Td(_num(r["target"]), className="num"),
        html.Td(_num(r["twin"]), className="num"),
        html.Td(f"{r['error_pct']:+.1f} %", className="num"),
        html.Td(f"±{r['tolerance_pct']:g} %", className="num"),
        html.Td(C.badge(r["pass"])),
        html.Td(r["source"], className="muted"),
    ], className="row-pass" if r["pass"] else "row-fail") for r in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="tbl", id=id_)


def predictions_table(preds: list[dict]) -> html.Table:
    head = html.Tr([html.Th("deployment"), html.Th("phase"), html.Th("label"),
                    html.Th("tokens/s per chip", className="num"), html.Th("per TFLOPS", className="num"),
                    html.Th("per kW", className="num"), html.Th("$ / M tokens", className="num"),
                    html.Th("TPOT", className="num"), html.Th("setting")])
    body = [html.Tr([html.Td(p["deployment"]), html.Td(p["phase"]),
                     html.Td(html.B(p["label"]) if p["label"] == "prediction" else p["label"]),
                     html.Td(f"{p['tokens_per_s_per_chip']:,.1f}", className="num"),
                     html.Td(_num(p["tokens_per_s_per_tflops"], 3), className="num"),
                     html.Td(f"{p['tokens_per_s_per_kw']:,.0f}", className="num"),
                     html.Td(_num(p["usd_per_million_tokens"], 3), className="num"),
                     html.Td(f"{p['tpot_ms']} ms" if p["tpot_ms"] else "–", className="num"),
                     html.Td(p["setting"], className="muted")]) for p in preds]
    return html.Table([html.Thead(head), html.Tbody(body)], className="tbl", id=f"{P}-predictions")


def layout(**_kwargs):
    try:
        rows, preds = _tables()
        error = None
    except Exception as exc:   # show what went wrong instead of a blank page
        rows, preds, error = [], [], f"{type(exc).__name__}: {exc}"
    n_pass = sum(r["pass"] for r in rows)
    cal = [r for r in rows if r["kind"] == "calibration"]
    val = [r for r in rows if r["kind"] == "validation"]
    summary = html.Div([
        C.badge(n_pass == len(rows) and bool(rows), f"ALL {len(rows)} PASS", f"{len(rows) - n_pass} FAIL"),
        html.Span(f"  {sum(r['pass'] for r in cal)} of {len(cal)} calibration rows and "
                  f"{sum(r['pass'] for r in val)} of {len(val)} validation rows within tolerance",
                  className="muted"),
    ], id=f"{P}-summary")
    return html.Div([
        C.page_header("Validation", "The perf model against published numbers, by the same code path the "
                      "engine uses. Calibration rows fixed a constant; validation rows fixed nothing. "
                      "Tolerances are set per row before looking at results.", summary),
        html.Div(error, className="ctl-msg msg-error") if error else None,
        C.panel(calibration_table(val, f"{P}-validation"),
                "Validation: GPU serving throughputs, nothing fitted to them", "model", extra=C.tag("paper")),
        C.panel(calibration_table(cal, f"{P}-table"),
                "Calibration: paper, DeepEP kernel tables and SGLang overlap gain vs twin", "model",
                extra=C.tag("paper")),
        C.panel(predictions_table(preds), "Every deployment: per chip, per TFLOPS, per kW and cost per "
                "million tokens. \"prediction\": no published figure checks it (power and price are "
                "catalog assumptions, editable in systems.toml)", "model"),
    ])
