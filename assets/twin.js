/* Clientside callbacks of CloudMatrix Twin: pure view transforms, no network round trip.
 *  status    - run-control strip, lock state and shared-action log from the status dict (and the run's
 *              facts, window.twinFacts, that export.js names and titles a chart's PNG with)
 *  secret    - this browser's secret (192 random bits): the server binds sandboxes and budgets to it
 *  viewerId  - an anonymous id for this browser (for the shared-action log)
 *  navActive - highlight the current page in the navigation
 *  topo      - merge compact live topology data (utilisation arrays) into cytoscape elements
 *  strips    - merge one compact KPI update (new times once, new values per series, fault marks
 *              when they moved) into several strip charts, keeping their last `keep` points
 */
(function () {
  "use strict";
  var NU = function () { return window.dash_clientside.no_update; };

  function fmtTime(s, T) {              // T: the unit words in the viewer's language (status text)
    if (s === null || s === undefined) { return "–"; }
    s = Number(s);
    T = T || {};
    if (s < 120) { return s.toFixed(1) + " " + (T.s || "s"); }
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
    var pad = function (x) { return (x < 10 ? "0" : "") + x; };
    return (h > 0 ? h + ":" + pad(m) : m) + ":" + pad(sec) + " " + (h > 0 ? (T.h || "h") : (T.min || "min"));
  }

  // On a phone (<= 700 px) a drawing much wider than tall is turned on its side (x and y swapped) and
  // fitted again: the supernode's 1,424 x 652 drawing filled a 372 x 640 box as a ~150 px strip. The
  // swapped elements carry data.tp, so the next merge keeps them (issue 36, 12).
  function portrait(elements) {
    if (window.innerWidth > 700 || !elements.length || (elements[0].data || {}).tp) { return elements; }
    var xs = [], ys = [];
    elements.forEach(function (el) { if (el.position) { xs.push(el.position.x); ys.push(el.position.y); } });
    if (!xs.length) { return elements; }
    var w = Math.max.apply(null, xs) - Math.min.apply(null, xs), h = Math.max.apply(null, ys) - Math.min.apply(null, ys);
    if (w < 1.3 * h) { return elements; }
    var ctx = window.dash_clientside.callback_context, id = ctx && ctx.outputs_list && ctx.outputs_list.id;
    setTimeout(function () {
      var el = id && document.getElementById(id), cy = el && el._cyreg && el._cyreg.cy;
      if (cy) { cy.fit(cy.elements(), 24); }
    }, 50);
    return elements.map(function (el, i) {
      var out = Object.assign({}, el);
      if (el.position) { out.position = {x: el.position.y, y: el.position.x}; }
      if (i === 0) { out.data = Object.assign({}, el.data, {tp: 1}); }
      return out;
    });
  }

  function speedText(v, T) {
    if (v === "max") { return (T && T.max) || "max"; }
    var n = Number(v);
    return (n >= 10 ? n.toFixed(0) : n.toFixed(n % 1 ? 1 : 0)) + "×";
  }

  function bucket(u) {
    if (!(u > 0.01)) { return 0; }
    var i = 1 + Math.floor(Math.min(u, 0.9999) * 5);
    return Math.min(i, 5);
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    twin: {
      status: function (st, token, btnIds, loadIds) {
        var fillN = function (n, v) { var a = []; for (var i = 0; i < n; i++) { a.push(v); } return a; };
        var n = (btnIds || []).length, nl = (loadIds || []).length;
        var fill = function (v) { return fillN(n, v); };
        if (!st) {
          return ["connecting", "state-pill state-wait", "–", "–", "", "", "Pause", "", "", "",
                  fill("pill"), false, false, false, false, fill(false), fillN(nl, "pill"), fillN(nl, false), "",
                  {}, {display: "none"}, {}];
        }
        var T = st.text || {};                  // the words in the viewer's language (twin.ui.polling)
        window.twinFacts = {scenario: st.scenario, deployment: st.deployment, seed: st.seed,   // export.js
                            sim_time: st.sim_time, text: T, run: st.run, paused: st.paused};   // twin.cli.lecture
        var w = function (k, en) { return T[k] || en; };
        var unlocked = token && token.ok;
        var locked = !!(st.locked && st.shared && !unlocked);
        var state, cls;
        if (st.message && st.paused) { state = w("stopped", "stopped"); cls = "state-pill state-bad"; }
        else if (st.paused) { state = w("paused", "paused"); cls = "state-pill state-paused"; }
        else { state = w("live", "live"); cls = "state-pill state-live"; }
        var set = speedText(st.speed, T);
        var speed = st.paused ? (w("speed", "speed") + " " + set) :
          (w("speed", "speed") + " " + set + " · " + w("achieved", "achieved") + " " +
           (st.achieved > 0 ? speedText(st.achieved, T) : "…"));
        var twin = st.shared ? w("shared", "Shared twin") +
                               (st.locked ? " · " + (unlocked ? w("instructor", "instructor") : w("locked", "locked")) : "")
                             : w("sandbox", "Private sandbox") + " " + st.key;
        var scen = w("scenario", "scenario") + " " + st.scenario + " · " + w("seed", "seed") + " " + st.seed +
          " · " + (st.deployment || "") + (st.trace ? " · " + w("trace", "trace") + " " + st.trace : "") +
          (st.load !== null && st.load !== undefined ? " · " + w("load", "load") + " " + Math.round(st.load * 100) + "%" : "");
        var lockNote = "";
        if (locked) {
          lockNote = w("lockNote", "Shared controls are locked by the instructor. Enter the instructor token under " +
            "\u201cScenario & twin\u201d, or open a private sandbox to experiment.");
        }
        if (st.note) { lockNote = (lockNote ? lockNote + " " : "") + st.note; }
        if (st.message) { lockNote = (lockNote ? lockNote + " " : "") + st.message; }
        var acts = st.actions || [];
        var lines = acts.map(function (a) {
          return a.when + "  t=" + fmtTime(a.sim_time, T) + "  " + a.who + ": " + a.what + (a.ok ? "" : "  " + w("failed", "(failed)"));
        });
        var log = st.shared ? (lines.length ? lines.join("\n") : w("noActions", "no actions yet"))
                            : w("private", "Your private sandbox: actions are not shared.");
        var last = st.shared && acts.length ? (acts[0].when + " " + acts[0].who + ": " + acts[0].what) : "";
        var active = st.speed === "max" ? "max" : String(Math.round(Number(st.speed)));
        var classes = (btnIds || []).map(function (id) {
          return "pill" + (id.index === active ? " pill-active" : "");
        });
        var showSandbox = st.shared ? {} : {display: "none"};
        var showShared = st.shared ? {display: "none"} : {};
        var showToken = st.shared && st.locked ? {} : {display: "none"};
        var trace = st.workload === "trace";
        var loadNow = (st.load !== null && st.load !== undefined) ? String(Math.round(st.load * 100)) : "";
        var loadClasses = (loadIds || []).map(function (id) {
          return "pill" + (!trace && id.index === loadNow ? " pill-active" : "");
        });
        var loadOff = locked || trace;
        var loadTitle = trace ? w("traceLoad", "This scenario replays a trace with its own arrival times: load is set " +
          "by the trace (pick a synthetic scenario such as bursty-chat to change it)") :
          w("loadTitle", "Offered load as a fraction of the deployment's capacity");
        return [state, cls, "t = " + fmtTime(st.sim_time, T), speed, twin, scen,
                st.paused ? "\u25B6 " + w("play", "Play") : "\u275A\u275A " + w("pause", "Pause"), lockNote, log, last,
                classes, locked, locked, locked, loadOff, fill(locked),
                loadClasses, fillN(nl, loadOff), loadTitle,
                showSandbox, showShared, showToken];
      },

      signedIn: function (token) {
        var hide = {display: "none"}, on = !!(token && token.ok);
        return [on ? hide : {}, on ? hide : {}, on ? {} : hide];
      },

      secret: function (_ts, data) {
        if (data) { return NU(); }
        var b = new Uint8Array(24);
        window.crypto.getRandomValues(b);
        return btoa(String.fromCharCode.apply(null, b)).replace(/\+/g, "-").replace(/\//g, "_");
      },

      viewerId: function (_ts, data) {
        if (data) { return NU(); }
        return "v" + Math.random().toString(36).slice(2, 6);
      },

      navActive: function (path, ids) {
        return (ids || []).map(function (id) {
          var p = id.index;
          var on = (path === p) || (p !== "/" && path && path.indexOf(p) === 0);
          return "nav-link" + (on ? " nav-active" : "");
        });
      },

      strips: function (d) {
        var figs = Array.prototype.slice.call(arguments, 1);
        if (!d || !d.y) { return figs.map(NU); }
        return figs.map(function (fig, c) {
          if (!fig || !fig.data || !fig.data.length) { return NU(); }
          var data = fig.data.map(function (tr, i) {
            var ys = (d.y[c] || [])[i];
            if (!ys || !d.x.length) { return tr; }
            return Object.assign({}, tr, {x: (tr.x || []).concat(d.x).slice(-d.keep),
                                          y: (tr.y || []).concat(ys).slice(-d.keep)});
          });
          var layout = d.shapes ? Object.assign({}, fig.layout, {shapes: d.shapes, annotations: d.notes})
                                : fig.layout;
          if (d.yaxes && d.yaxes[c]) {   // a robust chart's clipped range and the title saying so
            layout = Object.assign({}, layout, {yaxis: Object.assign({}, layout.yaxis, d.yaxes[c])});
          }
          return {data: data, layout: layout};
        });
      },

      topo: function (live, elements, viewName) {
        if (!live || !elements || !live.u || live.view !== viewName) { return NU(); }
        elements = portrait(elements);
        var down = {}, part = {}, ndown = {}, nfail = {}, slow = {};
        (live.down || []).forEach(function (j) { down[j] = true; });
        (live.part || []).forEach(function (j) { part[j] = true; });
        (live.ndown || []).forEach(function (i) { ndown[i] = true; });
        (live.nfail || []).forEach(function (p) { nfail[p[0]] = p[1]; });   // faulty parts in or touching it
        (live.slow || []).forEach(function (p) { slow[p[0]] = p[1]; });     // slowest speed kept in it (gray)
        return elements.map(function (el) {
          var d = el.data || {};
          if (d.k === undefined || d.kind === "rack") { return el; }
          var out = Object.assign({}, el);
          var data = Object.assign({}, d);
          var cls;
          if (d.source !== undefined) {
            var u = live.u[d.k] || 0;
            data.util = Math.min(u, 1);
            cls = "p-" + d.plane + " u" + bucket(u) + (down[d.k] ? " down" : "") + (part[d.k] ? " part" : "");
          } else {
            var nu = (live.n || [])[d.k] || 0;
            data.util = nu;
            var pool = live.pool ? live.pool[d.k] : "";
            cls = "k-" + d.kind + " u" + bucket(nu) + (pool ? " pool-" + pool : "") + (ndown[d.k] ? " down" : "") +
              (nfail[d.k] ? " npart" : "") + (slow[d.k] !== undefined ? " slow" : "");
            // a failed part: a marker before its label; a group with faulty parts: their count after it;
            // a slow part (or a group with one): the fraction of its speed kept
            data.flabel = ndown[d.k] ? "\u2715 " + d.label : nfail[d.k] ? d.label + " \u2715" + nfail[d.k] :
              slow[d.k] !== undefined ? d.label + " \u00d7" + slow[d.k] : d.label;
          }
          out.data = data;
          out.classes = cls;
          return out;
        });
      }
    }
  });
})();
