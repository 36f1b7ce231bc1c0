"""Glossary: the words the dashboard and the lessons use, in plain sentences (EN / ZH from the catalogs)."""
from __future__ import annotations

import dash
from dash import html

from twin import i18n as I
from twin import lessons as L
from twin.ui import components as C
from twin.ui import teach as T
from twin.ui import lang as Lg
from twin.ui.lang import N_

dash.register_page(__name__, path="/glossary", name=N_("Glossary"), title=Lg.title("Glossary"), order=11)


def layout(lang=None, **_kwargs):
    lang, msg = T.page_lang(lang)
    _ = I.gettext(lang)
    entries = [html.Div([
        html.Dt([_(t.term), html.Span(t.term, lang="en", className="gl-orig muted i18n-skip")
                 if lang != "en" and _(t.term) != t.term else None], id=f"gl-{t.key}"),
        html.Dd([html.Span(_(t.text)),
                 html.Span([_("Source:"), " ", t.ref], className="gl-ref muted i18n-skip") if t.ref else None]),
    ], className="gl-entry") for t in L.glossary()]
    return html.Div([
        C.page_header(_("Glossary"), _("The words this twin uses, each in a few plain sentences. Numbers cite "
                                       "the reference file and section they come from.")),
        html.Div(msg, className="msg-error lesson-msg") if msg else None,
        html.Dl(entries, className="glossary"),
    ], className="glossary-page", lang=lang)
