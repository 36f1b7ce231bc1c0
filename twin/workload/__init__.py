"""Request workloads for the engine: real traces and synthetic generators, as numpy arrays
(see `model` for the arrays and the hit-ratio definition)."""
from twin.workload.model import MOONCAKE_BLOCK_SIZE, SHARED_MIN, LapIds, TraceError, Workload, ideal_hit_ratio
from twin.workload.synthetic import MAX_SYNTHETIC_REQUESTS, PREFIX_DEPTH, LengthDist, synthetic
from twin.workload.tracefile import (FILE_LIMITS, FORMATS, MAX_LINE_CHARS, MAX_TRACE_BYTES, MAX_TRACE_LINES, MAX_TRACE_SPAN_S,
                        TRACES, UPLOAD_LIMITS, TraceLimits, TraceNotFound, brief, default_trace_path, load_trace, parse_trace_text,
                        read_regular_file)

__all__ = ["FILE_LIMITS", "FORMATS", "MAX_LINE_CHARS", "MAX_SYNTHETIC_REQUESTS", "MAX_TRACE_BYTES", "MAX_TRACE_LINES",
           "MAX_TRACE_SPAN_S", "MOONCAKE_BLOCK_SIZE", "SHARED_MIN", "LapIds", "PREFIX_DEPTH", "TRACES", "LengthDist",
           "TraceError", "TraceLimits", "TraceNotFound", "UPLOAD_LIMITS", "Workload", "brief", "default_trace_path", "ideal_hit_ratio", "load_trace",
           "parse_trace_text", "read_regular_file", "synthetic"]
