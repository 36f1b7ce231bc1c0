"""Calibration targets (ref 4 and ref 3) and the twin's value for each, by the same code path.

The comparator deployments (H800, H100) are predicted, not checked: no constant is tuned to them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .perf import PerfModel

PAPER = "cloudmatrix-infer-paper"
EP_TABLE = (8, 16, 32, 64, 128, 256)
DISPATCH_US = (116, 131, 133, 141, 152, 152)   # ref 4 MoE communication table
COMBINE_US = (118, 132, 146, 150, 150, 149)    # ref 4 MoE communication table


@dataclass(frozen=True)
class Target:
    name: str
    target: float
    tolerance_pct: float
    measure: Callable[[PerfModel], float]
    source: str


def _targets() -> list[Target]:
    t = [
        Target("prefill tokens/s per NPU (4K, default balance)", 5655, 5,
               lambda pm: pm.prefill_batch(4096).tokens_per_s_per_npu, "ref 4 prefill row 1"),
        Target("prefill tokens/s per NPU (4K, perfect balance)", 6688, 5,
               lambda pm: pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu,
               "ref 4 prefill row 2"),
        Target("decode TPOT ms (batch 96, 4K KV)", 49.4, 5,
               lambda pm: pm.decode_step(96, 4096).tpot_ms, "ref 4 decode row 1"),
        Target("decode tokens/s per NPU (batch 96, 4K KV)", 1943, 5,
               lambda pm: pm.decode_step(96, 4096).tokens_per_s_per_npu, "ref 4 decode row 1"),
        Target("decode TPOT ms (batch 8, 4K prompt + 256 out)", 14.9, 5,
               lambda pm: pm.decode_step(8, 4096 + 128).tpot_ms, "ref 4 decode row 2"),
        Target("decode tokens/s per NPU (batch 8)", 538, 5,
               lambda pm: pm.decode_step(8, 4096 + 128).tokens_per_s_per_npu, "ref 4 decode row 2"),
        Target("MTP per-layer us without MTP (batch 96)", 874, 10,
               lambda pm: pm.decode_step(96, 4096, mtp=False).streams_ms["per_layer"] * 1e3,
               "ref 3 MTP"),
        Target("MTP per-layer us with MTP (batch 96)", 1260, 10,
               lambda pm: pm.decode_step(96, 4096).streams_ms["per_layer"] * 1e3, "ref 3 MTP"),
        Target("EMS prefill speed-up at 90% token reuse", 2.28, 5,
               lambda pm: pm.prefill_batch(4096, reuse=0.9).tokens_per_s_per_npu
               / pm.prefill_batch(4096).tokens_per_s_per_npu, "ref 3 context caching"),
    ]
    for ep, d, c in zip(EP_TABLE, DISPATCH_US, COMBINE_US):
        t.append(Target(f"UB dispatch us (EP{ep}, 128 tokens/rank)", d, 10,
                        lambda pm, ep=ep: pm.dispatch_us(ep), "ref 4 MoE communication"))
        t.append(Target(f"UB combine us (EP{ep}, 128 tokens/rank)", c, 10,
                        lambda pm, ep=ep: pm.combine_us(ep), "ref 4 MoE communication"))
    return t


TARGETS = _targets()


def rows(pm: PerfModel | None = None) -> list[dict]:
    pm = pm or PerfModel(PAPER)
    out = []
    for t in TARGETS:
        twin = t.measure(pm)
        err = (twin - t.target) / t.target * 100
        out.append({"name": t.name, "target": t.target, "twin": round(twin, 3),
                    "error_pct": round(err, 2), "tolerance_pct": t.tolerance_pct,
                    "pass": abs(err) <= t.tolerance_pct, "source": t.source})
    return out


def predictions() -> list[dict]:
    """Comparator deployments predicted from their hardware entries alone."""
    out = []
    for name in ("deepseek-h800", "sglang-h100", PAPER):
        pm = PerfModel(name)
        pre = pm.prefill_batch(4096)
        dec = pm.decode_step(None, 4096)
        out.append({"deployment": name, "phase": "prefill",
                    "tokens_per_s_per_gpu": round(pre.tokens_per_s_per_npu, 1), "tpot_ms": None,
                    "setting": f"{pm.dep.prefill.tokens_per_die * pm.dies_per_npu} tokens/NPU, 4K prompt"})
        out.append({"deployment": name, "phase": "decode",
                    "tokens_per_s_per_gpu": round(dec.tokens_per_s_per_npu, 1),
                    "tpot_ms": round(dec.tpot_ms, 2),
                    "setting": f"batch {pm.dep.decode.batch_per_die * pm.dies_per_npu}/NPU, 4K KV"})
    return out
