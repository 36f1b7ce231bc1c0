/* Clientside callbacks of the teaching shell (twin/ui/teach.py): pure view transforms.
 *  langSync  - the language toggle's links keep the current page and query, with lang replaced;
 *              <html lang> follows the language of the URL or the cookie
 *  presenter - toggle presenter mode (large type) and keep it in local storage
 */
(function () {
  "use strict";
  var LANGS = ["en", "zh"];

  function cookieLang() {
    var m = document.cookie.match(/(?:^|;\s*)twin_lang=([a-z]+)/);
    return m && LANGS.indexOf(m[1]) >= 0 ? m[1] : "en";
  }

  function withLang(search, code) {
    var p = new URLSearchParams(search || "");
    p.set("lang", code);
    return "?" + p.toString();
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    teach: {
      langSync: function (search, pathname) {
        var p = new URLSearchParams(search || "");
        var lang = LANGS.indexOf(p.get("lang")) >= 0 ? p.get("lang") : cookieLang();
        document.documentElement.lang = lang;
        var path = pathname || "/";
        return [path + withLang(search, "en"), path + withLang(search, "zh")];
      },
      presenter: function (n, data) {
        var on = !!(data && data.on === true);
        var trig = window.dash_clientside.callback_context.triggered;
        if (n && trig && trig.length && trig[0].prop_id === "teach-presenter-btn.n_clicks") { on = !on; }
        document.body.classList.toggle("presenter", on);
        return [{ on: on }, on ? "pill pill-active" : "pill"];
      }
    }
  });
})();
