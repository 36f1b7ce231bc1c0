"""The class bar under the narration banner: follow the lecturer, predict, see the tally (issue 26).

Every viewer's status already carries the shared twin's class (`twin.live.classroom`, `status["class"]`).
A clientside callback (assets/classbar.js `sync`) turns it into the `class-state` store only when its
revision changes (for the lecturer also when the count does), so the server callbacks here run once
per lecturer move, not per poll; a following browser is moved there in the browser (page, narrated
step, presenter mode). Following also joins the browser to the class (`join`): only browsers
that joined before a question opened may answer it (twin.live.classroom). Leaving stops the moves
and keeps the page; following again jumps to the lecturer. The lecturer's tab publishes where it is
(`publish`, authority checked on the shared twin), reveals, exports the tally as CSV; its tools and
the live tally are drawn only for a credential the gate accepts, never for the browser's own
`class-lead` flag. Answers go through `send`: one per browser per step; refusals in the viewer's
language (twin.ui.errors).
"""
from __future__ import annotations

import dash
from dash import Input, Output, State, clientside_callback, ctx, dcc, html, no_update

from twin import i18n
from twin import lessons
from twin.live import session

from twin.ui import components
from twin.ui import guard
from twin.ui import theme
from twin.ui.errors import explain
from twin.ui.lang import N_, _, request_lang

HIDE, SHOW = {"display": "none"}, {}
MINE_KEPT = 64                   # guesses this browser remembers (one per step; the oldest dropped)
CHART_INFO = N_("The room's answers to this step: how many fell in each range, or chose each option (anonymous). "
                "Green: the measured answer, read from the shared twin at the reveal (or the lesson's checked "
                "figure when the twin does not show it). Yellow: your own answer.")


# where each on-screen figure a lesson reads (twin.lessons.screen) is drawn: its element on the page
FIGURE_AT = {"overview.input_tps_per_npu": "#ov-in-tps", "overview.output_tps_per_npu": "#ov-out-tps",
             "overview.ttft_p50_s": "#ov-ttft", "overview.tpot_p50_ms": "#ov-tpot",
             "overview.decode_batch_per_npu": "#ov-useful-hint", "tradeoffs.curve_tpot_ms": "#to-fig",
             "tradeoffs.curve_tps_per_npu": "#to-fig", "tradeoffs.live_tpot_ms": "#to-live",
             "tradeoffs.live_tps_per_npu": "#to-live", "tradeoffs.live_batch_per_npu": "#to-live",
             "cache.token_hit_ratio": "#ca-token", "cache.ttft_hit_p50_s": "#ca-ttft",
             "traffic.ub_gbps": "#tr-scaleup", "traffic.rdma_gbps": "#tr-rdma", "traffic.vpc_gbps": "#tr-vpc",
             "validation.tokens_per_s_per_tflops": "#va-predictions"}


def figure_at(step: lessons.Step) -> str | None:
    """The selector of the step's first on-screen figure: the live number its question is about."""
    for f in step.screen.figures:
        sel = FIGURE_AT.get(f.read.partition("@")[0])
        if sel:
            return sel
    return None


def bar() -> html.Div:
    """The bar and its stores (in the shell, under the banner)."""
    return html.Div([
        dcc.Store(id="class-state"), dcc.Store(id="class-pub"), dcc.Store(id="class-focus"), dcc.Store(id="class-focused"),
        dcc.Store(id="class-follow", storage_type="session"), dcc.Store(id="class-lead", storage_type="session"),
        dcc.Store(id="class-mine", storage_type="local"), dcc.Download(id="class-dl"),
        html.Div([
            html.Span(id="class-where", className="class-where"),
            html.Button(_("Follow the lecturer"), id="class-follow-btn", className="btn btn-small btn-primary", n_clicks=0,
                        title=_("Your page, step and banner move with the lecturer's; read-only")),
            html.Button(_("Stop following"), id="class-unfollow-btn", className="btn btn-small", n_clicks=0,
                        title=_("Stay where you are; you can follow again at any time")),
            html.Span([_("Answers:"), " ", html.B(id="class-count")], className="class-count"),
            html.Span([
                html.Button(_("Reveal the answer"), id="class-reveal", className="btn btn-small btn-primary", n_clicks=0),
                html.Button(_("Export tally (CSV)"), id="class-csv", className="btn btn-small", n_clicks=0),
                html.Button(_("Stop leading"), id="class-end", className="btn btn-small", n_clicks=0),
            ], id="class-tools", className="class-tools", style=HIDE),
        ], className="class-head"),
        html.Div([
            html.Span(id="class-ask", className="class-ask"),
            dcc.Input(id="class-num", type="number", debounce=False, className="class-num", style=HIDE),
            html.Span(id="class-unit", className="class-unit"),
            dcc.RadioItems(id="class-choice", options=[], className="class-choice", style=HIDE, inline=True),
            html.Button(_("Send my answer"), id="class-send", className="btn btn-small btn-primary", n_clicks=0),
        ], id="class-q", className="class-q", style=HIDE),
        html.Div(id="class-msg", className="ctl-msg", role="status"),
        html.Div(id="class-result", className="class-result"),
        html.Div(id="class-chart-wrap", className="class-chart"),       # the chart, only when there is a tally
    ], id="class-bar", className="class-bar teach-hidden", **{"aria-live": "polite"})


def _state(v) -> dict | None:
    """The class state from the browser store (as twin.live.classroom.public wrote it), checked."""
    v = guard.store(v)
    if not v.get("lesson"):
        return None
    try:
        les = lessons.get(v["lesson"])
        return {**v, "les": les, "n": lessons.step_index(les, v.get("step")), "count": v.get("n", 0)}
    except lessons.LessonError:
        return None


def _lobby(v) -> str:
    """Where the lecturer is before the first step: the class plan's page (twin.live.classroom.publish)."""
    v = guard.store(v)
    try:
        pl = lessons.plan(v.get("plan")) if v.get("leading") is True and v.get("plan") else None
    except lessons.LessonError:
        return ""
    return _("Lecturer: %(title)s, before the first step") % {"title": _(pl.title)} if pl else ""


def mine_key(st: dict) -> str:
    """This browser's answer to the published step, in its store: "lesson/step", and "#k" for the k-th
    class after the first (the plan run again on one server asks afresh; the old answer used to
    hide the question from a browser that had answered it in the first class)."""
    k = st.get("lecture")
    return f"{st['les'].id}/{st['n']}" + (f"#{k}" if type(k) is int and k > 0 else "")


def on(v) -> bool:
    """A store's {"on": true} (following, leading)."""
    return isinstance(v, dict) and v.get("on") is True


def _mine(v) -> dict:
    v = guard.store(v)
    return {k: x for k, x in list(v.items())[-MINE_KEPT:] if isinstance(k, str) and isinstance(x, (int, float))}


def _fmt(q: lessons.Question, v: float, lang: str) -> str:
    if q.kind == "choice":
        return _(q.choices[int(v)])
    return f"{i18n.number(v, lang, q.digits)} {_(q.unit)}".strip()


def figure(tally: dict, q: lessons.Question, mine: float | None) -> dict:
    """The room's answers as bars, the measured answer (once revealed) and this browser's guess (a
    plain figure dict: no plotly validation in a callback every follower runs at the reveal)."""
    lang = request_lang()
    xs = [_(x) if q.kind == "choice" else x for x, _c in tally["bars"]]
    colors = [theme.BLUE] * len(xs)
    shapes, notes = [], []
    if q.kind == "choice":
        if tally["measured"] is not None:
            k = q.choice(tally["measured"])
            colors[k] = theme.GREEN
            notes.append(dict(x=xs[k], y=0, yanchor="top", text=_("measured"), showarrow=False, yshift=-18))
        if mine is not None:
            notes.append(dict(x=xs[int(mine)], y=tally["bars"][int(mine)][1], text=_("your answer"),
                              showarrow=True, arrowhead=2, ay=-30))
    else:
        for v, color, label, y in ((tally["measured"], theme.GREEN, _("measured"), 1.0),
                                   (mine, theme.YELLOW, _("your answer"), 0.8)):     # two rows: never overlap
            if v is not None:
                shapes.append(dict(type="line", x0=v, x1=v, y0=0, y1=1, yref="paper", line=dict(color=color, width=3)))
                notes.append(dict(x=v, y=y, yref="paper", text=f"{label}: {_fmt(q, v, lang)}", showarrow=False,
                                  font=dict(color=color), yanchor="bottom", bgcolor=theme.PANEL))
    lay = theme.base_layout(height=190, margin=dict(l=40, r=20, t=26, b=30), shapes=shapes, annotations=notes,
                            showlegend=False, bargap=0.08, hovermode=False)
    if q.kind == "number":
        lay["xaxis"] = {**lay["xaxis"], "title": {"text": _(q.unit)}}
    bars = {"type": "bar", "x": xs, "y": [c for _x, c in tally["bars"]], "marker": {"color": colors},
            "name": _("answers")}
    return {"data": [bars], "layout": lay}


def lecturer_here(lead, token) -> bool:
    """Whether this tab leads the class with authority the server checked: its `class-lead` flag
    (the tab's choice) and a credential the shared twin accepts (anyone's, when it is not locked)."""
    return on(lead) and session.sessions().shared().authorized(guard.credential(token))


@dash.callback(
    Output("class-where", "children"), Output("class-ask", "children"), Output("class-unit", "children"),
    Output("class-num", "style"), Output("class-choice", "options"), Output("class-choice", "style"),
    Output("class-q", "style"), Output("class-send", "style"), Output("class-result", "children"),
    Output("class-chart-wrap", "children"), Output("class-tools", "style"), Output("class-focus", "data"),
    Input("class-state", "data"), Input("class-follow", "data"), Input("class-lead", "data"),
    Input("class-mine", "data"), Input("ctl-token", "data"), State("ctl-secret", "data"),
)
def render(state, follow, lead, mine, token, secret):
    """What this browser's bar shows for the published step: the question (following, joined before
    it was asked, not yet answered), the wait, or the reveal (the room's bars, the measured answer
    and this browser's guess); for the lecturer (checked: `lecturer_here`) the tools and live tally.
    Last, for a follower, where the step's live number is drawn (assets/classbar.js `focus` scrolls
    it into view: the Validation table is below the first screen)."""
    lang = request_lang()
    st = _state(state)
    lead = lecturer_here(lead, token)
    tools = SHOW if lead else HIDE
    if st is None:
        return (_lobby(state), "", "", HIDE, [], HIDE, HIDE, HIDE, "", None, tools, None)
    les, n = st["les"], st["n"]
    where = _("Lecturer: %(title)s, step %(n)s of %(total)s") % {"title": _(les.title), "n": n, "total": len(les.steps)}
    q = les.steps[n - 1].question
    focus = figure_at(les.steps[n - 1]) if on(follow) and not lead else None
    if q is None or not (on(follow) or lead):
        return (where, "", "", HIDE, [], HIDE, HIDE, HIDE, "", None, tools, focus)
    room = session.sessions().classroom
    guess = _mine(mine).get(mine_key(st))
    revealed = bool(st.get("revealed"))
    asking = not lead and not revealed and guess is None
    late = asking and not room.may_answer(guard.client(secret)[0], les.id, n)
    tally = room.tally(les.id, n, lecturer=lead)       # before the reveal: the lecturer's only
    result = ""
    if tally and tally["measured"] is not None:
        result = _("Measured: %(value)s") % {"value": _fmt(q, tally["measured"], lang)}
        if guess is not None:
            result += " · " + _("your answer: %(value)s") % {"value": _fmt(q, guess, lang)}
        result += " · " + (_("read live from the shared twin") if tally["source"] == "live"
                           else _("the lesson's checked figure"))
    elif guess is not None:
        result = _("Your answer: %(value)s. Waiting for the lecturer to reveal.") % {"value": _fmt(q, guess, lang)}
    elif late:
        result = _("This browser joined the class after this question was asked: you can answer the next one.")
    asking = asking and not late
    chart = components.graph("class-chart", figure(tally, q, guess), 190, _(CHART_INFO)) if tally else None
    return (where, _(q.ask), _(q.unit) if q.kind == "number" and asking else "",
            SHOW if asking and q.kind == "number" else HIDE,
            [{"label": _(c), "value": i} for i, c in enumerate(q.choices)],
            SHOW if asking and q.kind == "choice" else HIDE,
            SHOW, SHOW if asking else HIDE, result, chart, tools, focus)


@dash.callback(
    Output("class-msg", "children", allow_duplicate=True), Output("class-msg", "className", allow_duplicate=True),
    Input("class-follow", "data"), State("ctl-secret", "data"),
    prevent_initial_call="initial_duplicate",
)
def join(follow, secret):
    """A following browser joins the class (on Follow, and on each page load while following, which
    keeps its place), so it may answer the questions asked from then on."""
    if not on(follow):
        return no_update, no_update
    try:
        session.sessions().classroom.join(*guard.client(secret))
    except session.ControlError as exc:
        return _("Not in the class: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    return no_update, no_update


@dash.callback(
    Output("class-msg", "children"), Output("class-msg", "className"), Output("class-mine", "data"),
    Input("class-send", "n_clicks"),
    State("class-num", "value"), State("class-choice", "value"), State("class-state", "data"),
    State("class-mine", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def send(_n, num, choice, state, mine, secret):
    """One answer from this browser to the published step (the classroom refuses a second one)."""
    st = _state(state)
    if st is None:
        return _("No lesson step is published; nothing to answer."), "ctl-msg msg-error", no_update
    q = st["les"].steps[st["n"] - 1].question
    who, addr = guard.client(secret)
    try:
        v = session.sessions().classroom.answer(who, addr, st["les"].id, st["n"], choice if q and q.kind == "choice" else num)
    except session.ControlError as exc:
        return _("Not counted: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", no_update
    kept = _mine(mine)
    kept[mine_key(st)] = v
    return _("Counted. Thank you!"), "ctl-msg msg-ok", kept


@dash.callback(
    Output("class-msg", "children", allow_duplicate=True), Output("class-msg", "className", allow_duplicate=True),
    Output("class-lead", "data", allow_duplicate=True),
    Input("class-pub", "data"), State("ctl-token", "data"),
    prevent_initial_call=True,
)
def publish(pub, token):
    """The lecturer's tab says where it is (from assets/classbar.js `pub`: only while leading)."""
    pub = guard.store(pub)
    if not (pub.get("lesson") or pub.get("plan")):
        return no_update, no_update, no_update
    try:
        session.sessions().classroom.publish(session.sessions().shared(), guard.credential(token), lesson=pub.get("lesson") or None,
                                       step=pub.get("step"), page=guard.text(pub.get("page"), 40),
                                       presenter=pub.get("presenter") is True, plan=guard.text(pub.get("plan"), 40)
                                       if not pub.get("lesson") else None)
    except session.ControlError as exc:
        return _("Not leading: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", {"on": False}
    except lessons.LessonError:
        return no_update, no_update, no_update
    return no_update, no_update, no_update


@dash.callback(
    Output("class-msg", "children", allow_duplicate=True), Output("class-msg", "className", allow_duplicate=True),
    Output("class-lead", "data", allow_duplicate=True), Output("class-dl", "data"),
    Input("class-reveal", "n_clicks"), Input("class-csv", "n_clicks"), Input("class-end", "n_clicks"),
    State("ctl-token", "data"),
    prevent_initial_call=True,
)
def lecturer(_reveal, _csv, _end, token):
    """Reveal the measured answer, export the tally, or stop leading (followers stay where they are)."""
    room, tw, cred = session.sessions().classroom, session.sessions().shared(), guard.credential(token)
    try:
        if ctx.triggered_id == "class-reveal":
            room.reveal(tw, cred)
            return _("Revealed: every following screen shows the measured answer."), "ctl-msg msg-ok", no_update, no_update
        if ctx.triggered_id == "class-csv":
            tw.require(cred)
            return no_update, no_update, no_update, dict(content=room.csv(), filename="class-tally.csv")
        if ctx.triggered_id == "class-end":
            room.end(tw, cred)
            return _("You stopped leading; followers stay where they are."), "ctl-msg msg-ok", {"on": False}, no_update
    except session.ControlError as exc:
        return _("Not applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", no_update, no_update
    return no_update, no_update, no_update, no_update


def lead(token) -> tuple[dict | None, str, str]:
    """(class-lead store, message, class) when a lesson page's "Lead the class" is pressed: only
    someone who may control the shared twin leads it."""
    try:
        session.sessions().shared().require(guard.credential(token))
    except session.ControlError as exc:
        return None, _("Not leading: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    return {"on": True}, _("You lead the class: following screens move with yours."), "ctl-msg msg-ok"


clientside_callback(
    dash.ClientsideFunction(namespace="classbar", function_name="sync"),
    Output("class-state", "data"), Output("class-count", "children"), Output("class-bar", "className"),
    Output("class-follow-btn", "style"), Output("class-unfollow-btn", "style"),
    Output("teach-step", "data", allow_duplicate=True),
    Output("teach-presenter", "data", allow_duplicate=True),
    Input("shell-status", "data"), Input("class-follow", "data"), Input("class-lead", "data"),
    State("class-state", "data"),
    prevent_initial_call=True,
)

clientside_callback(
    dash.ClientsideFunction(namespace="classbar", function_name="focus"),
    Output("class-focused", "data"),
    Input("class-focus", "data"), Input("url", "pathname"),
)

clientside_callback(
    dash.ClientsideFunction(namespace="classbar", function_name="follow"),
    Output("class-follow", "data"),
    Input("class-follow-btn", "n_clicks"), Input("class-unfollow-btn", "n_clicks"),
    prevent_initial_call=True,
)

clientside_callback(
    dash.ClientsideFunction(namespace="classbar", function_name="pub"),
    Output("class-pub", "data"),
    Input("url", "pathname"), Input("url", "search"), Input("teach-step", "data"), Input("teach-presenter", "data"),
    Input("class-lead", "data"),
    State("class-pub", "data"),
)
