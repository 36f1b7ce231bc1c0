"""Pages from one registry (issue 39): a page declared in one file, registered with Dash as the pages
of pages/ are, is in the navigation and in every list of pages that the tools and checks walk (the
screenshots, the load test, the layout check, the lesson targets), with nothing else edited."""
import importlib
import sys

import dash
import pytest

from twin.cli import loadtest, pagelist

PAGE = '''
import dash
from dash import html

from twin.i18n import N_

dash.register_page(__name__, path="/sandbox-test", name=N_("Sandbox test"), order=6.5, menu="more",
                   live=("sbt-cursor", "#sbt-now"),
                   shots=(("sandbox-test", "/sandbox-test"), ("sandbox-test-demo", "/sandbox-test?x=1", "node-power-loss")))

layout = html.Div("a page of its own", id="sbt-now")
'''


def _links(node) -> list:
    """Every dcc.Link under a Dash component."""
    out = [node] if isinstance(node, dash.dcc.Link) else []
    kids = getattr(node, "children", None)
    for k in kids if isinstance(kids, list) else [kids] if kids is not None else []:
        out += _links(k)
    return out


@pytest.fixture
def extra_page(tmp_path, monkeypatch):
    import app
    pkg = tmp_path / "extra_pages"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sandbox_test.py").write_text(PAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    loadtest.pages.cache_clear()
    importlib.import_module("extra_pages.sandbox_test")
    yield app
    dash.page_registry.pop("extra_pages.sandbox_test", None)
    for m in ("extra_pages.sandbox_test", "extra_pages"):
        sys.modules.pop(m, None)
    loadtest.pages.cache_clear()


def test_a_page_in_one_file_is_in_the_navigation_and_every_list(extra_page):
    before = [p for p in pagelist.paths() if p != "/sandbox-test"]
    assert pagelist.paths() == before[:7] + ["/sandbox-test"] + before[7:]      # by its order: after /failures
    more = extra_page._nav().children[-1].children[1].children
    assert "/sandbox-test" in [link.href for link in more]                      # menu="more"
    assert pagelist.live()["sandbox_test"] == ("/sandbox-test", "sbt-cursor", "#sbt-now")
    assert loadtest.pages()["sandbox_test"] == ("/sandbox-test", "sbt-cursor", "#sbt-now")
    # a page with a demo shot is shot after the pages without one, in navigation order
    assert [s[0] for s in pagelist.shots()][-5:] == ["failures", "failures-gray", "topology-gray", "sandbox-test",
                                                     "sandbox-test-demo"]
    lessons = sys.modules["pages.lessons"]
    assert lessons.page_names(lambda s: s.upper())["/sandbox-test"] == "SANDBOX TEST"


def test_the_lists_hold_every_page_of_pages():
    from pathlib import Path
    files = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "pages").glob("*.py") if p.stem != "__init__")
    assert sorted(pagelist.name(p) for p in pagelist.pages()) == files
    shots = [s[0] for s in pagelist.shots()]
    assert shots.index("failures-gray") < shots.index("topology-gray") and shots[-3:] == ["failures", "failures-gray", "topology-gray"]
    assert "region" not in shots                  # its shot is the browser test's
    assert set(loadtest.pages()) == {"overview", "topology", "traffic", "cache", "tradeoffs", "validation", "failures",
                                     "maas"}
