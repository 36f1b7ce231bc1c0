"""No overlapping or cut-off text (issue 23 C): every page of the nav, at a laptop's 1440x900 and a
phone's 390x844, in English and Chinese (the first page loaded in the language, the others reached
in the app as a nav link reaches them, without reloading the scripts). Text is measured as it is
drawn: the line boxes of every visible text node (Range.getClientRects), so a padded box that
merely touches its neighbour is not an overlap, and a label drawn over a button is. Plotly's SVG and cytoscape's canvas draw their own
text and are left out, as are a text's ancestors and descendants (nested, not overlapping).
Screenshots of a failing page: test-artifacts/e2e/layout-<page>-<size>-<lang>.png."""
from __future__ import annotations

import pytest

from test_e2e import settle, ticks, wait_live
from test_e2e_fresh import DRAWN, GO
from twin.cli import pagelist

pytestmark = pytest.mark.e2e

PAGES = pagelist.paths()      # every registered page
SIZES = {"1440x900": (1440, 900), "390x844": (390, 844)}
SLACK_PX = 2        # line boxes of adjacent lines may share a pixel or two (font ascent over line-height)

# Runs in the page: [{a, b}] text overlaps and [{text, left, right}] text drawn outside the viewport
# where no scroll container holds it, plus the body's scroll width.
MEASURE = """(slack) => {
  const vw = document.documentElement.clientWidth;
  const drawnElsewhere = el => el.closest('svg, canvas, .js-plotly-plot, #topo-cy, #fl-topo-cy, .info-tip');
  const shown = el => { for (let e = el, prev = null; e; prev = e, e = e.parentElement) { const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') return false;
      if (e.tagName === 'DETAILS' && !e.open && prev && prev.tagName !== 'SUMMARY') return false; } return true; };
  const scrolls = el => { for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return e; }
      return null; };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const boxes = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || drawnElsewhere(el) || !shown(el)) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    const clip = scrolls(el), c = clip && clip.getBoundingClientRect();
    for (const b of r.getClientRects()) {
      if (b.width < 1 || b.height < 1) continue;
      if (c && (b.right <= c.left || b.left >= c.right || b.bottom <= c.top || b.top >= c.bottom)) continue;
      boxes.push({el, clip, text: n.textContent.trim().slice(0, 40), l: b.left, r: b.right, t: b.top, b: b.bottom});
    }
  }
  const overlaps = [], cut = [];
  for (let i = 0; i < boxes.length; i++) {
    const p = boxes[i];
    if (!p.clip && (p.r > vw + 1 || p.l < -1)) cut.push({text: p.text, left: Math.round(p.l), right: Math.round(p.r)});
    for (let j = i + 1; j < boxes.length; j++) {
      const q = boxes[j];
      if (p.el === q.el || p.el.contains(q.el) || q.el.contains(p.el)) continue;
      const w = Math.min(p.r, q.r) - Math.max(p.l, q.l), h = Math.min(p.b, q.b) - Math.max(p.t, q.t);
      if (w > slack && h > slack) overlaps.push({a: p.text, b: q.text, w: Math.round(w), h: Math.round(h)});
    }
  }
  return {overlaps: overlaps.slice(0, 12), cut: cut.slice(0, 12),
          scrollWidth: document.documentElement.scrollWidth, width: vw};
}"""


def measure(pg, path: str, lang: str | None = None) -> dict:
    """The page at `path`: loaded afresh in `lang`, else reached in the app (as a nav link does)."""
    if lang:
        pg.goto(f"{pg.base_url}{path}?lang={lang}")
        wait_live(pg)
        past = 0
    else:
        pg.evaluate(GO, path)
        pg.wait_for_function(DRAWN, arg=path)
        past = ticks(pg)
    pg.wait_for_selector(".main h2, .main h3")
    settle(pg, past=past)                  # a tick since the page opened has drawn its figures and tables
    pg.mouse.move(0, 0)                    # no hover menu or tooltip open
    return pg.evaluate(MEASURE, SLACK_PX)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("size", list(SIZES))
def test_no_text_overlaps_or_is_cut_off(browser_page, artifacts, size, lang):
    pg = browser_page
    w, h = SIZES[size]
    pg.set_viewport_size({"width": w, "height": h})
    bad = {}
    for i, path in enumerate(PAGES):
        got = measure(pg, path, None if i else lang)
        if got["overlaps"] or got["cut"] or got["scrollWidth"] > got["width"]:
            bad[path] = got
            name = path.strip("/") or "overview"
            pg.screenshot(path=str(artifacts / f"layout-{name}-{size}-{lang}.png"))
    for path, got in bad.items():
        print(size, lang, path, got)
    assert not bad, bad
    assert pg.errors == [], pg.errors[:3]
