"""Lessons: guided steps over the live twin (content in twin/lessons/data, text in the catalogs).

`/lessons` lists the class plans and the lessons with this browser's progress;
`/lessons?lesson=ID&step=N` shows one step: goal, a question to predict, one action on the twin
(sent through the same validated `Twin.control` path as the run-control bar), what to notice, and
the measured answer with the commands that produced it. The lecturer's timeline (the lesson's steps,
or `/lessons?plan=ID` for a class plan, with what to say) sends a step's action with its speed and a
hold that pauses the twin at the moment to look; "Lead the class" makes following screens move with
this one (twin.ui.classbar). Bad ids, steps or languages give a message in the page.
"""
from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update

from twin import i18n
from twin import lessons
from twin.live import lecture, session
from twin.ui import answer
from twin.ui import classbar
from twin.ui import components
from twin.ui import eventtext
from twin.ui import guard
from twin.ui import teach
from twin.ui.errors import explain
from twin.ui.polling import TICKET, twin_for
from twin.ui import lang as ui_lang
from twin.ui.lang import N_

dash.register_page(__name__, path="/lessons", name=N_("Lessons"), title=ui_lang.title("Lessons"), order=10)

P = "lesson"
STEP_MINUTES = 5          # planned minutes of a lesson step that no class plan times (assumption)
TL_MSG = {"type": f"{P}-tlmsg", "index": "timeline"}    # pattern ids: callbacks of parts a view may lack
LEAD = {"type": f"{P}-lead", "index": "lead"}
HIDE = {"display": "none"}


def lecturer_only(part: str, child) -> html.Div:
    """A lecturer's part of the page (Lead the class, the step's action, the timeline), drawn hidden:
    `lecturer_parts` shows it to a tab that may use it, never to a student (issue 36)."""
    return html.Div(child, id={"type": f"{P}-lecturer", "index": part}, style=HIDE, className="lesson-lecturer")


def page_names(_) -> dict[str, str]:
    """The pages a lesson can open (every registered page), named in the viewer's language."""
    return {p["path"]: _(p["name"]) for p in dash.page_registry.values()}


def target_page(action: lessons.Action) -> str:
    """The page the action opens: its own if registered, else its fallback (e.g. before /explorer exists)."""
    registered = {p["path"] for p in dash.page_registry.values()}
    if action.page in registered or not action.fallback:
        return action.page
    return action.fallback


def describe(action: lessons.Action, _) -> str:
    """What the action button will do, in the viewer's language (ids stay as they are)."""
    v = action.value if isinstance(action.value, dict) else {}
    path = target_page(action)
    page = page_names(_).get(path, path)
    if action.control == "reset" and v.get("faults"):
        return _("Restart the twin on the fault demo %(demo)s, then open %(page)s") % {"demo": v["faults"], "page": page}
    if action.control == "reset":
        what = v.get("scenario", "")
        if v.get("deployment"):
            what += " · " + v["deployment"]
        return _("Restart the twin on scenario %(scenario)s, then open %(page)s") % {"scenario": what, "page": page}
    return _("Send %(control)s %(value)s to the twin, then open %(page)s") % {
        "control": action.control, "value": action.value, "page": page}


def answer_text(step: lessons.Step, lang: str) -> str:
    """The measured answer with its figures formatted for the locale."""
    vals = {f.name: (i18n.percent(f.value, lang, 1) if f.percent else i18n.number(f.value, lang, f.digits))
            for f in step.figures.values()}
    return i18n.gettext(lang)(step.answer) % vals


def _index(lang: str, msg: str | None) -> list:
    _ = i18n.gettext(lang)
    cards = [html.Div([
        html.Div([html.Span(str(i), className="lesson-num"), dcc.Link(_(les.title), href=teach.lesson_href(les.id, 1),
                                                                        className="lesson-title")],
                 className="lesson-card-head"),
        html.P(_(les.summary)),
        html.Div([html.Span(_("%(n)s steps") % {"n": len(les.steps)}, className="muted"),
                  html.Span(id={"type": "lesson-progress", "index": les.id}, className="lesson-progress")],
                 className="lesson-card-foot"),
    ], className="lesson-card") for i, les in enumerate(lessons.lessons(), 1)]
    plans = [html.Div([
        html.Div([html.Span("▶", className="lesson-num"), dcc.Link(_(pl.title), href=f"/lessons?plan={pl.id}",
                                                                   className="lesson-title", id=f"plan-{pl.id}")],
                 className="lesson-card-head"),
        html.P(_(pl.summary)),
        html.Div(html.Span(_("%(min)s minutes, %(n)s steps") % {"min": f"{pl.minutes:g}", "n": len(pl.items)},
                           className="muted"), className="lesson-card-foot"),
    ], className="lesson-card plan-card") for pl in lessons.plans()]
    return [
        components.page_header(_("Lessons"), _("Guided steps over the live twin. Ask the class to predict, press the "
                                      "action, watch the page it opens, then reveal the measured answer.")),
        html.Div(msg, className="msg-error lesson-msg") if msg else None,
        html.H3(_("Class plans"), className="lesson-section"),
        html.Div(plans, className="lesson-grid"),
        html.H3(_("Lessons"), className="lesson-section"),
        html.Div(cards, className="lesson-grid"),
        html.P([_("Unfamiliar words?"), " ", dcc.Link(_("See the glossary"), href="/glossary")], className="muted"),
    ]


def block(cls: str, head: str, body) -> html.Div:
    return html.Div([html.H4(head), body], className=f"lesson-block {cls}")


def _lesson_rows(les: lessons.Lesson) -> list:
    return [(les, i, planned_minutes(les.id, i), None) for i in range(1, len(les.steps) + 1)]


def _plan_rows(pl: lessons.Plan) -> list:
    return [(lessons.get(it.lesson), it.step, it.minutes, it.say) for it in pl.items]


def _step_view(les: lessons.Lesson, n: int, lang: str, pl: lessons.Plan | None = None) -> list:
    """A step; with `pl` (a plan that has this step) as a row of the plan: its timeline, and previous /
    next go along the plan's rows, into the next lesson (issue 36), back to the plan after the last."""
    _ = i18n.gettext(lang)
    s = les.steps[n - 1]
    plan = pl.id if pl is not None and any((it.lesson, it.step) == (les.id, n) for it in pl.items) else None
    rows = _plan_rows(pl) if plan else _lesson_rows(les)
    at = next(i for i, r in enumerate(rows) if (r[0].id, r[1]) == (les.id, n))
    href = lambda r: teach.lesson_href(r[0].id, r[1], plan=plan)
    end = (dcc.Link(_("Back to the plan"), href=f"/lessons?plan={plan}", className="btn btn-small") if plan
           else dcc.Link(_("All lessons"), href="/lessons", className="btn btn-small"))
    nav = html.Div([
        dcc.Link(_("← Previous step"), href=href(rows[at - 1]), className="btn btn-small") if at > 0 else None,
        html.Span(_("Step %(n)s of %(total)s") % {"n": n, "total": len(les.steps)}, className="lesson-stepno"),
        dcc.Link(_("Next step →"), href=href(rows[at + 1]), className="btn btn-small") if at + 1 < len(rows) else end,
    ], className="lesson-nav")
    return [
        components.page_header(_(les.title), _(les.summary), html.Div([nav, lecturer_only("lead", lead_button(_))])),
        block("lesson-goal", _("Goal"), html.P(_(s.goal))),
        block("lesson-predict", _("Predict first"), html.P(_(s.predict))),
        block("lesson-action", _("Do it"), html.Div([
            lecturer_only("act", html.Button(describe(s.action, _), id={"type": f"{P}-act", "index": f"{les.id}/{n}"},
                                             className="btn btn-primary lesson-act", n_clicks=0)),
            dcc.Link(_("Open %(page)s without acting") % {"page": page_names(_).get(target_page(s.action),
                                                                                 target_page(s.action))},
                     href=target_page(s.action), className="btn btn-small lesson-open",
                     title=_("After the timeline's Go has readied the twin: open the page as it is")),
            html.Div(id={"type": f"{P}-msg", "index": f"{les.id}/{n}"}, className="ctl-msg", role="status"),
            html.Div(_("The action also sets the speed to %(speed)s×: the answer's on-screen figures are there "
                       "after %(warm)s simulated seconds (the timeline says how long that takes here).") % {
                "speed": f"{s.screen.speed:g}", "warm": f"{s.screen.warmup_s:g}"}, className="muted lesson-hint"),
        ])),
        block("lesson-notice", _("What to notice"), html.P(_(s.notice))),
        lecturer_only("timeline", timeline(rows, (les.id, n), _, plan)),
        html.Details([
            html.Summary(_("Show the measured answer"), className="summary-title"),
            html.P(answer_text(s, lang), id=f"{P}-answer"),
            html.Div(_("Measured with:"), className="muted"),
            html.Ul([html.Li(html.Code(m.command)) for m in s.measures], className="lesson-commands i18n-skip"),
        ], className="lesson-block lesson-answer"),
        nav,
    ]


def planned_minutes(lesson_id: str, n: int) -> float:
    """A step's planned minutes: as the first class plan that uses it times it, else STEP_MINUTES."""
    return next((it.minutes for pl in lessons.plans() for it in pl.items if (it.lesson, it.step) == (lesson_id, n)),
                STEP_MINUTES)


def lead_button(_) -> html.Button:
    return html.Button(_("Lead the class"), id=LEAD, className="btn btn-small", n_clicks=0,
                       title=_("Following screens move with yours (page, step, banner); needs the instructor "
                               "token when the shared twin is locked"))


def go_index(les: lessons.Lesson, n: int, plan: str | None) -> str:
    """A Go button's index: `lesson/step`, and `/plan` when it is a row of a class plan."""
    return f"{les.id}/{n}" + (f"/{plan}" if plan else "")


def needs(step: lessons.Step, _) -> str:
    """What a step's warm-up takes: in wall seconds at the pace measured on this server the last time
    its run warmed up (twin.live.pace), or, before any was measured, what its speed would give, said
    as such (issue 36: "about 12 s" took 32-43 s when the twin reached 2-17x)."""
    sc = step.screen
    wall, measured = lecture.warmup_wall(step)
    vals = {"sim": f"{sc.warmup_s:g}", "speed": f"{sc.speed:g}", "wall": f"{wall:.0f}"}
    if measured is None:
        return _("%(sim)s simulated s at %(speed)s×: %(wall)s s if the twin keeps that pace (not measured "
                 "here yet)") % vals
    return _("%(sim)s simulated s at %(speed)s×: about %(wall)s s at the pace measured here (the twin "
             "reached %(pace)s×)") % {**vals, "pace": f"{min(measured.reached, sc.speed):.1f}"}


def timeline(rows, current, _, plan: str | None = None) -> html.Div:
    """The lecturer's timeline: per step its planned minutes, the simulated time and speed it needs (and
    the wall time that takes), what to say (a plan), and a button that readies the twin for it; the
    rows of `plan` keep the plan in their links, so Go and Next step go on along it."""
    total = sum(r[2] for r in rows)
    head = html.Tr([html.Th(x) for x in (_("Min"), _("Step"), _("Twin needs"), _("Say") if any(r[3] for r in rows)
                                         else "", "")])
    body = []
    for les, n, minutes, say in rows:
        sc = les.steps[n - 1].screen
        body.append(html.Tr([
            html.Td(f"{minutes:g}"),
            html.Td([dcc.Link(_(les.title), href=teach.lesson_href(les.id, n, plan=plan)), html.Br(),
                     html.Span(_("Step %(n)s of %(total)s") % {"n": n, "total": len(les.steps)}, className="muted")]),
            html.Td(needs(les.steps[n - 1], _)),
            html.Td(_(say) if say else "", className="timeline-say"),
            html.Td(html.Button(_("Go"), id={"type": f"{P}-go", "index": go_index(les, n, plan)}, className="btn btn-small",
                                n_clicks=0, title=_("Open this step, send its action with its speed, and pause the "
                                                    "twin when the figures are there"))),
        ], className="timeline-now" if (les.id, n) == current else ""))
    nxt = next((i + 1 for i, r in enumerate(rows) if (r[0].id, r[1]) == current), None)
    go_next = None
    if nxt is not None and nxt < len(rows):
        les, n = rows[nxt][0], rows[nxt][1]
        go_next = html.Button(_("Next step: ready the twin →"), id={"type": f"{P}-go", "index": go_index(les, n, plan) + "/next"},
                              className="btn btn-small btn-primary", n_clicks=0)
    return html.Details([
        html.Summary(_("Lecturer's timeline: %(min)s minutes") % {"min": f"{total:g}"}, className="summary-title"),
        html.Table([html.Thead(head), html.Tbody(body)], className="timeline"),
        go_next,
        html.Div(id=TL_MSG, className="ctl-msg", role="status"),
    ], open=True, className="lesson-block lesson-timeline", id=f"{P}-timeline")


def _plan_view(pl: lessons.Plan, lang: str) -> list:
    _ = i18n.gettext(lang)
    rows = _plan_rows(pl)
    first = rows[0]
    return [
        components.page_header(_(pl.title), _(pl.summary), html.Div([
            dcc.Link(_("Start: step 1"), href=teach.lesson_href(first[0].id, first[1], plan=pl.id),
                     className="btn btn-small"),
            lecturer_only("lead", lead_button(_))])),
        lecturer_only("timeline", timeline(rows, None, _, pl.id)),
    ]


def layout(lesson=None, step=None, lang=None, plan=None, **_kwargs):
    lang, msg = teach.page_lang(lang)
    _ = i18n.gettext(lang)
    pl = None
    if plan is not None:
        try:
            pl = lessons.plan(plan)
        except lessons.LessonError:
            msg = " ".join(filter(None, (msg, _("There is no class plan %(id)s; pick one below.") % {
                "id": repr(str(plan)[:40])})))
        if pl is not None and lesson is None:
            return html.Div(_plan_view(pl, lang), className="lessons-page", lang=lang)
    if lesson is None:
        return html.Div(_index(lang, msg), className="lessons-page", lang=lang)
    try:
        les = lessons.get(lesson)
    except lessons.LessonError:
        error = _("There is no lesson %(id)s; pick one below.") % {"id": repr(str(lesson)[:40])}
        return html.Div(_index(lang, " ".join(filter(None, (msg, error)))),
                        className="lessons-page", lang=lang)
    try:
        n = lessons.step_index(les, step if step is not None else "1")
    except lessons.LessonError:
        error = _("Lesson “%(title)s” has steps 1 to %(n)s; there is no step %(step)s.") % {
            "title": _(les.title), "n": len(les.steps), "step": repr(str(step)[:12])}
        return html.Div(_index(lang, " ".join(filter(None, (msg, error)))),
                        className="lessons-page", lang=lang)
    body = ([html.Div(msg, className="msg-error lesson-msg")] if msg else []) + _step_view(les, n, lang, pl)
    return html.Div(body, className="lessons-page", lang=lang)


def _progress(value) -> dict[str, list[int]]:
    """This browser's progress store, keeping only real lessons and step numbers."""
    out = {}
    if isinstance(value, dict):
        for les in lessons.lessons():
            done = value.get(les.id)
            if isinstance(done, list):
                out[les.id] = sorted({d for d in done if type(d) is int and 1 <= d <= len(les.steps)})
    return out


@dash.callback(
    Output({"type": "lesson-progress", "index": ALL}, "children"),
    Input("teach-progress", "data"),
    State({"type": "lesson-progress", "index": ALL}, "id"),
)
def show_progress(progress, ids):
    """'k of n done' on each lesson card, from this browser's local store."""
    _ = i18n.gettext(ui_lang.request_lang())
    prog = _progress(progress)
    out = []
    for i in ids if isinstance(ids, list) else []:
        lid = i.get("index") if isinstance(i, dict) else None
        try:
            total = len(lessons.get(lid).steps)
        except lessons.LessonError:
            out.append("")
            continue
        done = len(prog.get(lid, []))
        out.append(_("%(done)s of %(total)s done") % {"done": done, "total": total} if done else "")
    return out


def _step_of(button_id, plan: bool = False) -> tuple[lessons.Lesson, int, str | None] | None:
    """The lesson step a button names in its id ({"type": "lesson-act", "index": "ID/N"}) and, for a
    Go button (`plan`), the class plan whose row it is ("ID/N/PLAN", a plan that exists, else None). The
    timeline's "next step" button adds "/next", so that its id differs from that step's own row's."""
    index = button_id.get("index") if isinstance(button_id, dict) else None
    if isinstance(index, str) and plan:
        index = index.removesuffix("/next")
    if not isinstance(index, str) or not 1 <= index.count("/") <= (2 if plan else 1) or len(index) > 120:
        return None
    lesson, step, *rest = index.split("/")
    found = teach.step_store({"lesson": lesson, "step": step})
    if found is None:
        return None
    try:
        return (*found, lessons.plan(rest[0]).id if rest else None)
    except lessons.LessonError:
        return None


@dash.callback(
    Output({"type": f"{P}-msg", "index": ALL}, "children"),
    Output({"type": f"{P}-msg", "index": ALL}, "className"),
    Output("ctl-msg", "children", allow_duplicate=True),
    Output("ctl-msg", "className", allow_duplicate=True),
    Output("teach-step", "data"),
    Output("teach-progress", "data"),
    Output("teach-nav", "href"),
    Input({"type": f"{P}-act", "index": ALL}, "n_clicks"),
    State("teach-progress", "data"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def act(clicks, progress, choice, token, viewer, secret):
    """Do the step's action on the twin this viewer watches (the control bar's path, so the lock,
    sandbox ownership and validation apply), narrate the step and open its page."""
    _ = i18n.gettext(ui_lang.request_lang())
    n_msgs = len(clicks) if isinstance(clicks, list) else 0
    found = _step_of(ctx.triggered_id)
    if not any(isinstance(c, int) and c > 0 for c in (clicks if isinstance(clicks, list) else [])):
        return ([no_update] * n_msgs, [no_update] * n_msgs) + (no_update,) * 5
    if found is None:
        text = _("This lesson step is not known; reload the lesson.")
        return ([text] * n_msgs, ["ctl-msg msg-error"] * n_msgs) + (no_update,) * 5
    les, n, _plan = found
    try:
        tw, ticket = run_step(les, n, choice, token, viewer, secret)
    except session.ControlError as exc:
        # refused (a locked shared twin, another browser's sandbox, a rate limit): the reason in the
        # viewer's language, and the page still opens with the step narrated, so a student can watch
        text = _("Not applied: %(why)s — the page opens so you can watch; this step's action needs the "
                 "instructor or a private sandbox of your own.") % {"why": explain(exc)}
        return ([text] * n_msgs, ["ctl-msg msg-error"] * n_msgs, text, "ctl-msg msg-error",
                {"lesson": les.id, "step": n}, no_update, target_page(les.steps[n - 1].action))
    prog = _progress(progress)
    prog[les.id] = sorted(set(prog.get(les.id, [])) | {n})
    # the engine's answer: here now if it came within a moment, else on the control bar's line (twin.ui.answer)
    text, cls = answer.sent(tw, ticket, lambda: eventtext.said(ticket.said), TICKET)
    return ([text] * n_msgs, [cls] * n_msgs, text, cls, {"lesson": les.id, "step": n}, prog,
            target_page(les.steps[n - 1].action))


def run_step(les: lessons.Lesson, n: int, choice, token, viewer, secret, hold: bool = False):
    """A step's action and speed on the twin this viewer watches and, for the timeline, a hold after its
    warm-up (twin.live.lecture.ready: the control bar's path, so the lock, sandbox ownership and
    validation apply, and the step is checked whole first); (the twin, the action's ticket).
    ControlError if refused at once."""
    tw, _note = twin_for(choice)
    actor = guard.actor(viewer, token, secret)
    return tw, lecture.ready(tw, les.steps[n - 1], hold=hold, **{**actor, "who": f"{actor['who']} · lesson {les.id}"})


@dash.callback(
    Output({**TL_MSG, "index": ALL}, "children"),
    Output({**TL_MSG, "index": ALL}, "className"),
    Output("teach-step", "data", allow_duplicate=True),
    Output("teach-nav", "href", allow_duplicate=True),
    Input({"type": f"{P}-go", "index": ALL}, "n_clicks"),
    State("ctl-twin", "data"), State("ctl-token", "data"), State("ctl-viewer", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def go(clicks, choice, token, viewer, secret):
    """The timeline: ready the twin for a step (its speed, its action, a pause once its figures are
    there) and open the step, so the class predicts while the twin warms up."""
    _ = i18n.gettext(ui_lang.request_lang())
    shown = len(ctx.outputs_list[0]) if ctx.outputs_list else 0       # the timeline's message line, if shown
    say = lambda text, cls: ([text] * shown, [cls] * shown)
    if not any(isinstance(c, int) and c > 0 for c in (clicks if isinstance(clicks, list) else [])):
        return [no_update] * shown, [no_update] * shown, no_update, no_update
    found = _step_of(ctx.triggered_id, plan=True)
    if found is None:
        return *say(_("This lesson step is not known; reload the lesson."), "ctl-msg msg-error"), no_update, no_update
    les, n, plan = found
    try:
        _tw, ticket = run_step(les, n, choice, token, viewer, secret, hold=True)
    except session.ControlError as exc:
        return *say(_("Not applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"), no_update, no_update
    sc = les.steps[n - 1].screen
    return (*say(_("Applied: %(what)s; the twin pauses at %(sim)s simulated s") % {
        "what": eventtext.said(ticket.said), "sim": f"{sc.warmup_s:g}"}, "ctl-msg msg-ok"), {"lesson": les.id, "step": n},
        teach.lesson_href(les.id, n, plan=plan))


def may_lead(token) -> bool:
    """Whether this tab may lead the class: a credential the shared twin accepts (anyone's when unlocked)."""
    return session.sessions().shared().authorized(guard.credential(token))


def may_act(token, choice, secret) -> bool:
    """Whether this tab may send a step's action and the timeline's Go to the twin it views: the
    shared twin with `may_lead`, or a private sandbox this browser owns."""
    tw, _note = twin_for(choice)
    if tw.shared:
        return may_lead(token)
    return tw.owner == guard.client(secret)[0]


@dash.callback(
    Output({"type": f"{P}-lecturer", "index": ALL}, "style"),
    Input({"type": f"{P}-lecturer", "index": ALL}, "id"), Input("ctl-token", "data"), Input("ctl-twin", "data"),
    Input("class-follow", "data"), State("ctl-secret", "data"),
)
def lecturer_parts(ids, token, choice, follow, secret):
    """Show the lecturer's parts only to a tab that may use them and does not follow the class: a
    student sees the step, not Lead, Go or the action (it used to, and got refusals when pressing them)."""
    ids = ids if isinstance(ids, list) else []
    if classbar.on(follow):
        return [HIDE] * len(ids)
    lead, act = may_lead(token), may_act(token, choice, secret)
    return [{} if (lead if isinstance(i, dict) and i.get("index") == "lead" else act) else HIDE for i in ids]


@dash.callback(
    Output("class-lead", "data"), Output("ctl-msg", "children", allow_duplicate=True),
    Output("ctl-msg", "className", allow_duplicate=True),
    Input({**LEAD, "index": ALL}, "n_clicks"), State("ctl-token", "data"),
    prevent_initial_call=True,
)
def lead(clicks, token):
    """Lead the class from here (refused, in the viewer's language, without the instructor's authority)."""
    if not any(isinstance(c, int) and c > 0 for c in (clicks if isinstance(clicks, list) else [])):
        return no_update, no_update, no_update
    return classbar.lead(token)
