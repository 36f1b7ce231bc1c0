"""Why a supernode: DeepSeek-R1 under one workload on CloudMatrix384 and four GPU systems.

Each system serves decode at its operating point: the largest batch per chip whose TPOT meets the
SLO and whose KV cache fits (perf model, source "model"). Figures per chip, per dense TFLOPS of
the serving precision, per kW and per dollar use the power and price per chip of systems.toml; each
comes with the comment it carries there (its source, or "assumption"). The EP sweep keeps the batch
per die and changes the decode EP degree: where the all-to-all leaves NVLink for RDMA, TPOT rises.
"""
from __future__ import annotations

import re
from functools import lru_cache

from .. import crossval
from ..config import CATALOG_DIR, Deployment, catalog
from ..perf import PerfModel, economics
from .points import configure

SYSTEMS = ("cloudmatrix-infer-paper", "deepseek-h800", "sglang-h100", "hgx-b200-r1", "gb200-nvl72-r1")
EP_DEGREES = (8, 16, 32, 48, 64, 72, 96, 128, 144, 160, 256, 288, 320)
PROMPT, OUTPUT = 4096, 256      # ref 4 decode row 2: 4K prompt, 256 output
KV_LEN = PROMPT + OUTPUT / 2    # mean KV length over a decode
A2A = ("dispatch", "combine")


@lru_cache(maxsize=1)
def _sources() -> dict[tuple[str, str], str]:
    """(system, field) -> the comment next to the value in systems.toml (the value's source)."""
    out, section = {}, None
    for line in (CATALOG_DIR / "systems.toml").read_text().splitlines():
        m = re.match(r"^\[([^\]]+)\]", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^(\w+)\s*=[^#]*#\s*(.+)$", line)
        if m and section:
            out[(section, m.group(1))] = m.group(2).strip()
    return out


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
    src = _sources()
    return {"deployment": name, "system": dep.system, "chip": cat.system(dep.system).accelerator,
            "precision": dep.precision, "decode_ep": dep.decode.ep, "source": "model",
            **op, **economics(pm, op["tokens_per_s_per_chip"]),
            "prefill_tokens_per_s_per_chip": round(pm.prefill_batch(PROMPT).tokens_per_s_per_npu, 1),
            "chip_power_kw": pm.system.chip_power_kw,
            "chip_power_source": src.get((dep.system, "chip_power_kw"), "assumption"),
            "usd_per_chip_hour": pm.system.usd_per_chip_hour,
            "usd_per_chip_hour_source": src.get((dep.system, "usd_per_chip_hour"), "assumption"),
            "bands": bands(name)}


DECODE_FIGURES = ("tokens_per_s_per_chip", "tpot_ms", "tokens_per_s_per_tflops", "tokens_per_s_per_kw",
                  "usd_per_million_tokens")


def bands(name: str) -> dict[str, dict]:
    """Each model figure's label and +-% band (twin/crossval.py); ratios to a throughput (per TFLOPS,
    per kW, per dollar) carry that throughput's relative band."""
    dec, pre = crossval.band("decode", name, "decode"), crossval.band("prefill", name, "prefill")
    return {**{f: dec for f in DECODE_FIGURES}, "prefill_tokens_per_s_per_chip": pre}


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
                     "alltoall_share": round(alltoall_share(r.breakdown), 4), "source": "model"})
    return rows


CURVE_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def curve(name: str) -> list[dict]:
    """Decode tokens/s per chip against TPOT as the batch grows, while the KV cache fits."""
    pm = PerfModel(name)
    rows = pm.decode_curve(KV_LEN, list(CURVE_BATCHES))
    return [{"batch_per_chip": r["batch_per_npu"], "tpot_ms": round(r["tpot_ms"], 3),
             "tokens_per_s_per_chip": round(r["tokens_per_s_per_npu"], 1)} for r in rows if r["fits_kv"]]


def compare(slo_ms: float = 50.0, systems=SYSTEMS) -> dict:
    return {"tpot_slo_ms": slo_ms, "workload": {"prompt": PROMPT, "output": OUTPUT, "kv_len": KV_LEN,
                                                "model": "deepseek-r1"},
            "systems": [system_row(s, slo_ms) for s in systems],
            "ep_sweep": {s: ep_sweep(s) for s in systems},
            "curves": {s: curve(s) for s in systems},
            "notes": ["source model: the calibrated perf model's steady state (docs: python -m twin validate)",
                      "operating point: the largest decode batch per chip meeting the TPOT SLO whose KV fits",
                      "alltoall_share: dispatch + combine over operator time, before overlap",
                      "power and price per chip: systems.toml, with the comment each value carries there"]}
