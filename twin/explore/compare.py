"""Why a supernode: DeepSeek-R1 under one workload on CloudMatrix384 and four GPU systems.

Each system serves decode at its operating point: the largest batch per chip whose TPOT meets the
SLO and whose KV cache fits (perf model, source "model"). Figures per chip, per dense TFLOPS of
the serving precision, per kW and per dollar use one cost and power basis for every system (TCO per
chip-hour and power at one boundary, tco.toml), each input with its source or "assumption"; rental
prices are a second, labelled basis. The EP sweep keeps the batch
per die and changes the decode EP degree: where the all-to-all leaves NVLink for RDMA, TPOT rises.
"""
from __future__ import annotations

from twin.predict import crossval
from twin.model.config import Deployment, catalog
from twin.predict.perf import PerfModel
from twin.predict import tco
from twin.predict.economics import figures
from twin.predict.validate import decode_point, prefill_point
from twin.explore.points import configure

SYSTEMS = ("cloudmatrix-infer-paper", "deepseek-h800", "sglang-h100", "hgx-b200-r1", "gb200-nvl72-r1")
EP_DEGREES = (8, 16, 32, 48, 64, 72, 96, 128, 144, 160, 256, 288, 320)
PROMPT, OUTPUT = 4096, 256      # ref 4 decode row 2: 4K prompt, 256 output
KV_LEN = PROMPT + OUTPUT / 2    # mean KV length over a decode
A2A = ("dispatch", "combine")


def alltoall_share(breakdown: dict[str, float]) -> float:
    """Dispatch + combine as a share of operator time (before overlap hides any of it)."""
    total = sum(v for v in breakdown.values() if v > 0)   # pipeline_overlap is negative
    return sum(breakdown.get(k, 0.0) for k in A2A) / total if total else 0.0


def operating_point(pm: PerfModel, slo_ms: float, kv: float = KV_LEN) -> dict:
    best = pm.max_batch_for_slo(slo_ms, kv_len=kv)
    b = best["batch_per_npu"]
    if not b:
        return {"batch_per_chip": 0, "tokens_per_s_per_chip": 0.0, "tpot_ms": None, "alltoall_share": None}
    r = pm.decode_step(b, kv)
    return {"batch_per_chip": b, "tokens_per_s_per_chip": r.tokens_per_s_per_npu,
            "tpot_ms": round(r.tpot_ms, 3), "alltoall_share": round(alltoall_share(r.breakdown), 4)}


def system_row(name: str, slo_ms: float) -> dict:
    cat = catalog()
    dep = cat.deployment(name)
    pm = PerfModel(dep, cat)
    op = operating_point(pm, slo_ms)
    t = tco.per_chip_hour(dep.system)
    kw, usd, tps = t["parts"]["boundary_kw_per_chip"], t["tco_usd_per_chip_hour"], op["tokens_per_s_per_chip"]
    peak = pm.chip.peak_tflops(pm.dep.precision) * pm.dies_per_npu
    rental = figures(tps, peak, kw, t["rental_usd_per_chip_hour"])["usd_per_million_tokens"]
    return {"deployment": name, "system": dep.system, "name": cat.system(dep.system).name or dep.system,
            "chip": cat.system(dep.system).accelerator,
            "precision": dep.precision, "decode_ep": dep.decode.ep, "source": "model",
            **op, **figures(tps, peak, kw, usd),
            "prefill_tokens_per_s_per_chip": round(pm.prefill_batch(PROMPT).tokens_per_s_per_npu, 1),
            "chip_power_kw": kw,
            "chip_power_source": (f"tco.toml: IT {t['parts']['it_kw_per_chip']} kW ({t['sources']['it_kw_per_chip']}) "
                                  f"+ network {t['parts']['network_kw_per_chip']} kW, x PUE {t['parts']['pue']} "
                                  f"({t['sources']['pue']})"),
            "usd_per_chip_hour": usd, "price_basis": "tco",
            "usd_per_chip_hour_source": (f"TCO (tco.toml) = capex ${t['parts']['capex_usd_per_chip_hour']}/h "
                                         f"(${t['parts']['capex_usd_per_chip']:,} per chip, "
                                         f"{t['sources']['capex_usd_per_chip']}, over {t['parts']['life_years']} "
                                         f"years, {t['sources']['life_years']}) + energy "
                                         f"${t['parts']['energy_usd_per_chip_hour']}/h (at ${t['parts']['usd_per_kwh']}/kWh, "
                                         f"{t['sources']['usd_per_kwh']}) + operations "
                                         f"${t['parts']['operations_usd_per_chip_hour']}/h "
                                         f"({t['sources']['ops_fraction_per_year']})"),
            "tco_usd_per_chip_hour": usd, "tco_parts": t["parts"], "tco_sources": t["sources"],
            "tco_sensitivities": tco.sensitivities(dep.system),
            "rental_usd_per_chip_hour": t["rental_usd_per_chip_hour"],
            "rental_usd_per_chip_hour_source": t["sources"]["rental_usd_per_chip_hour"],
            "usd_per_million_tokens_rental": rental,
            "bands": bands(name, pm, op, slo_ms)}


DECODE_FIGURES = ("tokens_per_s_per_chip", "tpot_ms", "alltoall_share", "tokens_per_s_per_tflops",
                  "tokens_per_s_per_kw", "usd_per_million_tokens", "usd_per_million_tokens_rental")
INPUTS = {"decode_ep": "deployments.toml", "chip_power_kw": "tco.toml, power at one boundary",
          "usd_per_chip_hour": "tco.toml", "tco_usd_per_chip_hour": "tco.toml",
          "rental_usd_per_chip_hour": "tco.toml, rental basis"}


def bands(name: str, pm: PerfModel, op: dict, slo_ms: float) -> dict[str, dict]:
    """Each figure's label and +-% band (twin/predict/crossval.py): model figures from the cross-validation
    of their class (ratios to a throughput carry its relative band; the label is a published row's
    role only at that row's conditions); the batch at the SLO as the range of batches meeting the
    SLO when TPOT is off by its band; catalog inputs labelled "input" (their sensitivities are
    `tco_sensitivities`)."""
    dec = crossval.band("decode", name, "decode", decode_point(op["batch_per_chip"], KV_LEN))
    pre = crossval.band("prefill", name, "prefill", prefill_point(PROMPT))
    out = {**{f: dec for f in DECODE_FIGURES}, "prefill_tokens_per_s_per_chip": pre}
    b, pct = op["batch_per_chip"], dec["band_pct"] or 0.0
    lo, hi = (pm.max_batch_for_slo(slo_ms / f, kv_len=KV_LEN)["batch_per_npu"] for f in (1 + pct / 100, 1 - pct / 100))
    out["batch_per_chip"] = {**dec, "band_pct": round(max(b - lo, hi - b) / b * 100, 1) if b else None,
                             "band_range": [lo, hi],
                             "band_basis": f"batches meeting the SLO when TPOT is off by its band ({dec['band_basis']})"}
    out.update({k: {"label": "input", "band_pct": None, "band_basis": f"catalog input ({src})"}
                for k, src in INPUTS.items()})
    return out


def _point_bands(name: str, batch: float, same_deployment: bool) -> dict[str, dict]:
    """A sweep or curve point's decode band; a point off the deployment (another EP) is a prediction."""
    b = crossval.band("decode", name, "decode", decode_point(batch, KV_LEN))
    if not same_deployment and b["label"] != "prediction":
        b = {**b, "label": "prediction", "band_basis": b["band_basis"] + "; another EP than deployed"}
    return {f: b for f in ("tokens_per_s_per_chip", "tpot_ms", "alltoall_share")}


def ep_sweep(name: str, degrees=EP_DEGREES) -> list[dict]:
    """Decode tokens/s per chip and TPOT against EP degree at the deployment's batch per die, or
    the largest batch whose KV fits where fewer experts per die leave less HBM for KV (the row says
    which batch). EP degrees the system cannot hold are left out."""
    cat = catalog()
    rows = []
    for ep in degrees:
        try:
            _, dep, _ = configure(name, "paper-decode", {"decode_ep": ep, "decode_batch_per_die": 1})
        except ValueError:
            continue
        pm = PerfModel(Deployment.model_validate(dep), cat)
        per_die = min(cat.deployment(name).decode.batch_per_die, pm.max_batch_per_die(KV_LEN))
        if per_die < 1:
            continue
        r = pm.decode_step(per_die * pm.dies_per_npu, KV_LEN)
        sysm = cat.system(pm.dep.system)
        domain = sysm.nvlink_domain_gpus or sysm.npus_per_node
        rows.append({"deployment": name, "decode_ep": ep,
                     "fabric": "ub" if sysm.kind == "supernode" else
                     "nvlink" if ep <= domain * pm.dies_per_npu else "nvlink+rdma",
                     "batch_per_chip": per_die * pm.dies_per_npu,
                     "tokens_per_s_per_chip": round(r.tokens_per_s_per_npu, 1), "tpot_ms": round(r.tpot_ms, 3),
                     "alltoall_share": round(alltoall_share(r.breakdown), 4), "source": "model",
                     "bands": _point_bands(name, per_die * pm.dies_per_npu, ep == cat.deployment(name).decode.ep)})
    return rows


CURVE_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def curve(name: str) -> list[dict]:
    """Decode tokens/s per chip against TPOT as the batch grows, while the KV cache fits."""
    pm = PerfModel(name)
    rows = pm.decode_curve(KV_LEN, list(CURVE_BATCHES))
    return [{"batch_per_chip": r["batch_per_npu"], "tpot_ms": round(r["tpot_ms"], 3),
             "tokens_per_s_per_chip": round(r["tokens_per_s_per_npu"], 1),
             "bands": _point_bands(name, r["batch_per_npu"], True)} for r in rows if r["fits_kv"]]


def compare(slo_ms: float = 50.0, systems=SYSTEMS) -> dict:
    return {"tpot_slo_ms": slo_ms, "workload": {"prompt": PROMPT, "output": OUTPUT, "kv_len": KV_LEN,
                                                "model": "deepseek-r1"},
            "systems": [system_row(s, slo_ms) for s in systems],
            "ep_sweep": {s: ep_sweep(s) for s in systems},
            "curves": {s: curve(s) for s in systems},
            "notes": ["source model: the calibrated perf model's steady state (docs: python -m twin validate)",
                      "operating point: the largest decode batch per chip meeting the TPOT SLO whose KV fits",
                      "alltoall_share: dispatch + combine over operator time, before overlap",
                      "price basis: TCO per chip-hour (tco.toml: capex over the service life + power at one "
                      "boundary, accelerator + host + network share, x PUE x electricity price); rental "
                      "prices are the second basis (usd_per_million_tokens_rental)",
                      "bands: label and +-% per figure from leave-one-source-out cross-validation "
                      "(python -m twin validate)"]}
