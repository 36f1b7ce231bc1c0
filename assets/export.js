/* Chart export (issue 23): every chart's PNG (the camera in its toolbar, twin.ui.components.graph) is
 * named  <page>-<scenario>-<deployment>-seed<seed>-t<simulated seconds>s.png  and the image carries a
 * title with the same facts, so a picture pasted into a report says what run it shows. One handler
 * for every chart: it takes the camera's click before Plotly does and downloads a copy of the figure
 * with that title under that name. The facts are the run-control strip's (twin.js `status` keeps
 * the latest in window.twinFacts).
 */
(function () {
  "use strict";
  var TITLE_PX = 40;          // room added above the plot for the second title line
  var MIN_W = 960, MIN_H = 420; // an exported chart is at least this big (CSS px; the PNG is twice that)

  function slug(v) {
    var s = (v === undefined || v === null || v === "") ? "none" : String(v);
    return s.replace(/[^A-Za-z0-9._-]+/g, "_");
  }

  function page(path) {
    var first = String(path || "/").split("/").filter(Boolean)[0];
    return first || "overview";
  }

  function name(pageName, f) {
    f = f || {};
    return [slug(pageName), slug(f.scenario), slug(f.deployment), "seed" + slug(f.seed),
            "t" + Math.round(Number(f.sim_time) || 0) + "s"].join("-");
  }

  function facts(pageTitle, f) {
    f = f || {};
    var T = f.text || {};
    var w = function (k, en) { return T[k] || en; };
    return [pageTitle, w("scenario", "scenario") + " " + f.scenario, f.deployment,
            w("seed", "seed") + " " + f.seed, "t = " + Math.round(Number(f.sim_time) || 0) + " s"]
      .filter(function (x) { return x; }).join(" \u00b7 ");
  }

  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function figure(gd, f, pageTitle) {
    var lay = gd.layout || {}, full = gd._fullLayout || {};
    var t = lay.title, chart = (t && typeof t === "object") ? t.text : t;
    var margin = Object.assign({}, full.margin || {}, lay.margin || {});
    margin.t = (margin.t || 0) + TITLE_PX;
    margin.b = Math.max(margin.b || 0, 50);        // the x axis title whole
    var height = Math.max(full.height || 0, MIN_H) + TITLE_PX;
    var layout = Object.assign({}, lay, {
      title: Object.assign({}, (t && typeof t === "object") ? t : {}, {
        text: (chart ? "<b>" + chart + "</b><br>" : "") +
              "<span style=\"font-size:11px\">" + esc(facts(pageTitle, f)) + "</span>",
        x: 0, xref: "container", xanchor: "left", y: 1 - 12 / height, yref: "container", yanchor: "top",
        pad: {l: 14}}),
      margin: margin, width: Math.max(full.width || 0, MIN_W), height: height});
    return {data: gd.data, layout: layout};
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target && ev.target.closest ? ev.target.closest(".modebar-btn") : null;
    if (!btn || !/^Download plot/.test(btn.getAttribute("data-title") || "")) { return; }
    var gd = btn.closest(".js-plotly-plot");
    if (!gd || !window.Plotly) { return; }
    ev.stopImmediatePropagation();
    ev.preventDefault();
    var f = window.twinFacts || {};
    var h2 = document.querySelector(".page-header h2");
    var fig = figure(gd, f, h2 ? h2.textContent.trim() : "");
    var opts = (gd._context && gd._context.toImageButtonOptions) || {};
    window.Plotly.downloadImage(fig, {format: "png", filename: name(page(window.location.pathname), f),
                                      scale: opts.scale || 2, width: fig.layout.width, height: fig.layout.height});
  }, true);

  window.twinExport = {name: name, page: page, figure: figure, facts: facts};
})();
