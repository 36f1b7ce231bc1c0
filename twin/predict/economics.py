"""Figures systems are compared by: throughput per chip, per TFLOPS (the paper's efficiency metric:
tokens/s per NPU over its dense peak for the serving precision), per kW, and cost per million tokens.
Power and price per chip are catalog assumptions (systems.toml, each with its source), editable there.
"""
from __future__ import annotations


def figures(tokens_per_s_per_chip: float, peak_tflops_per_chip: float, power_kw: float,
            usd_per_chip_hour: float) -> dict[str, float | None]:
    tps = tokens_per_s_per_chip
    return {
        "tokens_per_s_per_chip": round(tps, 1),
        "tokens_per_s_per_tflops": round(tps / peak_tflops_per_chip, 3) if peak_tflops_per_chip else None,
        "tokens_per_s_per_kw": round(tps / power_kw, 1),
        "usd_per_million_tokens": round(usd_per_chip_hour / (tps * 3600) * 1e6, 4) if tps > 0 else None,
    }
