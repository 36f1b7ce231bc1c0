"""What a lesson's page shows, read from a live twin the way the page reads it.

Each reader names one number a page draws and the page it is on; it takes the `twin.live.runner.Twin`
and returns the value from the same snapshot fields and figure functions that page calls (the
Overview's `snap.kpis`, the Trade-offs curve `twin.predict.perf.decode_curve`, the Failures table
`twin.engine.faults.rows.rows`, ...), never a re-computation. A lesson figure names its reader as
`name` or `name@arg` (e.g. `tradeoffs.curve_tpot_ms@96`); the loader refuses a reader of another
page than the one the step opens, so what the class is asked to predict is on the screen.
No reader imports the UI (twin.ui imports the lessons).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Reader:
    page: str
    read: Callable                # (twin, arg or None) -> float
    what: str                     # where on the page, for the check's report


def _kpi(key: str, scale: float = 1.0):
    """A KPI card: `snap.kpis[key]` (the page formats it; TTFT is shown in seconds, hence `scale`)."""
    return lambda tw, _arg: tw.snapshot.kpis[key] * scale


def _last(key: str, scale: float = 1.0):
    """The newest point of a strip chart (`snap.history[key]`, what its right end shows)."""
    return lambda tw, _arg: [v for v in tw.snapshot.history[key] if v is not None][-1] * scale


def _across(sign: int):
    """A GPU cluster's split of the scale-up chart (`pages/traffic` strips): the newest all-to-all
    point less (sign -1: the NVLink chart) or the RDMA KV point plus (sign +1: the top of the stacked
    RDMA chart) the part that crossed servers, `ub_across_gbps` (NaN on a supernode: nothing crosses)."""
    def read(tw, _arg):
        across = _last("ub_across_gbps")(tw, None)
        across = 0.0 if across != across else across
        base = _last("ub_gbps" if sign < 0 else "rdma_gbps")(tw, None)
        return base + sign * across
    return read


def _curve(field: str):
    """The Trade-offs model curve at the 4K context the page opens with, at batch `arg` per NPU."""
    def read(tw, arg):
        from twin.predict.perf import decode_curve
        pts = {p["batch_per_npu"]: p for p in decode_curve(tw.snapshot.deployment, 4096)}
        return pts[int(arg)][field]
    return read


def _fault(field: str):
    """A cell of the Failures page's table: fault number `arg` (1 if none), `twin.engine.faults.rows.rows`."""
    def read(tw, arg):
        from twin.engine.faults.rows import rows
        snap = tw.snapshot
        row = next(r for r in rows(snap.faults, snap.sim_time) if int(r["id"]) == int(arg or 1))
        return row[field]
    return read


def _prediction(field: str):
    """A cell of the Validation page's predictions table (`twin.predict.validate.predictions`), row `deployment/phase`."""
    def read(_tw, arg):
        from twin.predict.validate import predictions
        dep, phase = arg.split("/")
        return next(p for p in predictions() if p["deployment"] == dep and p["phase"] == phase)[field]
    return read


def _day(field: str):
    """The Cloud page's live line: `twin.cloud.live.day_figures` of the snapshot's co-pool day."""
    def read(tw, _arg):
        from twin.cloud import live
        return live.day_figures(tw.snapshot.cloud)[field]
    return read


def _training(field: str):
    """A cell of the Cloud page's training table (`twin.cloud.training.compare`), system `arg`."""
    def read(_tw, arg):
        from twin.cloud.training import compare
        row = compare()["systems"][arg]
        return row["breakdown_s"]["all_to_all_exposed"] if field == "all_to_all_exposed" else row[field]
    return read


def _maas_start(_tw, arg):
    """The MaaS page's map before a run: NPUs model `arg` holds when the day starts
    (`twin.cloud.maasjob.start_owner` of the catalog's maas-day, what the map draws)."""
    from twin.cloud.maas import UNIT_NPUS, load_day
    from twin.cloud.maasjob import start_owner
    return start_owner(load_day("maas-day")).count(arg) * UNIT_NPUS


READERS = {
    "overview.input_tps_per_npu": Reader("/", _kpi("input_tps_per_npu"), "Input per prefill NPU"),
    "overview.output_tps_per_npu": Reader("/", _kpi("output_tps_per_npu"), "Output per decode NPU"),
    "overview.ttft_p50_s": Reader("/", _kpi("ttft_p50_ms", 1e-3), "TTFT p50 (s)"),
    "overview.tpot_p50_ms": Reader("/", _kpi("tpot_p50_ms"), "TPOT p50 (ms)"),
    "overview.decode_batch_per_npu": Reader("/", _kpi("decode_batch_per_npu"), "Decode useful work: batch now"),
    "tradeoffs.curve_tpot_ms": Reader("/tradeoffs", _curve("tpot_ms"), "model curve: TPOT at batch"),
    "tradeoffs.curve_tps_per_npu": Reader("/tradeoffs", _curve("tokens_per_s_per_npu"), "model curve: tok/s at batch"),
    "tradeoffs.live_tpot_ms": Reader("/tradeoffs", _kpi("tpot_p50_ms"), "Running twin now: TPOT p50"),
    "tradeoffs.live_tps_per_npu": Reader("/tradeoffs", _kpi("output_tps_per_npu"), "Running twin now: tok/s per chip"),
    "tradeoffs.live_batch_per_npu": Reader("/tradeoffs", _kpi("decode_batch_per_npu"), "Running twin now: batch per chip"),
    "cache.token_hit_ratio": Reader("/cache", _kpi("token_hit_ratio"), "Token hit ratio"),
    "cache.ttft_hit_p50_s": Reader("/cache", _last("ttft_hit_p50_ms", 1e-3), "TTFT p50 with a hit (chart)"),
    "traffic.ub_gbps": Reader("/traffic", _last("ub_gbps"), "UB plane chart (GB/s)"),
    "traffic.nvlink_gbps": Reader("/traffic", _across(-1), "NVLink chart (GB/s)"),
    "traffic.rdma_gbps": Reader("/traffic", _across(+1), "RDMA chart, its stacked top (GB/s)"),
    "traffic.vpc_gbps": Reader("/traffic", _last("vpc_gbps"), "VPC chart (GB/s)"),
    **{f"failures.{f}": Reader("/failures", _fault(f), f"fault table: {f}")
       for f in ("requests_affected", "requeued", "recomputed", "lost", "detect_s", "recover_s", "goodput_before",
                 "goodput_during", "slo_before", "slo_during", "tpot_before_ms", "tpot_during_ms", "tpot_after_ms")},
    **{f"validation.{f}": Reader("/validation", _prediction(f), f"predictions table: {f}")
       for f in ("tokens_per_s_per_tflops", "tokens_per_s_per_kw", "usd_per_million_tokens")},
    **{f"cloud.{f}": Reader("/cloud", _day(f), f"live line: {f}") for f in ("steps", "moves", "supernode_util")},
    **{f"cloud.training_{f}": Reader("/cloud", _training(f), f"training table: {f}")
       for f in ("mfu", "mfu_compute_only", "all_to_all_exposed")},
    "maas.start_npus": Reader("/maas", _maas_start, "map before a run: NPUs a model starts with"),
}


def reader(spec: str) -> tuple[Reader, str | None]:
    """(reader, argument) for `name` or `name@arg`; KeyError naming the readers if unknown."""
    name, _, arg = spec.partition("@")
    if name not in READERS:
        raise KeyError(f"read = {spec!r}: allowed one of {', '.join(sorted(READERS))} (with @arg where needed)")
    return READERS[name], arg or None
