"""Validation: calibration rows (a constant was fitted to each) and validation rows (nothing fitted:
the GPU serving throughputs), each with a pass/fail badge, then every deployment's figures, with the
systems no published figure checks (GB200 NVL72, HGX B200) labelled "prediction"."""
from __future__ import annotations

from functools import lru_cache

import dash
from dash import html

from twin.ui import components
from twin.ui import eventtext
from twin.predict.validate import predictions, rows as validation_rows
from twin.ui import lang
from twin.ui.lang import N_, _

# the predictions table's labels, from twin.predict.validate (translated where shown)
LABELS = (N_("calibrated"), N_("model"), N_("validated"), N_("prediction"), N_("calibration"), N_("validation"))

dash.register_page(__name__, path="/validation", name=N_("Validation"), title=lang.title("Validation"),
                   order=5, live=(None, "#va-summary"), menu="more")

P = "va"


@lru_cache(maxsize=1)
def _tables() -> tuple[list[dict], list[dict]]:
    return validation_rows(), predictions()


def _num(v, digits=4) -> str:
    return "–" if v is None else f"{v:,.{digits}g}" if abs(v) < 1e4 else f"{v:,.0f}"


def calibration_table(rows: list[dict], id_: str | None = None) -> html.Table:
    head = html.Tr([html.Th(_("row")), html.Th(_("kind")), html.Th(_("published"), className="num"),
                    html.Th(_("twin"), className="num"), html.Th(_("error"), className="num"),
                    html.Th(_("tolerance"), className="num"), html.Th(_("result")), html.Th(_("source"))])
    body = [html.Tr([
        html.Td(eventtext.said(r["name"]) if getattr(r["name"], "template", None) else _(r["name"])),
        html.Td(html.Span(_(r["kind"]), className=f"tag tag-{'model' if r['kind'] == 'calibration' else 'sim'}",
                          title=_("a constant was fitted to this row") if r["kind"] == "calibration"
                          else _("nothing was fitted to this row: the twin predicts it"))),
        html.Td(_num(r["target"]), className="num"),
        html.Td(_num(r["twin"]), className="num"),
        html.Td(f"{r['error_pct']:+.1f} %", className="num"),
        html.Td(f"±{r['tolerance_pct']:g} %", className="num"),
        html.Td(components.badge(r["pass"])),
        html.Td(r["source"], className="muted i18n-skip"),
    ], className="row-pass" if r["pass"] else "row-fail") for r in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="tbl", id=id_)


def predictions_table(preds: list[dict]) -> html.Table:
    head = html.Tr([html.Th(_("deployment")), html.Th(_("phase")), html.Th(_("label")),
                    html.Th(_("tokens/s per chip"), className="num"), html.Th(_("per TFLOPS"), className="num"),
                    html.Th(_("per kW"), className="num"), html.Th(_("$ / M tokens"), className="num"),
                    html.Th("TPOT", className="num"), html.Th(_("setting"))])
    body = [html.Tr([html.Td(p["deployment"]), html.Td(_(p["phase"])),
                     html.Td(html.B(_(p["label"])) if p["label"] == "prediction" else _(p["label"])),
                     html.Td(f"{p['tokens_per_s_per_chip']:,.1f}", className="num"),
                     html.Td(_num(p["tokens_per_s_per_tflops"], 3), className="num"),
                     html.Td(f"{p['tokens_per_s_per_kw']:,.0f}", className="num"),
                     html.Td(_num(p["usd_per_million_tokens"], 3), className="num"),
                     html.Td(f"{p['tpot_ms']} {lang.unit('ms')}" if p["tpot_ms"] else "–", className="num"),
                     html.Td(eventtext.said(p["setting"]), className="muted")]) for p in preds]
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
        components.badge(n_pass == len(rows) and bool(rows), _("ALL %(n)s PASS") % {"n": len(rows)},
                _("%(n)s FAIL") % {"n": len(rows) - n_pass}),
        html.Span("  " + _("%(cal)s of %(ncal)s calibration rows and %(val)s of %(nval)s validation rows within "
                           "tolerance") % {"cal": sum(r["pass"] for r in cal), "ncal": len(cal),
                                           "val": sum(r["pass"] for r in val), "nval": len(val)},
                  className="muted"),
    ], id=f"{P}-summary")
    return html.Div([
        components.page_header(_("Validation"), _("The perf model against published numbers, by the same code path the "
                                         "engine uses. Calibration rows fixed a constant; validation rows fixed "
                                         "nothing. Tolerances are set per row before looking at results."), summary),
        html.Div(error, className="ctl-msg msg-error") if error else None,
        components.panel(calibration_table(val, f"{P}-validation"),
                _("Validation: SGLang's H100 serving figures, nothing fitted to their source"), "model", extra=components.tag("paper")),
        components.panel(calibration_table(cal, f"{P}-table"),
                _("Calibration: paper, kernel tables and DeepSeek's H800 profile (overlap stretch) vs twin"), "model",
                extra=components.tag("paper")),
        components.panel(predictions_table(preds), _("Every deployment: per chip, per TFLOPS, per kW and cost per "
                                            "million tokens. \"prediction\": no published figure checks it (power "
                                            "and price are catalog assumptions, editable in systems.toml)"), "model"),
    ])
