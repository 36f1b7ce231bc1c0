"""End to end (issue 36): the whole class plan "Why a supernode" at max speed in real browsers, with a
lecturer and two students, one in English on a laptop (1440x900) and one in Chinese on a phone
(390x844), through twin.cli.lecture (the same driver that writes the screenshot set). Per row the
lecturer presses Go (or Next step), the hold pauses the twin, the lecturer opens the step's page:
every student moved there, saw its live number drawn and in view without scrolling, answered, and saw
the reveal against its own guess; the room counted both answers of every question. The students
never see Lead the class, the step's action or the timeline. Stop leading puts the shared twin back
on the scenario and deployment it had, and the plan starts again (its first question asked afresh).
No browser logs a console error. Screenshots: test-artifacts/e2e/plan/."""
from __future__ import annotations

import pytest

from twin import lessons
from twin.cli.lecture import LAPTOP, PHONE, Lecture
from twin.live.classroom import Classroom

pytestmark = pytest.mark.e2e

TOKEN = "tok-plan-e2e"
PLAN = "why-supernode"


def test_the_whole_plan_with_a_lecturer_and_two_students(chromium, live_server, artifacts):
    url, reg = live_server
    reg.classroom = Classroom()
    reg.gate.token = TOKEN
    tw = reg.shared()
    start = (tw.params.scenario, tw.params.deployment, tw.speed)
    start_dep = tw.snapshot.deployment            # (earlier browser tests on this server may have left another run)
    shots = artifacts / "plan"
    shots.mkdir(exist_ok=True)
    lec = None
    try:
        lec = Lecture(chromium, url, PLAN, TOKEN, students=(("en", LAPTOP), ("zh", PHONE)), shots=shots)
        for s in lec.students:                      # a student sees the plan, not the lecturer's parts
            assert not s.page.is_visible("#lesson-timeline")
            assert not s.page.is_visible(".lessons-page button:has-text('Lead the class')")
            assert not s.page.is_visible(".lessons-page button:has-text('带领全班')")
        lec.run()
        plan = lessons.plan(PLAN)
        for it in plan.items:                       # every question: both answers counted, then revealed
            t = reg.classroom.tally(it.lesson, it.step)
            assert (t["n"], t["measured"] is not None) == (len(lec.students), True), (it.lesson, it.step)
        assert not any(s.page.is_visible(".lesson-act") for s in lec.students)
        assert [s.out_of_view for s in lec.students] == [[], []]
        assert all(len(s.draw_s) == len(plan.items) for s in lec.students)
        lec.end()                                   # the shared twin gets its run back
        for _ in range(100):
            if (tw.params.scenario, tw.params.deployment, tw.speed) == start and tw.snapshot.deployment:
                break
            lec.lecturer.page.wait_for_timeout(100)
        assert (tw.params.scenario, tw.params.deployment, tw.speed) == start
        assert tw.snapshot.deployment == start_dep and not tw.paused
        lec.lead()                                  # the class again, on the same server: the first row works
        lec.row(0)
        first = plan.items[0]
        assert reg.classroom.tally(first.lesson, first.step)["n"] == len(lec.students)
        assert {b.role: b.errors for b in lec.browsers} == {b.role: [] for b in lec.browsers}
        lec.end()                                   # the second lead held the twin: the tests after it need it live
        for _ in range(100):
            if not tw.paused:
                break
            lec.lecturer.page.wait_for_timeout(100)
        assert not tw.paused
    finally:
        reg.gate.token = None                       # unlocked: the clean-up below needs no credential
        reg.classroom.end(tw, None)                 # stopped leading here too if the test failed midway
        tw.paused = False
        reg.classroom = Classroom()
        if lec is not None:
            for b in lec.browsers:
                b.page.context.close()
