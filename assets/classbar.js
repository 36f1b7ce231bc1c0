/* Clientside callbacks of the class bar (twin/ui/classbar.py): no network round trip.
 *  sync   - from the status every viewer already polls: the class state store (only when the
 *           lecturer moved; for the lecturer also when the count changed), the count, the bar's
 *           visibility, body.class-following (a student's screen: twin/ui/classbar.py); a following
 *           browser moves to the lecturer's page, step (or plan, before the first step) and presenter mode
 *  focus  - a follower: the live number the step's question is about scrolled into view (twin/ui/classbar.py)
 *  follow - the Follow / Stop following buttons
 *  pub    - while this tab leads: where it is (page, lesson, step or plan, presenter) for the server to publish
 */
(function () {
  "use strict";
  var NU = function () { return window.dash_clientside.no_update; };
  var HIDE = {display: "none"};

  function target(c) {      // a step's page; before the first step, the plan's page (the class's lobby)
    if (!c.lesson) { return c.plan ? "/lessons?plan=" + c.plan : c.page; }
    return c.page === "/lessons" ? "/lessons?lesson=" + c.lesson + "&step=" + c.step : c.page;
  }

  function here() {       // this page as the lecturer's target names it (no lang)
    var p = new URLSearchParams(window.location.search);
    p.delete("lang");
    var q = p.toString();
    return window.location.pathname + (q ? "?" + q : "");
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    classbar: {
      sync: function (st, follow, lead, cur) {
        var c = st && st["class"];
        if (!c) { return [NU(), NU(), NU(), NU(), NU(), NU(), NU()]; }
        var following = !!(follow && follow.on), leading = !!(lead && lead.on);
        var prev = cur || {};
        var trig = (window.dash_clientside.callback_context.triggered || []).map(function (t) { return t.prop_id; });
        var joined = trig.indexOf("class-follow.data") >= 0 || trig.indexOf("class-lead.data") >= 0;
        var moved = c.rev !== prev.rev || joined;
        var cls = !c.leading ? "class-bar teach-hidden" : leading ? "class-bar class-on class-lead" :
          following ? "class-bar class-on" : "class-bar class-idle";
        document.body.classList.toggle("class-following", !!(c.leading && following && !leading));
        var btns = [(c.leading && !following && !leading) ? {} : HIDE, (c.leading && following) ? {} : HIDE];
        var count = c.q ? String(c.n) : "–";
        var state = (moved || (leading && c.n !== prev.n)) ? c : NU();
        if (!(following && !leading && c.leading && moved)) {
          return [state, count, cls].concat(btns, [NU(), NU()]);
        }
        document.body.classList.toggle("presenter", !!c.presenter);
        var to = target(c);
        if (here() !== to) {     // as dcc.Link navigates: the app's pages follow, no reload
          window.history.pushState({}, "", to);
          window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
        }
        return [state, count, cls].concat(btns, [{lesson: c.lesson, step: c.step}, {on: !!c.presenter}]);
      },

      focus: function (sel) {       // a follower: the step's live number into view once its page drew it
        var tries = 0;
        function look() {
          var el = sel && document.querySelector(sel);
          if (el && el.textContent.trim()) {
            var r = el.getBoundingClientRect(), bar = document.getElementById("class-bar");
            var bottom = bar ? Math.min(window.innerHeight, bar.getBoundingClientRect().top) : window.innerHeight;
            if (r.top < 0 || r.top + Math.min(r.height, 60) > bottom) {
              window.scrollBy(0, r.top - Math.max(120, (bottom - Math.min(r.height, bottom)) / 2));
            }
          } else if (sel && tries++ < 40) { setTimeout(look, 250); }
        }
        look();
        return NU();
      },

      follow: function () {
        var trig = (window.dash_clientside.callback_context.triggered || [])[0];
        return {on: !!(trig && trig.prop_id === "class-follow-btn.n_clicks")};
      },

      pub: function (path, search, step, presenter, lead, cur) {
        if (!(lead && lead.on)) { return NU(); }
        var p = new URLSearchParams(search || "");
        var lesson = null, n = null, plan = null;
        if (path === "/lessons" && p.get("lesson")) { lesson = p.get("lesson"); n = Number(p.get("step") || 1); }
        else if (path === "/lessons" && p.get("plan")) { plan = p.get("plan"); }
        else if (step && step.lesson) { lesson = step.lesson; n = step.step; }
        var out = {lesson: lesson, step: n, plan: plan, page: path, presenter: !!(presenter && presenter.on)};
        var trig = (window.dash_clientside.callback_context.triggered || []).map(function (t) { return t.prop_id; });
        if (trig.indexOf("class-lead.data") >= 0) { out.at = Date.now(); }      // (re)start leading: publish again
        else if (cur && cur.lesson === out.lesson && cur.step === out.step && cur.page === out.page &&
                 cur.plan === out.plan && cur.presenter === out.presenter) { return NU(); }
        return out;
      }
    }
  });
})();
