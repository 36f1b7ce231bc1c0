"""The same sweep on a Dask distributed cluster (two worker processes on loopback) gives the same
rows as the local run, row for row."""
import json

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
