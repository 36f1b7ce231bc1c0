"""Glossary: the words the dashboard and the lessons use, in plain sentences (EN / ZH from the catalogs)."""
from __future__ import annotations

import dash
from dash import html

from twin import i18n
from twin import lessons
from twin.ui import components
from twin.ui import teach
from twin.ui import lang as ui_lang
from twin.ui.lang import N_

dash.register_page(__name__, path="/glossary", name=N_("Glossary"), title=ui_lang.title("Glossary"),
                   order=11, menu="more")


def layout(lang=None, **_kwargs):
    lang, msg = teach.page_lang(lang)
    _ = i18n.gettext(lang)
    entries = [html.Div([
        html.Dt([_(t.term), html.Span(t.term, lang="en", className="gl-orig muted i18n-skip")
                 if lang != "en" and _(t.term) != t.term else None], id=f"gl-{t.key}"),
        html.Dd([html.Span(_(t.text)),
                 html.Span([_("Source:"), " ", t.ref], className="gl-ref muted i18n-skip") if t.ref else None]),
    ], className="gl-entry") for t in lessons.glossary()]
    return html.Div([
        components.page_header(_("Glossary"), _("The words this twin uses, each in a few plain sentences. Numbers cite "
                                       "the reference file and section they come from.")),
        html.Div(msg, className="msg-error lesson-msg") if msg else None,
        html.Dl(entries, className="glossary"),
    ], className="glossary-page", lang=lang)
