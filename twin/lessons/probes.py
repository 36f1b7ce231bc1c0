"""Measurements a lesson needs that no `python -m twin` command prints on its own; each returns a
plain dict (printed as JSON by `python -m twin.lessons probe NAME`)."""
from __future__ import annotations

from twin.predict.perf import PerfModel

TOKENS_PER_RANK = 48          # the paper's decode batch: 96 per NPU = 48 per die (ref 4 via deployments.toml)


def ems_planes() -> dict:
    """One prefill batch (4K prompts, 16K tokens per NPU) at 90% reuse with the EMS reached over UB
    and over VPC (the deployment's cache plane switched in the perf model)."""
    pm = PerfModel("cloudmatrix-infer-paper")
    out = {}
    for plane in ("ub", "vpc"):
        r = pm.prefill_batch(reuse=0.9, cache_plane=plane)
        out[plane] = {"tokens_per_s_per_npu": round(r.tokens_per_s_per_npu, 1), "ttft_ms": round(r.ttft_ms, 1),
                      "ems_lookup_ms": round(r.breakdown["ems_lookup"], 3),
                      "ems_transfer_ms": round(r.breakdown["ems_transfer"], 1)}
    return out


def alltoall() -> dict:
    """Dispatch + combine per rank at EP8 and EP320, UB on CloudMatrix384 (the paper's kernels) and
    NVLink + RDMA (DeepEP low-latency kernels) on the H800 cluster: each decode pool's own kernel; the same numbers as `python -m twin perf alltoall`."""
    out = {}
    for fabric, dep in (("ub", "cloudmatrix-infer-paper"), ("gpu", "deepseek-h800")):
        pm = PerfModel(dep)
        row = {}
        for ep in (8, 320):
            a = pm.alltoall(ep, TOKENS_PER_RANK, pm.pool_kernel("decode"))
            row[f"ep{ep}"] = {"dispatch_us": a["dispatch_us"], "combine_us": a["combine_us"],
                              "total_us": round(a["dispatch_us"] + a["combine_us"], 1)}
        row["ratio"] = round(row["ep320"]["total_us"] / row["ep8"]["total_us"], 2)
        out[fabric] = row
    return out


PROBES = {"ems-planes": ems_planes, "alltoall": alltoall}
