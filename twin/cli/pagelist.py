"""The dashboard's pages, read from Dash's page registry, for the tools and checks that visit every
page (the screenshots, the load test, the layout check): a page declares itself once, in its own
file, with `dash.register_page`, and these lists follow. Besides Dash's own fields a page may say:

- `live=(cursor store id or None, selector)`: the load test's probe of a page with live data (its
  live callback's cursor, None for a page drawn once; a selector that holds a live value once drawn);
- `shots=((name, path[, demo]), ...)`: the screenshots it is shown in (default: one, named for its
  module, at its path; `()`: none). A shot with a demo replays it on the shared twin, so the shots of
  such a page are taken after every other page's;
- `menu="more"`: it is reached from the top bar's More menu (app._nav).
"""
from __future__ import annotations

import dash


def pages() -> list[dict]:
    """The registered pages in the order of the navigation."""
    import app  # noqa: F401  (the Dash app registers every module of pages/)
    return sorted(dash.page_registry.values(), key=lambda p: p.get("order", 99))


def name(page: dict) -> str:
    """A page's short name: its module's ("pages.overview" -> "overview")."""
    return page["module"].rsplit(".", 1)[-1]


def paths() -> list[str]:
    return [p["path"] for p in pages()]


def live() -> dict[str, tuple[str, str | None, str]]:
    """name -> (path, cursor store id or None, selector) of each page with a load-test probe."""
    return {name(p): (p["path"], *p["live"]) for p in pages() if p.get("live")}


def shots() -> list[tuple[str, str, str | None]]:
    """(shot name, path, demo to replay or None), in navigation order, a demo's page's last."""
    out = []
    for p in pages():
        mine = [(*s, None)[:3] for s in p.get("shots", ((name(p), p["path"]),))]
        out.append((any(demo for _n, _p, demo in mine), mine))
    return [s for _demo, mine in sorted(out, key=lambda x: x[0]) for s in mine]
