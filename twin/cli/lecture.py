"""A lecture in real browsers: a lecturer and following students run a class plan, and screens are shot.

    python -m twin.cli.lecture                         # starts the room server, writes test-artifacts/class/
    python -m twin.cli.lecture --out /tmp/class --plan why-supernode --phone   # the Chinese student on a phone

The lecturer's tab unlocks the shared twin with the instructor token, leads the class from the plan's
page and, per row, presses the timeline's Go (or "Next step"), waits for the hold to pause the twin,
opens the step's page, reveals once every student answered, and goes back to the step (with `max_speed`, the speed set to max after each Go, as
`python -m twin.lessons plan-check` does). Each student
(one browser each: English, Chinese) follows, answers the question in the class strip with a guess
of its own and waits for the reveal. `Lecture` raises (naming the row, the browser and what it waited
for) when a screen does not get there; tests/test_e2e_plan.py runs it and checks the room's tallies.
With `shots`, each row is shot per browser at the question and at the reveal:
<row>-<lesson>-<step>-<question|reveal>-<lecturer|student-en|student-zh>.png. Headless Debian
Chromium through Playwright (never a browser download).
"""
from __future__ import annotations

import argparse
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from twin import lessons
from twin.ui.classbar import figure_at
from twin.cli.loadtest import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, start_server

LAPTOP, PHONE = (1440, 900), (390, 844)
WAIT_MS = 180_000         # a step's warm-up at max speed on a busy shared 2-core machine, with margin (assumption)
# the element's centre is on screen and not under anything (the class strip, a banner)
IN_VIEW = """(sel) => { const el = document.querySelector(sel); if (!el) return false;
  const r = el.getBoundingClientRect(); const x = r.left + Math.min(r.width / 2, 40), y = r.top + Math.min(r.height / 2, 30);
  if (r.height === 0 || y < 0 || y > innerHeight || x < 0 || x > innerWidth) return false;
  const at = document.elementFromPoint(x, y); return !!at && (el.contains(at) || at.contains(el)); }"""


@dataclass
class Browser:
    """One tab of the class and what it saw: console errors, and per row where it was."""
    role: str                       # "lecturer", "student-en", "student-zh"
    page: object
    errors: list = field(default_factory=list)
    out_of_view: list = field(default_factory=list)   # rows whose live number needed scrolling
    draw_s: list = field(default_factory=list)        # per row, wall seconds from arriving to the live number drawn


def _tab(browser, base: str, role: str, path: str, size) -> Browser:
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    pg = ctx.new_page()
    b = Browser(role, pg)
    pg.on("console", lambda m: b.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: b.errors.append(f"pageerror: {e}"))
    pg.set_default_timeout(60_000)
    pg.goto(base + path)
    return b


def _wait(b: Browser, js: str, arg, what: str, timeout: float = 60_000) -> None:
    try:
        b.page.wait_for_function(js, arg=arg, timeout=timeout)
    except Exception as exc:                       # the row, the browser and the wait, not Playwright's stack
        raise AssertionError(f"{b.role}: {what} ({type(exc).__name__})") from None


def _text(b: Browser, sel: str, pattern: str, what: str, timeout: float = 60_000) -> None:
    _wait(b, "([s, p]) => { const el = document.querySelector(s); return !!el && new RegExp(p).test(el.innerText); }",
          [sel, pattern], what, timeout)


def guess(q: lessons.Question, k: int) -> float | int:
    """Student k's answer: its own choice, or a number a third / two thirds into the allowed range."""
    if q.kind == "choice":
        return k % len(q.choices)
    return round(q.lo + (q.hi - q.lo) * (k + 1) / 3, 2)


class Lecture:
    """A lecturer and students (one per language in `students`) in `browser` on the app at `base`."""

    def __init__(self, browser, base: str, plan: str, token: str, students=(("en", LAPTOP), ("zh", LAPTOP)),
                 size=LAPTOP, shots: Path | None = None, max_speed: bool = True):
        self.base, self.plan, self.shots, self.max_speed = base, lessons.plan(plan), shots, max_speed
        self.lecturer = _tab(browser, base, "lecturer", f"/lessons?plan={plan}&lang=en", size)
        lp = self.lecturer.page
        lp.click("#ctl-setup summary")
        lp.fill("#ctl-token-input", token)
        lp.click("#ctl-unlock")
        _text(self.lecturer, "#ctl-status-twin", "instructor", "unlock with the instructor token")
        lp.click("#ctl-setup summary")
        self.students = [_tab(browser, base, f"student-{lang}", f"/?lang={lang}", sz) for lang, sz in students]
        self.lead(following=False)
        for s in self.students:                 # the class follows from the plan's page, before its first question
            s.page.wait_for_selector("#class-follow-btn", state="visible")
            s.page.click("#class-follow-btn")
            self._lobby(s)

    def _lobby(self, b: Browser) -> None:
        _wait(b, "(p) => location.pathname + location.search === p", f"/lessons?plan={self.plan.id}",
              "follow the lecturer to the plan's page")

    def lead(self, following: bool = True) -> None:
        """The lecturer leads from the plan's page (again after `end`: the `following` class goes there)."""
        lp = self.lecturer.page
        if "plan=" not in lp.url or "lesson=" in lp.url:
            lp.goto(f"{self.base}/lessons?plan={self.plan.id}&lang=en")
        lp.click(".lessons-page button:has-text('Lead the class')")
        _text(self.lecturer, "#ctl-msg", "You lead the class", "lead the class")
        for s in self.students if following else []:
            self._lobby(s)

    @property
    def browsers(self) -> list[Browser]:
        return [self.lecturer, *self.students]

    def _at(self, b: Browser, path: str, what: str, timeout: float = 60_000) -> None:
        _wait(b, "(p) => location.pathname === p", path, f"{what}: never on {path}", timeout)

    def _shoot(self, row: int, it: lessons.PlanItem, moment: str) -> None:
        if self.shots is None:
            return
        for b in self.browsers:
            b.page.mouse.move(0, 0)
            b.page.screenshot(path=str(self.shots / f"{row:02d}-{it.lesson}-{it.step}-{moment}-{b.role}.png"))

    def row(self, k: int) -> None:
        """Plan row `k` (0-based) through: Go, the hold, the page, answers, the reveal, back to the step."""
        it = self.plan.items[k]
        step = lessons.get(it.lesson).steps[it.step - 1]
        where = f"row {k + 1} ({it.lesson} step {it.step})"
        lb, lp = self.lecturer, self.lecturer.page
        run = lp.evaluate("() => (window.twinFacts || {}).run")
        if k == 0:
            lp.locator("#lesson-timeline tbody tr").nth(0).locator("button").click()
        else:
            lp.click("text=Next step: ready the twin →")
        _wait(lb, "([l, n]) => { const p = new URLSearchParams(location.search); return location.pathname === "
                  "'/lessons' && p.get('lesson') === l && p.get('step') === String(n); }", [it.lesson, it.step],
              f"{where}: Go opens the step")
        if step.action.control == "reset":     # the twin's status says so (the timeline's line goes with its page)
            _wait(lb, "(run) => { const f = window.twinFacts || {}; return f.run !== undefined && f.run !== run; }",
                  run, f"{where}: Go starts the step's run")
        else:
            _text(lb, "#lesson-timeline .ctl-msg", "Applied", f"{where}: Go applied")
        if self.max_speed:
            lp.click("#ctl-speed button:text-is('max')")
        _wait(lb, "() => (window.twinFacts || {}).paused === true", None, f"{where}: the hold pauses the twin", WAIT_MS)
        lp.click(".lesson-open")                           # the step's page, as the twin now shows it
        page = step.action.page
        for b in self.browsers:
            self._at(b, page, f"{where}: open {page}")
        q = step.question
        sel = figure_at(step)
        for i, s in enumerate(self.students):
            if sel:                            # drawn on arrival: seconds from the page to its live number
                t0 = time.monotonic()
                _wait(s, "(sel) => { const el = document.querySelector(sel); return !!el && el.textContent.trim() "
                         "&& !/waiting for the twin|等待孪生/.test(el.textContent); }", sel, f"{where}: {sel} drawn")
                s.draw_s.append(round(time.monotonic() - t0, 2))
            ask = "#class-num" if q.kind == "number" else "#class-choice input"
            s.page.wait_for_selector(ask, state="visible")
            if sel:
                try:                       # in view without the student scrolling (the page may bring it there)
                    s.page.wait_for_function(IN_VIEW, arg=sel, timeout=5_000)
                except Exception:
                    s.out_of_view.append(f"{where}: {sel}")
        self._shoot(k + 1, it, "question")
        for i, s in enumerate(self.students):
            g = guess(q, i)
            if q.kind == "number":
                s.page.fill("#class-num", str(g))
            else:
                s.page.locator("#class-choice input").nth(g).check()
            s.page.click("#class-send")
            _text(s, "#class-msg", "Counted|已计入", f"{where}: answer counted")
        _text(lb, "#class-count", f"^{len(self.students)}$", f"{where}: the lecturer's count")
        lp.click("#class-reveal")
        _text(lb, "#class-msg", "Revealed", f"{where}: reveal")
        for s in self.students:
            _text(s, "#class-result", "(Measured|实测).*(your answer|你的答案)", f"{where}: the reveal against the guess")
        self._shoot(k + 1, it, "reveal")
        lp.go_back()                                        # back to the step (and its timeline)
        self._at(lb, "/lessons", f"{where}: back to the step")
        lp.wait_for_selector("#lesson-timeline")

    def run(self) -> None:
        for k in range(len(self.plan.items)):
            self.row(k)

    def end(self) -> None:
        """Stop leading: the server restores the shared twin's run (twin.live.classroom)."""
        self.lecturer.page.click("#class-end")
        _text(self.lecturer, "#class-msg", "stopped leading", "stop leading")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server (its instructor token in TWIN_INSTRUCTOR_TOKEN)")
    ap.add_argument("--out", default=str(ROOT / "test-artifacts" / "class"))
    ap.add_argument("--plan", default="why-supernode")
    ap.add_argument("--phone", action="store_true", help="the Chinese student on a 390x844 phone (the others on a laptop)")
    a = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright   # lazy: an optional tool, only when shots are taken
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    token = os.environ.get("TWIN_INSTRUCTOR_TOKEN") or secrets.token_urlsafe(16)
    proc, base = None, a.url
    if not base:
        port = free_port()
        proc = start_server(port, 8, env={"TWIN_INSTRUCTOR_TOKEN": token})
        base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            lec = Lecture(browser, base, a.plan, token, shots=out,
                          students=(("en", LAPTOP), ("zh", PHONE if a.phone else LAPTOP)))
            lec.run()
            lec.end()
            for b in lec.browsers:
                print(f"{b.role}: {len(b.errors)} console errors; live number out of view: {b.out_of_view or 'none'}; "
                      f"drawn after arriving (s): {b.draw_s}")
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
