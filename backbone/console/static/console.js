// Auto-refresh for the console's pages: every sampling interval, fetch the page again and swap its main
// part in place (charts included, as they are drawn on the server). Pages work without this script; it is
// only a convenience. It pauses while the operator types in a form or selects text.
(function () {
  "use strict";
  var body = document.body;
  var interval = Math.max(1000, parseInt(body.getAttribute("data-refresh-ms"), 10) || 10000);

  function busy() {
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    var selection = window.getSelection && window.getSelection();
    return selection && selection.toString().length > 0;
  }

  function refresh() {
    var main = document.getElementById("main");
    if (!main || !main.hasAttribute("data-refresh") || busy() || document.hidden) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
      .then(function (response) {
        if (response.redirected || !response.ok) return null;
        return response.text();
      })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (fresh && !busy()) {
          main.innerHTML = fresh.innerHTML;
          body.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () { /* the next tick tries again */ });
  }

  window.setInterval(refresh, interval);
})();
