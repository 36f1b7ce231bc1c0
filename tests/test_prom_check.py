"""A real Prometheus (Debian's `prometheus`; `make prometheus` installs it) scrapes a live `twin serve`
under a short load: every expression of the kept vLLM dashboards returns data, except those that
cannot apply to a text-only simulated model (twin.cli.prom_check.NOT_APPLICABLE, listed in the docs)."""
from __future__ import annotations

import io
import shutil

import pytest

from twin.cli.prom_check import NOT_APPLICABLE, check

PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (`make prometheus` installs Debian's)")
def test_every_dashboard_expression_returns_data_from_a_real_prometheus():
    out = io.StringIO()
    report = check(PROMETHEUS, load_s=12.0, out=out)
    assert {name: r["empty"] for name, r in report.items()} == {name: [] for name in report}, out.getvalue()
    assert {name: (r["data"], len(r["not_applicable"])) for name, r in report.items()} == {
        "vllm-overview-targets.json": (82, 2), "vllm-performance-statistics.json": (21, 0),
        "vllm-query-statistics.json": (14, 0), "vllm-grafana.json": (29, 0)}
    assert len(NOT_APPLICABLE) == 4
