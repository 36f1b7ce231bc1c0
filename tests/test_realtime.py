"""The one real-time pace (twin.live.realtime.Clock) both runners use, read at given wall times: no
timing in the test, exact numbers."""
import logging

import pytest

from twin.live.realtime import Clock, Dispatch
from twin.serve import messages


def test_the_live_twins_clock_follows_the_wall_time_and_lets_a_stall_go():
    c = Clock(0.2, 10.0, catch_up_s=0.4)
    assert c.due(100.0, 0.0) == pytest.approx(2.0)        # unanchored: one step at 10x
    assert c.due(100.25, 2.0) == pytest.approx(2.5)       # the 0.25 s that really passed
    assert c.due(105.0, 4.5) == pytest.approx(4.0)        # a 4.75 s stall: two steps' worth, the rest let go
    assert c.due(105.2, 8.5) == pytest.approx(2.0)        # and from there on, real time again
    c.hold()                                              # paused: the next wake starts afresh
    assert c.due(200.0, 10.5) == pytest.approx(2.0)
    c.speed = "max"
    assert c.due(201.0, 12.5) == c.chunk_s == 1.0
    c.ran(1.0, 0.05)                                      # 20 sim s per s of compute: the chunk grows to a step's
    assert c.chunk_s == pytest.approx(0.2 * 1.0 + 0.8 * 20 * 0.2)


def test_the_served_twins_clock_runs_a_lead_ahead_and_makes_up_every_second():
    c = Clock(0.002, lead_s=0.03, idle_step_s=0.05)
    c.start(50.0, 0.0)
    assert c.wall0 == pytest.approx(50.03)                # sim time s leaves at wall0 + s
    assert c.due(50.0, 0.0) == pytest.approx(0.0)
    assert c.behind(53.0, 0.0) == pytest.approx(2.97)
    assert c.due(53.0, 0.0) == pytest.approx(3.0)         # a stall is made up whole: chunks have fixed times
    assert c.rest(0.0005) == pytest.approx(0.0015) and c.rest(0.0005, idle=True) == pytest.approx(0.0495)
    assert c.rest(0.01) == 0.0


def test_the_rest_keeps_a_floor_and_a_duty_share():
    c = Clock(0.2, 1.0, min_rest_s=0.03, max_duty=0.8)
    assert c.rest(0.05) == pytest.approx(0.15)
    assert c.rest(0.19) == pytest.approx(0.19 * 0.25)     # the share the duty leaves, over the step's rest
    c.speed = "max"
    assert c.rest(0.0) == pytest.approx(0.03)


def test_achieved_pace_over_the_recent_wakes():
    c = Clock(0.2, window=3)
    assert c.achieved() == 0.0 and c.achieved(1.0) == 1.0
    for wall, sim in ((0.0, 0.0), (1.0, 5.0), (2.0, 8.0), (3.0, 9.0)):
        c.note(wall, sim)
    assert c.achieved() == pytest.approx((9.0 - 5.0) / 2.0)
    c.reset()
    assert c.achieved() == 0.0 and c.anchor is None


def test_dispatch_by_type_and_unknown_messages_are_named_and_dropped(caplog):
    class Owner:
        def on_abort(self, m, peer):
            return ("abort", m.key, peer)
    table = Dispatch({messages.Abort: Owner.on_abort})
    assert table(Owner(), messages.Abort(7), "p1") == ("abort", 7, "p1")
    with caplog.at_level(logging.ERROR):
        assert table(Owner(), ("abort", 7), "p1") is None
    assert "message tuple: unknown (allowed: Abort)" in caplog.text
