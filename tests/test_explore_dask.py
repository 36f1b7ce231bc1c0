"""The same sweep on a Dask distributed cluster (two worker processes on loopback) gives the same
rows as the local run, row for row."""
import json

import pytest

from tests.test_cli import cli
from twin.explore import points
from twin.explore import executor as runner
from twin.explore.sweep import run_sweep


def test_distributed_rows_equal_local(dask_address):
    tasks = points.plan("cloudmatrix-infer-paper", "paper-decode", [("load", [1.2, 0.3, 0.6]), ("mtp", [True, False])],
                   seeds=2, duration_s=10)
    local, _ = run_sweep(tasks, None, workers=1, progress=False)
    client = runner.connect(dask_address)
    try:
        dist, counts = run_sweep(tasks, None, client=client, progress=False)
    finally:
        client.close()
    assert counts == {"runs": 12, "cached": 0}
    assert dist == local


def test_cli_sweep_through_the_environment_variable(dask_address, monkeypatch, tmp_path):
    monkeypatch.setenv("TWIN_SWEEP_CACHE", str(tmp_path))
    args = ("sweep", "--vary", "load=0.5,0.9", "--duration", "10", "--no-cache", "--no-progress", "--json")
    code, out_local, err = cli(*args, "--workers", "1")
    assert code == 0, err
    monkeypatch.setenv("TWIN_DASK_SCHEDULER", dask_address)
    code, out_dask, err = cli(*args)
    assert code == 0, err
    assert json.loads(out_dask)["rows"] == json.loads(out_local)["rows"]


def test_dask_runner_keeps_input_order(dask_address):
    from tests.test_explore import _sleep_then
    client = runner.connect(dask_address)
    done = []
    try:
        assert runner.run(_sleep_then, [1.0, 0.0, 0.1, 0.2], client=client,
                          progress=lambda n, t: done.append(n)) == [1.0, 0.0, 0.1, 0.2]
    finally:
        client.close()
    assert done == [1, 2, 3, 4]


class _Failing:
    """A Dask future whose result raises `exc` (as Client.result re-raises a cluster's error)."""

    def __init__(self, exc):
        self.exc = exc

    def result(self):
        raise self.exc


def _graph_error() -> RuntimeError:
    """What a scheduler started without this checkout on its PYTHONPATH sends back."""
    try:
        try:
            raise ModuleNotFoundError("No module named 'twin'", name="twin")
        except ModuleNotFoundError as cause:
            raise RuntimeError("Error during deserialization of the task graph.") from cause
    except RuntimeError as exc:
        return exc


def test_a_cluster_that_cannot_import_twin_is_one_line():
    with pytest.raises(ValueError, match=r"^--scheduler tcp://h:8786: its scheduler or workers cannot import "
                                         r"twin \(start both with this checkout on PYTHONPATH"):
        runner.result(_Failing(_graph_error()), "tcp://h:8786")
    with pytest.raises(ValueError, match="cannot import twin"):      # a worker's own import error
        runner.result(_Failing(ModuleNotFoundError("No module named 'twin.engine'", name="twin.engine")), "tcp://h:1")


def test_other_cluster_errors_pass_through():
    with pytest.raises(RuntimeError, match="boom"):
        runner.result(_Failing(RuntimeError("boom")), "tcp://h:1")
    with pytest.raises(ModuleNotFoundError):
        runner.result(_Failing(ModuleNotFoundError("No module named 'scipy'", name="scipy")), "tcp://h:1")
    assert runner.result(type("F", (), {"result": lambda self: 7})(), "tcp://h:1") == 7
