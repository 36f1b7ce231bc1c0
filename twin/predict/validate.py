"""Calibration and validation rows: a published figure and the twin's value, by the same code path.

Each row is either *calibration* (a constant of perf.toml was fitted to it; `python -m twin
calibrate` refits them) or *validation* (nothing was fitted to it: the twin predicts it from hardware,
kernel tables and the deployment alone). SGLang's H100 figures are validation rows; DeepSeek's H800
profile rows calibrate the GPU overlap's one constant ([sm_overlap] corun_stretch), labelled so.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from twin.model.config import catalog
from twin.i18n import N_, said
from twin.predict.perf import PerfModel, economics
from twin.predict import kernels
from twin.predict.comm import Traffic
from twin.predict.ems import BLOCK_TOKENS

PAPER = "cloudmatrix-infer-paper"
H800 = "deepseek-h800-profile"
H100 = "sglang-h100"
H200 = "sglang-h200-mtp-small"
H200_KV = 65536 + 4096 / 2       # lm-sys blog 2025-07-17-mtp: 64K input, 4K output: mean KV of a step
MTP_BLOG = "lm-sys blog 2025-07-17-mtp, case study 1"
LARGE_EP_BLOG = "lm-sys blog 2025-05-05-large-scale-ep"
EP_TABLE = (8, 16, 32, 64, 128, 256)
DISPATCH_US = (116, 131, 133, 141, 152, 152)   # ref 4 MoE communication table
COMBINE_US = (118, 132, 146, 150, 150, 149)    # ref 4 MoE communication table
DEEPEP_NORMAL = {8: (153, 158), 16: (43, 43), 32: (58, 57), 64: (51, 50)}   # ref G 3, GB/s
DEEPEP_LL = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369),
             256: (194, 360)}                                                # ref G 3, us
# DeepEP V2 (deepseek-ai/DeepEP README at 0297fc8, "Performance"): SM90, CX7, 8,192 tokens per batch,
# logical GB/s per rank (own node's share included): EP 8 x 2 and EP 8 x 4. The README names the
# architecture, not the part: the H100 cluster (NVLink 450 GB/s) is taken as the SM90 system
# (assumption: over H800's 200 GB/s NVLink, forwarding inside the node could not carry 90 GB/s)
DEEPEP_V2 = {16: (90, 81), 32: (61, 61)}
DEEPEP_V2_SOURCE = "deepseek-ai/DeepEP README at 0297fc8, V2 performance (SM90, CX7)"
DEEPEP_FP8_BYTES = 7168 * (1 + 4 / 128)   # DeepEP tests: FP8 hidden + one FP32 scale per 128
DEEPEP_BF16_BYTES = 7168 * 2


@dataclass(frozen=True)
class Target:
    name: str
    target: float
    tolerance_pct: float
    measure: Callable[[PerfModel], float]
    source: str
    deployment: str = PAPER
    kind: str = "calibration"      # or "validation": nothing was fitted to it
    group: str = "ascend"          # which constants of perf.toml it calibrates (calibrate.py)
    point: tuple = ()              # a serving row's conditions (decode_point / prefill_point)


def decode_point(batch: float, kv: float, balance: str = "default", mtp: bool | None = None,
                 microbatch: bool | None = None, precision: str | None = None) -> tuple:
    """The conditions of one decode figure (None: the deployment's own setting), comparable with
    a row's: a figure carries a row's role only at that row's conditions (`role`)."""
    return ("decode", float(batch), float(kv), balance, mtp, microbatch, precision)


def prefill_point(prompt: float = 4096, tokens_per_npu: float | None = None, balance: str = "default",
                  reuse: float = 0.0, microbatch: bool | None = None, precision: str | None = None) -> tuple:
    return ("prefill", float(prompt), tokens_per_npu and float(tokens_per_npu), balance, float(reuse),
            microbatch, precision)


def _reused(pm: PerfModel):
    """Ref 3's context-caching batch: 4K prompts, 90% of each prompt's tokens a cached prefix, served
    in EMS's whole blocks (ems.whole_block_reuse)."""
    return pm.prefill_batch(4096, reuse=0.9, block_tokens=BLOCK_TOKENS)


def _deepep_normal(ep: int, nbytes: float, kernel: str = "normal",
                   tokens: int = 4096) -> Callable[[PerfModel], float]:
    return lambda pm: pm.fabric().logical_gbps(Traffic(ep, tokens, nbytes, pm.model.top_k), kernel,
                                                pm.k["nvlink_rdma"])


def _deepep_ll(ep: int, nbytes: float) -> Callable[[PerfModel], float]:
    return lambda pm: pm.fabric().seconds(Traffic(ep, 128, nbytes, pm.model.top_k), "low-latency",
                                           pm.k["nvlink_rdma"]) * 1e6


def _ascend_table(ep: int, tokens: int, kernel: str, op: str, metric: str) -> Callable[[PerfModel], float]:
    return lambda pm: pm.alltoall(ep, tokens, kernel)[f"{op}_{metric}"]


def acceptance_for_length(drafts: int, length: float) -> float:
    """Per-draft acceptance whose expected tokens per step (rules.expected_tokens_per_step) equal a
    published average acceptance length."""
    if not 1 <= length <= 1 + drafts:
        raise ValueError(f"acceptance length = {length}: allowed 1..{1 + drafts} with {drafts} drafts")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(drafts + 1)) < length else (lo, mid)
    return (lo + hi) / 2


def _h200(overlap: bool, drafts: int = 0, length: float = 1.0) -> Callable[[PerfModel], float]:
    """SGLang's small-batch H200 decode (2 requests per GPU) with or without the overlap scheduler
    and with `drafts` chained MTP drafts at a published acceptance length."""
    def measure(pm: PerfModel) -> float:
        upd = {"overlap_scheduler": overlap, "mtp": bool(drafts), "mtp_draft_steps": drafts}
        if drafts:
            upd["mtp_acceptance"] = acceptance_for_length(drafts, length)
        return PerfModel(pm.dep.model_copy(update=upd), k=pm.k).decode_step(2, H200_KV).tokens_per_s_per_npu
    return measure


def _tbo_gain(pm: PerfModel) -> float:
    on = pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu
    return on / pm.prefill_batch(4096, balance="perfect", microbatch=False).tokens_per_s_per_npu


# the DeepEP rows' names (catalog templates: the dashboard shows them translated)
DEEPEP_ROW = {("normal", "dispatch"): N_("DeepEP normal dispatch GB/s (EP%(ep)s, 4,096 tokens)"),
              ("normal", "combine"): N_("DeepEP normal combine GB/s (EP%(ep)s, 4,096 tokens)"),
              ("low-latency", "dispatch"): N_("DeepEP low-latency dispatch us (EP%(ep)s, 128 tokens)"),
              ("low-latency", "combine"): N_("DeepEP low-latency combine us (EP%(ep)s, 128 tokens)"),
              ("normal-v2", "dispatch"): N_("DeepEP V2 dispatch GB/s (EP%(ep)s, 8,192 tokens)"),
              ("normal-v2", "combine"): N_("DeepEP V2 combine GB/s (EP%(ep)s, 8,192 tokens)")}
ASCEND_ROW = {("normal", "dispatch"): N_("DeepEP-Ascend normal dispatch GB/s (EP%(ep)s, 4,096 tokens/die)"),
              ("normal", "combine"): N_("DeepEP-Ascend normal combine GB/s (EP%(ep)s, 4,096 tokens/die)"),
              ("low-latency", "dispatch"): N_("DeepEP-Ascend low-latency dispatch us (EP%(ep)s, 128 tokens/die)"),
              ("low-latency", "combine"): N_("DeepEP-Ascend low-latency combine us (EP%(ep)s, 128 tokens/die)")}


def _targets() -> list[Target]:
    t = [
        Target(N_("prefill tokens/s per NPU (4K, default balance)"), 5655, 5,
               lambda pm: pm.prefill_batch(4096).tokens_per_s_per_npu, "ref 4 prefill row 1",
               point=prefill_point()),
        Target(N_("prefill tokens/s per NPU (4K, perfect balance)"), 6688, 5,
               lambda pm: pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu,
               "ref 4 prefill row 2", point=prefill_point(balance="perfect")),
        Target(N_("decode TPOT ms (batch 96, 4K KV)"), 49.4, 5,
               lambda pm: pm.decode_step(96, 4096).tpot_ms, "ref 4 decode row 1",
               point=decode_point(96, 4096)),
        Target(N_("decode tokens/s per NPU (batch 96, 4K KV)"), 1943, 5,
               lambda pm: pm.decode_step(96, 4096).tokens_per_s_per_npu, "ref 4 decode row 1",
               point=decode_point(96, 4096)),
        Target(N_("decode TPOT ms (batch 8, 4K prompt + 256 out)"), 14.9, 5,
               lambda pm: pm.decode_step(8, 4096 + 128).tpot_ms, "ref 4 decode row 2",
               point=decode_point(8, 4096 + 128)),
        Target(N_("decode tokens/s per NPU (batch 8)"), 538, 5,
               lambda pm: pm.decode_step(8, 4096 + 128).tokens_per_s_per_npu, "ref 4 decode row 2",
               point=decode_point(8, 4096 + 128)),
        Target(N_("MTP per-layer us without MTP (batch 96)"), 874, 5,
               lambda pm: pm.decode_step(96, 4096, mtp=False).streams_ms["per_layer"] * 1e3,
               "ref 3 MTP", point=decode_point(96, 4096, mtp=False)),
        Target(N_("MTP per-layer us with MTP (batch 96)"), 1260, 5,
               lambda pm: pm.decode_step(96, 4096).streams_ms["per_layer"] * 1e3, "ref 3 MTP"),
        Target(N_("EMS prefill speed-up at 90% token reuse"), 2.28, 5,
               lambda pm: pm.prefill_batch(4096).step_ms / _reused(pm).step_ms, "ref 3 context caching",
               group="ems", point=prefill_point(reuse=0.9)),
        # the same experiment's TTFT cut: nothing fitted to it (the paper's TTFT baseline, 1,505 / 0.59
        # = 2,551 ms, is 12% below the batch time its prefill row implies; the twin's TTFT is the batch)
        Target(N_("EMS TTFT cut ms at 90% token reuse"), 1505, 15,
               lambda pm: pm.prefill_batch(4096).ttft_ms - _reused(pm).ttft_ms, "ref 3 context caching, TTFT",
               kind="validation", group="none", point=prefill_point(reuse=0.9)),
        Target(N_("EMS TTFT cut % at 90% token reuse"), 59, 10,
               lambda pm: 100 * (1 - _reused(pm).ttft_ms / pm.prefill_batch(4096).ttft_ms),
               "ref 3 context caching, TTFT", kind="validation", group="none",
               point=prefill_point(reuse=0.9)),
    ]
    for ep, d, c in zip(EP_TABLE, DISPATCH_US, COMBINE_US):
        t.append(Target(said(N_("UB dispatch us (EP%(ep)s, 128 tokens/rank)"), ep=ep), d, 5,
                        lambda pm, ep=ep: pm.dispatch_us(ep), "ref 4 MoE communication"))
        t.append(Target(said(N_("UB combine us (EP%(ep)s, 128 tokens/rank)"), ep=ep), c, 5,
                        lambda pm, ep=ep: pm.combine_us(ep), "ref 4 MoE communication"))
    for ep, (d, c) in DEEPEP_NORMAL.items():
        for name, v, nbytes in (("dispatch", d, DEEPEP_FP8_BYTES), ("combine", c, DEEPEP_BF16_BYTES)):
            t.append(Target(said(DEEPEP_ROW["normal", name], ep=ep), v, 5,
                            _deepep_normal(ep, nbytes), "ref G 3 DeepEP normal kernels", H800,
                            group="nvlink_rdma"))
    for ep, (d, c) in DEEPEP_LL.items():
        for name, v, nbytes in (("dispatch", d, DEEPEP_FP8_BYTES), ("combine", c, DEEPEP_BF16_BYTES)):
            t.append(Target(said(DEEPEP_ROW["low-latency", name], ep=ep), v, 5,
                            _deepep_ll(ep, nbytes), "ref G 3 DeepEP low-latency kernels", H800,
                            group="nvlink_rdma"))
    # kernel tables by shape (kernels.toml): the predictor reads these rows, nothing is fitted to them
    for table in kernels.tables():
        if table.system == "cloudmatrix384":
            for r in table.rows:
                t.append(Target(said(ASCEND_ROW[table.kernel, table.op], ep=r.ep), r.published, 5,
                                _ascend_table(r.ep, int(table.tokens), table.kernel, table.op, table.metric),
                                r.source, group="table"))
    # the GPU overlap's one fitted constant ([sm_overlap] corun_stretch) is fitted to DeepSeek's own
    # H800 profile (ref G 1): those two rows are calibration for it; nothing is fitted to SGLang's rows
    t += [
        Target(N_("DeepSeek H800 prefill tok/s per GPU (4K, 16K/GPU, balanced)"), 7839, 5,
               lambda pm: pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu,
               "ref G 1 DeepSeek profile", H800, group="sm_overlap", point=prefill_point(balance="perfect")),
        Target(N_("DeepSeek H800 decode tok/s per GPU (batch 128, 4K KV, balanced)"), 2325, 5,
               lambda pm: pm.decode_step(128, 4096, balance="perfect").tokens_per_s_per_npu,
               "ref G 1 DeepSeek profile", H800, group="sm_overlap",
               point=decode_point(128, 4096, "perfect")),
        # per-step fixed costs ([step]): SGLang's small-batch H200 decode without MTP
        Target(N_("SGLang H200 decode tok/s per GPU (2 per GPU, 64K in, overlap scheduler)"), 60.4, 5,
               _h200(True), MTP_BLOG, H200, group="sm_overlap", point=decode_point(2, H200_KV)),
        Target(N_("SGLang H200 decode tok/s per GPU (2 per GPU, 64K in, no overlap scheduler)"), 51.0, 5,
               _h200(False), MTP_BLOG + ", no overlap scheduler", H200, group="scheduler"),
    ]
    # validation: SGLang's published H100 figures, nothing fitted to that source
    t += [
        Target(N_("two-batch overlap prefill gain (H100, EP32)"), 1.31, 10, _tbo_gain,
               "ref G 2 SGLang: +27-35%", H100, "validation", "none"),
        Target(N_("SGLang H100 prefill tok/s per GPU (default placement)"), 6288, 10,
               lambda pm: pm.prefill_batch(4096).tokens_per_s_per_npu,
               "ref G 1 SGLang large-scale EP", H100, "validation", "none", prefill_point()),
        Target(N_("SGLang H100 prefill tok/s per GPU (perfect EPLB)"), 7417, 10,
               lambda pm: pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu,
               "ref G 1 SGLang large-scale EP", H100, "validation", "none", prefill_point(balance="perfect")),
        Target(N_("SGLang H100 decode tok/s per GPU (batch 128, 4K KV, MTP 60%)"), 2172, 10,
               lambda pm: pm.decode_step(128, 4000).tokens_per_s_per_npu,
               "ref G 1 SGLang large-scale EP", H100, "validation", "none", decode_point(128, 4000)),
        # the same blog's prefill rows at other prompt lengths (57,674 and 54,543 per node), per GPU
        Target(N_("SGLang H100 prefill tok/s per GPU (1K prompts)"), 57674 / 8, 10,
               lambda pm: pm.prefill_batch(1024).tokens_per_s_per_npu,
               LARGE_EP_BLOG, H100, "validation", "none", prefill_point(1024)),
        Target(N_("SGLang H100 prefill tok/s per GPU (2K prompts)"), 54543 / 8, 10,
               lambda pm: pm.prefill_batch(2048).tokens_per_s_per_npu,
               LARGE_EP_BLOG, H100, "validation", "none", prefill_point(2048)),
        # small-batch MTP on H200 (per-step fixed costs with chained draft steps), nothing fitted to
        # them; new rows of issue 38 hold a 15% tolerance
        Target(N_("SGLang H200 decode tok/s per GPU (2 per GPU, MTP 3-token window, accept 2.18)"), 81.5,
               15, _h200(False, 2, 2.18), MTP_BLOG, H200, "validation", "none"),
        Target(N_("SGLang H200 decode tok/s per GPU (2 per GPU, MTP 4-token window, accept 2.44)"), 82.0,
               15, _h200(False, 3, 2.44), MTP_BLOG, H200, "validation", "none"),
    ]
    # kernel generation (issue 38): DeepEP V2's internode rows, predicted by the fabric's roofline with
    # V1's constants and no per-peer cap; nothing fitted to them
    for ep, (d, c) in DEEPEP_V2.items():
        for name, v, nbytes in (("dispatch", d, DEEPEP_FP8_BYTES), ("combine", c, DEEPEP_BF16_BYTES)):
            t.append(Target(said(DEEPEP_ROW["normal-v2", name], ep=ep), v, 15,
                            _deepep_normal(ep, nbytes, "normal-v2", 8192), DEEPEP_V2_SOURCE, H100,
                            "validation", "none"))
    return t


TARGETS = _targets()


def role(deployment: str, point: tuple) -> str | None:
    """"calibration" or "validation" when a published row was taken at exactly this deployment and
    these conditions, else None: the figure is a prediction (of a calibrated or validated model)."""
    kinds = {t.kind for t in TARGETS if t.deployment == deployment and t.point == point}
    return "calibration" if "calibration" in kinds else kinds.pop() if kinds else None


def row(t: Target, pm: PerfModel) -> dict:
    twin = t.measure(pm)
    err = (twin - t.target) / t.target * 100
    return {"name": t.name, "kind": t.kind, "deployment": t.deployment, "target": t.target,
            "twin": round(twin, 3), "error_pct": round(err, 2), "tolerance_pct": t.tolerance_pct,
            "pass": abs(err) <= t.tolerance_pct, "source": t.source}


def rows(k: dict | None = None) -> list[dict]:
    """Every calibration and validation row (with perf constants `k`, default perf.toml)."""
    models: dict[str, PerfModel] = {}
    out = []
    for t in TARGETS:
        pm = models.setdefault(t.deployment, PerfModel(t.deployment, k=k))
        out.append(row(t, pm))
    return out


@lru_cache(maxsize=1)
def predictions() -> list[dict]:
    """Every deployment at its own operating point, with the figures systems are compared by."""
    out = []
    for name, dep in catalog().deployments.items():
        pm = PerfModel(name)
        pre = pm.prefill_batch(4096)
        dec = pm.decode_step(None, dep.context_tokens)
        chips = pm.dies_per_npu
        points = {"prefill": prefill_point(), "decode": decode_point(dep.decode.batch_per_die * chips,
                                                                      dep.context_tokens)}
        for phase, r, setting in (
                ("prefill", pre, said(N_("%(n)s tokens/chip, 4K prompt"), n=dep.prefill.tokens_per_die * chips)),
                ("decode", dec, said(N_("batch %(b)s/chip, %(kv)s KV"), b=dep.decode.batch_per_die * chips,
                                     kv=dep.context_tokens))):
            # a row's role only at that row's conditions (DeepSeek's profile rows are balanced, the
            # operating point here is not: a model figure)
            label = {"calibration": "calibrated", "validation": "validated"}.get(
                role(name, points[phase]), "prediction" if dep.prediction else "model")
            out.append({"deployment": name, "system": dep.system, "phase": phase, "label": label,
                        "tpot_ms": round(dec.tpot_ms, 2) if phase == "decode" else None,
                        "setting": setting, "tokens_per_s_per_gpu": round(r.tokens_per_s_per_npu, 1),
                        **economics(pm, r.tokens_per_s_per_npu)})
    return out
