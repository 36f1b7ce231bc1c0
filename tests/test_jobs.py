"""The job pool (twin.live.jobs): heavy work in processes of their own at the lowest CPU priority, with
quotas per browser, per address and in all, a cost ceiling, queue positions, progress, Cancel, and
CPU and memory ceilings that stop a job that outgrows them. Jobs here are real processes."""
import os
import time

import psutil
import pytest

from twin.live.jobs import JobPool, JobRefused


def report(progress):
    """Where and how the job ran."""
    progress(1)
    return {"pid": os.getpid(), "nice": os.nice(0)}


def environment(name, progress):
    return os.environ.get(name)


def sleeper(seconds, progress):
    for i in range(int(seconds * 10)):
        time.sleep(0.1)
        progress(i)
    return "slept"


def spin(progress):
    while True:
        pass


def hog(mb, progress):
    block = bytearray(mb * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(30)


def chatty(progress):
    for i in range(5):
        progress(i + 1, {"step": i})
    time.sleep(60)


def boom(progress):
    raise RuntimeError("disk full\n  at somewhere")


def _wait(pool, jid, client, states=("done", "error", "cancelled"), timeout=60.0):
    end = time.monotonic() + timeout
    while True:
        v = pool.view(jid, client)
        if v["state"] in states:
            return v
        assert time.monotonic() < end, v
        time.sleep(0.05)


def test_a_job_runs_in_its_own_process_at_the_lowest_priority():
    pool = JobPool(workers=1)
    jid = pool.submit("test", report, (), total=1, cost_s=1, client="c1", addr="a1")
    v = _wait(pool, jid, "c1")
    assert v["state"] == "done" and v["done"] == 1
    assert v["result"]["pid"] != os.getpid() and v["result"]["nice"] == 19
    assert pool.view(jid, "c2") is None                   # another browser's job reads as absent
    assert pool.cancel(jid, "c2") is False


def test_a_job_sees_the_environment_it_was_asked_under(monkeypatch):
    """Job processes fork from a forkserver started with the first job; a variable set after that (a
    test's TWIN_SWEEP_CACHE) still reaches the next job, so it caches where the page reads."""
    pool = JobPool(workers=1)
    monkeypatch.setenv("TWIN_JOB_TEST_VAR", "first")
    first = pool.submit("test", environment, ("TWIN_JOB_TEST_VAR",), total=1, cost_s=1, client="c1", addr=None)
    assert _wait(pool, first, "c1")["result"] == "first"
    monkeypatch.setenv("TWIN_JOB_TEST_VAR", "second")
    second = pool.submit("test", environment, ("TWIN_JOB_TEST_VAR",), total=1, cost_s=1, client="c1", addr=None)
    assert _wait(pool, second, "c1")["result"] == "second"


def test_quotas_per_browser_per_address_queue_size_and_hour():
    pool = JobPool(workers=1, max_queued=2, per_client=1, per_address=2, max_cost_s=100,
                   address_cpu_per_hour=150)
    a = pool.submit("test", sleeper, (5,), total=50, cost_s=10, client="c1", addr="a1")
    _wait(pool, a, "c1", states=("running",))
    with pytest.raises(JobRefused, match="still queued or running"):
        pool.submit("test", report, (), total=1, cost_s=1, client="c1", addr="a1")
    pool.submit("test", report, (), total=1, cost_s=1, client="c2", addr="a1")
    with pytest.raises(JobRefused, match="from your network address"):
        pool.submit("test", report, (), total=1, cost_s=1, client="c3", addr="a1")
    with pytest.raises(JobRefused, match="allowed at most 100"):
        pool.submit("test", report, (), total=1, cost_s=101, client="c4", addr="a2")
    pool.submit("test", report, (), total=1, cost_s=1, client="c5", addr="a3")
    with pytest.raises(JobRefused, match="jobs are waiting"):
        pool.submit("test", report, (), total=1, cost_s=1, client="c6", addr="a4")
    assert pool.refused == {"browser": 1, "address": 1, "size": 1, "queue": 1}
    pool.cancel(a, "c1")
    pool2 = JobPool(workers=1, address_cpu_per_hour=150)
    pool2.submit("test", report, (), total=1, cost_s=100, client="c1", addr="a1")
    with pytest.raises(JobRefused, match="this hour"):
        pool2.submit("test", report, (), total=1, cost_s=60, client="c2", addr="a1")
    pool.shutdown()
    pool2.shutdown()


def test_queue_position_progress_and_cancel_of_a_running_and_a_queued_job():
    pool = JobPool(workers=1)
    run = pool.submit("test", sleeper, (20,), total=200, cost_s=30, client="c1", addr="a1")
    queued = pool.submit("test", report, (), total=1, cost_s=5, client="c2", addr="a2")
    _wait(pool, run, "c1", states=("running",))
    q = pool.view(queued, "c2")
    assert q["state"] == "queued" and q["position"] == 1 and q["wait_s"] > 0
    end = time.monotonic() + 20
    while pool.view(run, "c1")["done"] < 3:
        assert time.monotonic() < end
        time.sleep(0.05)
    pid = pool._jobs[run].proc.pid
    assert pool.cancel(run, "c1") and pool.view(run, "c1")["state"] == "cancelled"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _wait(pool, queued, "c2")["state"] == "done"    # the next in line then runs
    q2 = pool.submit("test", sleeper, (20,), total=200, cost_s=30, client="c3", addr="a3")
    blocker = pool.submit("test", sleeper, (20,), total=200, cost_s=30, client="c4", addr="a4")
    _wait(pool, q2, "c3", states=("running",))
    assert pool.cancel(blocker, "c4") and pool.view(blocker, "c4")["state"] == "cancelled"
    pool.shutdown()


def test_what_a_running_job_sends_with_its_progress_is_kept_up_to_its_total():
    pool = JobPool(workers=1)
    jid = pool.submit("test", chatty, (), total=3, cost_s=30, client="c1", addr="a1")
    end = time.monotonic() + 60
    while pool.view(jid, "c1")["partial"] != [{"step": 0}, {"step": 1}, {"step": 2}]:
        assert time.monotonic() < end, pool.view(jid, "c1")
        time.sleep(0.05)
    time.sleep(0.5)                                   # the last two steps arrive and are not kept
    v = pool.view(jid, "c1")
    assert v["state"] == "running" and v["done"] == 3 and len(v["partial"]) == 3
    assert pool.cancel(jid, "c1") and pool.view(jid, "c1")["partial"] == []
    pool.shutdown()


def test_a_job_past_its_cpu_ceiling_is_stopped():
    pool = JobPool(workers=1, margin_s=0.1)
    jid = pool.submit("test", spin, (), total=1, cost_s=0.05, client="c1", addr="a1")
    assert pool.view(jid, "c1")["ceiling_s"] == 0.2     # 2 x 0.05 + 0.1: little CPU to burn at nice 19
    v = _wait(pool, jid, "c1", timeout=120)           # on a loaded machine many more s of wall time
    assert v["state"] == "error" and "ceiling" in v["message"] and v["cpu_s"] >= 0.2


def test_a_job_past_its_memory_ceiling_is_stopped():
    pool = JobPool(workers=1, max_rss_mb=200)
    jid = pool.submit("test", hog, (400,), total=1, cost_s=5, client="c1", addr="a1")
    v = _wait(pool, jid, "c1", timeout=30)
    assert v["state"] == "error" and "200 MB" in v["message"]


def test_a_failing_job_reports_one_line():
    pool = JobPool(workers=1)
    jid = pool.submit("test", boom, (), total=1, cost_s=1, client="c1", addr="a1")
    v = _wait(pool, jid, "c1")
    assert v["state"] == "error" and v["message"] == "RuntimeError: disk full at somewhere"
