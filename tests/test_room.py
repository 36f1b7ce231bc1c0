"""The room is protected by design: sandboxes' engines share a bounded slice of one core, so the
shared twin keeps its pace and polls stay fast whatever private twins run (twin.live.budget.CpuShare,
twin.live.runner); heavy jobs run elsewhere (tests/test_jobs.py)."""
import time

import psutil
import pytest

from twin.live import session
from twin.live.budget import CpuShare


def test_a_cpu_share_refills_at_its_rate_and_bounds_bursts():
    now = [0.0]
    share = CpuShare(0.25, burst_s=2.0, clock=lambda: now[0])
    assert share.wait_s() == 0.0
    share.spend(1.0)                       # 0.5 s of burst, then 0.5 s into debt
    assert share.wait_s() == pytest.approx(2.0, abs=0.01)     # 0.5 CPU-s at 0.25 per s
    now[0] = 2.5
    assert share.wait_s() == 0.0
    now[0] = 100.0                          # idle time does not bank more than the burst
    share.spend(0.6)
    assert share.wait_s() > 0


@pytest.mark.timing
def test_sandboxes_at_max_speed_get_a_bounded_share_of_the_cpu(dash_app):
    reg = session.configure(wall_dt=0.2, max_sandboxes=2, ttl_s=600, token=None, per_address=4)
    try:
        shared = reg.shared()
        boxes = [reg.open_sandbox(client=f"c{i}", addr="a") for i in range(2)]
        for tw in boxes:
            tw.control("speed", "max", client=tw.owner)
        time.sleep(2.0)                                           # warm-up: the share's burst is spent
        proc = psutil.Process()
        cpu0, sim0, t0 = sum(proc.cpu_times()[:2]), shared.snapshot.sim_time, time.monotonic()
        time.sleep(5.0)
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        pace = (shared.snapshot.sim_time - sim0) / (time.monotonic() - t0)
    finally:
        reg.shutdown()
    # the sandboxes' 30% of a core plus the shared twin at 1x and this loop; unbounded it is a whole core
    assert cpu / 5.0 < 0.55, cpu
    assert pace > 0.9, pace


def test_resets_are_rate_limited_per_browser(twin_registry):
    """A reset builds an engine in the web process: a browser may not send a stream of them."""
    from twin.live.actions import RESETS_PER_MIN
    tw = twin_registry.open_sandbox(client="c1", addr="a")
    for _ in range(RESETS_PER_MIN):
        tw.control("reset", {"scenario": "paper-decode"}, client="c1")
    with pytest.raises(session.ControlError, match=f"resets: at most {RESETS_PER_MIN} per minute; try again in"):
        tw.control("reset", {"scenario": "paper-decode"}, client="c1")


def test_a_sandbox_waits_for_the_viewers_requests_in_flight(dash_app, monkeypatch):
    """Viewers first: while a request is being served, a sandbox at max only moves a slice each
    SANDBOX_YIELD_S; when none is, it runs its share."""
    from twin.live import runner
    from twin.live.budget import CpuShare, REQUESTS
    monkeypatch.setattr(runner, "SANDBOXES", CpuShare(1.0))     # only the yielding is measured here
    reg = session.configure(wall_dt=0.2, max_sandboxes=1, ttl_s=600, token=None)
    try:
        tw = reg.open_sandbox(client="c1", addr="a")
        tw.control("speed", "max", client="c1")
        time.sleep(1.0)

        def slices_in(seconds: float) -> int:
            calls = []
            real = tw._engine.advance

            def counted(t):
                calls.append(t)
                return real(t)
            tw._engine.advance = counted
            time.sleep(seconds)
            tw._engine.advance = real
            return len(calls)
        free = slices_in(1.0)
        REQUESTS.enter()
        try:
            busy = slices_in(1.0)
        finally:
            REQUESTS.leave()
    finally:
        reg.shutdown()
    assert busy <= 1.0 / runner.SANDBOX_YIELD_S + 2 and free > 5 * busy, (free, busy)


def test_a_sandbox_no_tab_shows_is_freed_and_a_watched_one_stays(dash_app):
    """Issue 34, item 9: a visitor who left (an attacker's sandboxes at max speed included) does
    not hold an engine's memory for the 10-minute action TTL."""
    reg = session.configure(wall_dt=0.2, max_sandboxes=2, ttl_s=600, token=None, per_address=4)
    try:
        left, watched = (reg.open_sandbox(client=f"c{i}", addr="a") for i in range(2))
        left.last_viewed = watched.last_viewed = time.monotonic() - session.UNVIEWED_S + 5
        assert reg.get(watched.key) is watched          # a tab's poll reads it, 5 s before the limit
        left.last_viewed -= 10                           # nobody read the other one: past the limit
        reg.get(session.SHARED)                          # any later request reaps
        assert reg.sandboxes() == [watched.key] and reg.get(left.key) is None
        assert left.idle_s() < reg.ttl_s                 # freed although its action TTL had not run out
    finally:
        reg.shutdown()
