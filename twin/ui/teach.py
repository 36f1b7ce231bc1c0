"""Teaching pieces of the app shell: language choice, presenter mode, the narration banner, the
first-screen intro. Every user-visible string here comes from the catalogs (`twin.i18n`).

Language: `?lang=zh` / `?lang=en` on any URL sets the `twin_lang` cookie (kept in the browser);
pages and the shell render in the cookie's language when the URL names none. The EN / 中文 toggle
is a link to the same URL with `lang` replaced (a full reload, so every part of the page agrees).
`install(app)` puts the language in `<html lang>` of the served page; a clientside callback keeps
it right after in-app navigation. Presenter mode (large type) and the lesson step being narrated
live in local storage.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qs

import dash
import flask
from dash import Input, Output, State, clientside_callback, dcc, html

from twin import i18n
from twin.i18n import N_
from twin import lessons

from twin.ui import guard
from twin.ui.lang import COOKIE, COOKIE_AGE_S, request_lang

def bad_lang(value, lang: str) -> str:
    """The message for an unknown `lang` in a URL, in the language shown instead."""
    _ = i18n.gettext(lang)
    return _("Language %(value)s is not available (allowed: %(allowed)s); showing %(shown)s.") % {
        "value": repr(str(value)[:24]), "allowed": ", ".join(i18n.LANGS), "shown": i18n.NAMES[lang]}


def page_lang(value) -> tuple[str, str | None]:
    """A page's language from its `lang` URL argument: (lang, None) or, for a bad value, the
    request's language and a message to show in the page."""
    if value is None:
        return request_lang(), None
    try:
        return i18n.check_lang(value), None
    except i18n.LangError:
        lang = request_lang()
        return lang, bad_lang(value, lang)


def install(app: dash.Dash) -> None:
    """`<html lang>` of the served page, and the cookie set from `?lang=` on any request."""
    base = app.interpolate_index

    def interpolate_index(**kw):
        out = base(**kw)
        return out.replace("<html>", f'<html lang="{i18n.HTML_LANG[request_lang()]}">', 1)
    app.interpolate_index = interpolate_index

    @app.server.after_request
    def _remember_lang(resp):
        arg = flask.request.args.get("lang")
        if arg is not None:
            try:
                resp.set_cookie(COOKIE, i18n.check_lang(arg), max_age=COOKIE_AGE_S, samesite="Lax")
            except i18n.LangError:
                pass
        return resp


# ---- shell pieces -----------------------------------------------------------------------------

def tools() -> html.Div:
    """Language toggle and presenter switch (in the top bar), plus the stores they use."""
    lang = request_lang()
    _ = i18n.gettext(lang)
    return html.Div([
        dcc.Location(id="teach-nav", refresh="callback-nav"),
        dcc.Store(id="teach-presenter", storage_type="local"),
        dcc.Store(id="teach-step", storage_type="local"),        # {"lesson", "step"} being narrated
        dcc.Store(id="teach-progress", storage_type="local"),    # {lesson id: [steps done]}
        html.Div([html.A(i18n.NAMES[code], id=f"teach-lang-{code}", href=f"?lang={code}", lang=code,
                         className="lang-link i18n-skip" + (" lang-active" if code == lang else ""),
                         title=_("Show the dashboard in this language"))
                  for code in i18n.LANGS], className="lang-toggle", role="group"),
        html.Button(_("Presenter"), id="teach-presenter-btn", className="pill", n_clicks=0,
                    title=_("Large type and the lesson narration on every page, for a projector")),
    ], className="teach-tools")


def banner() -> html.Div:
    """The narration banner every page shows (filled by `narrate` while a lesson step is active)."""
    _ = i18n.gettext(request_lang())
    return html.Div([
        html.Div(id="teach-banner-text", className="teach-banner-text"),
        html.Button(_("Close"), id="teach-banner-close", className="btn btn-small", n_clicks=0,
                    title=_("Stop narrating this lesson step")),
    ], id="teach-banner", className="teach-banner teach-hidden", role="status", **{"aria-live": "polite"})


def step_store(value) -> tuple[lessons.Lesson, int] | None:
    """A narrated step from the browser store: (lesson, step number) if it names a real one."""
    if not isinstance(value, dict):
        return None
    try:
        les = lessons.get(value.get("lesson"))
        return les, lessons.step_index(les, value.get("step"))
    except lessons.LessonError:
        return None


def lesson_href(lesson_id: str, step: int | None = None, lang: str | None = None, plan: str | None = None) -> str:
    """A lesson step's URL; with `plan`, the step as a row of that class plan (its timeline, its next row)."""
    q = ([f"lesson={lesson_id}"] + ([f"step={step}"] if step else []) + ([f"plan={plan}"] if plan else [])
         + ([f"lang={lang}"] if lang else []))
    return "/lessons?" + "&".join(q)


@dash.callback(
    Output("teach-banner-text", "children"),
    Output("teach-banner", "className"),
    Input("teach-step", "data"),
    Input("url", "search"),
)
def narrate(step, search):
    """The banner: the narrated step's 'what to notice', or a message for a bad `lang` in the URL."""
    lang = request_lang()
    _ = i18n.gettext(lang)
    bad = None
    raw = parse_qs((guard.text(search, 400) or "").lstrip("?")).get("lang")
    if raw:
        try:
            i18n.check_lang(raw[0])
        except i18n.LangError:
            bad = bad_lang(raw[0], lang)
    found = step_store(step)
    if found is None:
        return ([html.Span(bad, className="msg-error")] if bad else []), (
            "teach-banner" if bad else "teach-banner teach-hidden")
    les, n = found
    s = les.steps[n - 1]
    text = [html.Span(_(les.title), className="teach-banner-title"),
            html.Span(_("Step %(n)s of %(total)s") % {"n": n, "total": len(les.steps)}, className="teach-banner-step"),
            html.Span(_("Notice:"), className="teach-banner-label"), html.Span(_(s.notice)),
            dcc.Link(_("Back to the lesson"), href=lesson_href(les.id, n), className="teach-banner-link")]
    if bad:
        text.insert(0, html.Span(bad, className="msg-error"))
    return text, "teach-banner"


clientside_callback(
    dash.ClientsideFunction(namespace="teach", function_name="langSync"),
    Output("teach-lang-en", "href"),
    Output("teach-lang-zh", "href"),
    Input("url", "search"),
    Input("url", "pathname"),
)

clientside_callback(
    dash.ClientsideFunction(namespace="teach", function_name="presenter"),
    Output("teach-presenter", "data"),
    Output("teach-presenter-btn", "className"),
    Input("teach-presenter-btn", "n_clicks"),
    State("teach-presenter", "data"),
)

clientside_callback(
    "function (n) { return n ? null : window.dash_clientside.no_update; }",
    Output("teach-step", "data", allow_duplicate=True),
    Input("teach-banner-close", "n_clicks"),
    prevent_initial_call=True,
)


def term(key: str, label: str | None = None) -> html.Abbr:
    """A word with its glossary sentence on hover and a link to its entry (for labels on any page):
    `term("ttft")` shows "TTFT" with the definition in the viewer's language."""
    _ = i18n.gettext(request_lang())
    t = next((t for t in lessons.glossary() if t.key == key), None)
    if t is None:
        raise KeyError(f"glossary term {key!r}: allowed {', '.join(x.key for x in lessons.glossary())}")
    return html.Abbr(dcc.Link(label or _(t.term).split("（")[0].split(" (")[0], href=f"/glossary#gl-{key}"),
                     title=_(t.text), className="teach-term")


GLOSSED = ("ttft", "tpot", "slo", "ems", "ub", "rdma", "vpc", "ep", "mtp")   # acronyms glossed in titles
_ACRONYM = re.compile(r"(?<![\w-])(" + "|".join(k.upper() for k in GLOSSED) + r")(?![\w-])")


def glossed(text: str) -> list:
    """A translated title or label with each glossary acronym in it (TTFT, TPOT, SLO, EMS, UB, RDMA,
    VPC, EP, MTP) turned into its hover definition (`term`). The acronyms are the same in every
    language, so this works on the translated text; "EP320" or "UB-plane" are left as they are."""
    out, at = [], 0
    for m in _ACRONYM.finditer(text):
        out += [text[at:m.start()], term(m.group(1).lower(), m.group(1))]
        at = m.end()
    return [x for x in out + [text[at:]] if x != ""]


# ---- first screen ---------------------------------------------------------------------------

# The intro's two sentences about the machine (ids teach-intro-system, -serving): drawn for the
# CloudMatrix384 the shared twin runs; the Overview's tick rewrites them for the system the viewed
# twin runs (`intro_system`), so a GPU cluster is not introduced as Huawei's supernode.
INTRO_SYSTEM = ("system", "serving")
INTRO_SUPERNODE = (
    N_("CloudMatrix384 is Huawei's AI supernode: 384 Ascend NPUs and 192 CPUs joined by one flat, fast network "
       "(UB), so they work like one large computer."),
    N_("It is serving %(model)s, a %(params)s-billion-parameter mixture-of-experts model, as deployment %(dep)s "
       "describes: prompts on prefill NPUs, answers on decode NPUs, a shared cache (EMS) in CPU memory."))
DEFAULT_DEPLOYMENT = "cloudmatrix-infer-paper"    # what the shared twin serves at start (the layout's words)


def intro_system(info, deployment: str) -> list[str]:
    """The intro's sentences about the machine for system `info` (a snapshot's SystemInfo) and the model
    `deployment` serves."""
    from twin.ui.lang import _, system_title       # here: lang imports this module
    from twin.ui.words import served
    if info.supernode:
        return [_(INTRO_SUPERNODE[0]), _(INTRO_SUPERNODE[1]) % served(deployment)]
    return [_("This twin runs a GPU cluster: %(title)s.") % {"title": system_title(info)},
            _("It is serving %(model)s as deployment %(dep)s describes: answers on decode GPUs; requests "
              "travel between servers over RDMA, not over one flat network.") % served(deployment)]


def intro(**kwargs) -> html.Details:
    """A short 'what is this' for the Overview page: the supernode, the model, what runs, what to try."""
    from twin.ui import words           # here: lang imports this module
    lang, _msg = page_lang(kwargs.get("lang"))
    _ = i18n.gettext(lang)
    tries = [
        (_("Predict, then watch: follow a guided lesson."), "/lessons"),
        (_("Break an optical link or a die and watch the twin recover."), lesson_href("faults", 1)),
        (_("See what a bigger decode batch buys and costs."), lesson_href("prefill-decode", 2)),
    ]
    return html.Details([
        html.Summary(_("What am I looking at?"), className="summary-title"),
        html.Div([
            html.Div([
                html.P(_(INTRO_SUPERNODE[0]), id="teach-intro-system"),
                html.P(_(INTRO_SUPERNODE[1]) % words.served(DEFAULT_DEPLOYMENT), id="teach-intro-serving"),
                html.P(_("What runs here is a simulation of that machine, far faster than real time: every number "
                         "below is measured in the running twin. The bar at the top shows the scenario and lets "
                         "you pause, speed up or change it.")),
            ]),
            html.Div([
                html.Div(_("Three things to try:"), className="intro-try-head"),
                html.Ol([html.Li(dcc.Link(text, href=href)) for text, href in tries]),
                html.Div([dcc.Link(_("All lessons"), href="/lessons", className="btn btn-small"),
                          dcc.Link(_("Glossary"), href="/glossary", className="btn btn-small")],
                         className="intro-links"),
            ]),
        ], className="intro-body"),
    ], open=True, className="panel teach-intro", id="teach-intro")
