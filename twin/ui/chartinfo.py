"""What each page chart shows and where its numbers come from: the text of its (i), by chart id.

`components.graph` looks a chart's text up here when the page passes none, so the pages' chart
code stays as it is and every explanation is in one place for translators. Say the source
(simulated by the engine / computed by the perf model / published in the paper) and, where a chart
shows published figures, whether they are calibration rows (fitted) or validation rows (predicted).
"""
from __future__ import annotations

from twin.ui.lang import N_, _, request_lang

_STRIP = N_("One point per sampling interval of the running twin's simulated time (the window keeps the "
            "last 600).")
_CLIPPED = N_("If a few points are far above the rest (a hang), the axis is clipped and its title says so.")

INFO = {
    # Overview
    "ov-thr-chart": (N_("Prompt tokens prefilled (left axis) and tokens generated (right axis) per second by "
                        "the whole twin, simulated by the engine."), _STRIP),
    "ov-ttft-chart": (N_("Time to first token (queueing + prefill + KV transfer) of requests finished in each "
                         "interval, median and 99th percentile, simulated."), _STRIP),
    "ov-tpot-chart": (N_("Time per output token of requests finished in each interval (decode step time "
                         "divided by tokens per step with MTP), median and 99th percentile, simulated."), _STRIP),
    "ov-util-chart": (N_("Share of each NPU pool's time spent running a batch in the interval, simulated. Busy "
                         "is not the same as useful: a small decode batch keeps a die busy at low throughput. "
                         "Decode useful work: simulated output tokens/s per decode NPU over the perf model's "
                         "tokens/s per NPU at the deployment's operating point (batch 96 per NPU, 4K KV)."),
                      _STRIP),
    "ov-slo-chart": (N_("Completions meeting both the TTFT and the TPOT SLO of the deployment, and the share of "
                        "prompt tokens found in the EMS cache, per interval, simulated."), _STRIP),
    "ov-req-chart": (N_("Requests arrived and not finished, and those waiting for a prefill batch or a decode "
                        "slot, at each sample, simulated. No request is dropped: a growing queue means overload."),
                     _STRIP),
    # Cache
    "ca-hit": (N_("Share of looked-up prompt KV blocks (and tokens) found in EMS in each interval, simulated "
                  "from the workload's prefix reuse. The two differ only by a prompt's partial last block."), _STRIP),
    "ca-tier": (N_("KV cache held in the pooled CPU DRAM and demoted to SSD, in GB, simulated (capacities from "
                   "the deployment in the catalog)."), _STRIP),
    "ca-bytes": (N_("KV bytes loaded from EMS over the cache plane per request with a hit, simulated (block size "
                    "and bytes per token from the model card)."), _STRIP),
    "ca-ttft": (N_("Median time to first token of requests that hit the cache (at least half the prompt from "
                   "EMS) against those that did not, over a rolling window, simulated: a hit skips the prefill "
                   "of its cached prefix."), _STRIP),
    # Traffic
    "tr-scaleup": (N_("Bytes per second on the scale-up fabric (UB on the supernode; NVLink and RDMA for the "
                      "expert all-to-all on a GPU cluster), simulated from each step's dispatch and combine and "
                      "the EMS loads."), _STRIP),
    "tr-rdma": (N_("Bytes per second on the RDMA plane (KV transfers from prefill to decode), simulated."),
                _STRIP),
    "tr-vpc": (N_("Bytes per second on the VPC plane (datacenter network and storage), simulated."), _STRIP),
    "tr-matrix": (N_("Bytes per second between each pair of nodes over the last interval, simulated: the expert "
                     "all-to-all between the dies of each instance, EMS loads to and from the cache servers. "
                     "Log colour scale: a decode instance's all-to-all over its 20 nodes and a prefill "
                     "instance's inside its 2 nodes differ a thousandfold."),),
    # Trade-offs
    "to-fig": (N_("Curve: decode tokens/s per NPU against TPOT for each batch size, computed by the calibrated "
                  "perf model. Stars: the paper's two decode points (reference section 4), calibration rows the "
                  "model was fitted to. Pink dot: the running twin's measured operating point (simulated)."),),
    # Failures
    "fl-tpot-chart": (N_("Time per output token, median and p99, of requests finished in each interval, "
                         "simulated; red bands mark faults from injection to recovery."), _CLIPPED),
    "fl-ttft-chart": (N_("Median time to first token per interval, simulated; requeued requests pay a new "
                         "prefill, which shows here."), _CLIPPED),
    "fl-good-chart": (N_("Output tokens per second of requests that met both SLOs (goodput) against all output, "
                         "simulated: the cost of a fault in useful work."), _STRIP),
    "fl-slo-chart": (N_("Share of completions in each interval meeting both the TTFT and TPOT SLOs, simulated. An "
                        "interval with no completions (a hang) draws no point."), _STRIP),
    # Cloud
    "cl-timeline": (N_("The co-pool day on the twin you view, simulated by the engine. Top: NPUs per pool (stacked; "
                       "a draining group still counts in its serving pool) and each switch as a marker (▼ green: "
                       "to training, ▲ red: back to serving). Bottom: the arrival rate against the serving capacity "
                       "at the perf model's operating point, and the supernode's useful share (right axis)."),
                    N_("The day is compressed: 600 simulated seconds stand for 24 hours; the last two days are "
                       "kept. Training steps so far are in the line above the chart.")),
}


def text(chart_id: str) -> str | None:
    """The (i) text of a chart in the viewer's language, or None for a chart not listed here."""
    parts = INFO.get(chart_id)
    sep = "" if request_lang() == "zh" else " "        # Chinese sentences follow on without a space
    return sep.join(_(p) for p in parts) if parts else None
