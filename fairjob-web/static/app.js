// fairjob dashboard: live refresh of each page's `[data-live]` part, and
// confirmations for destructive actions. The dashboard's own code, no
// dependencies. The server sets the interval (body[data-refresh]) and
// refuses refreshes faster than its minimum (429).
(function () {
  "use strict";
  var KEY = "fairjob-live";

  function liveOn() {
    return window.localStorage.getItem(KEY) !== "off";
  }

  function label(button) {
    button.textContent = liveOn() ? "Live: on" : "Live: off";
    button.setAttribute("aria-pressed", liveOn() ? "true" : "false");
  }

  function selecting(el) {
    // Do not replace a list while the operator is ticking entries in it.
    return el.querySelector("input[type=checkbox]:checked") !== null ||
      el.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
  }

  function refresh(el) {
    if (!liveOn() || document.hidden || selecting(el)) return;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "live");
    fetch(url.toString(), { credentials: "same-origin", headers: { "X-Fairjob-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !selecting(el)) {
          el.innerHTML = html;
          var stamp = document.getElementById("refreshed");
          if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
        }
      })
      .catch(function () { /* keep the last view; try again next tick */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var every = parseInt(document.body.getAttribute("data-refresh") || "5", 10) * 1000;
    var button = document.getElementById("live-toggle");
    if (button) {
      label(button);
      button.addEventListener("click", function () {
        window.localStorage.setItem(KEY, liveOn() ? "off" : "on");
        label(button);
      });
    }
    document.querySelectorAll("[data-live]").forEach(function (el) {
      window.setInterval(function () { refresh(el); }, Math.max(every, 1000));
    });
    document.addEventListener("change", function (e) {
      var t = e.target;
      if (t.matches && t.matches("input[data-select-all]")) {
        var form = t.closest("form");
        form.querySelectorAll("input[name=key]").forEach(function (box) { box.checked = t.checked; });
      }
    });
    document.addEventListener("submit", function (e) {
      var button = e.submitter;
      var message = (button && button.getAttribute("data-confirm")) || e.target.getAttribute("data-confirm");
      if (message && !window.confirm(message)) e.preventDefault();
    });
  });
})();
