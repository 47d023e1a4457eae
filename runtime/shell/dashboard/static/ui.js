// atomic-agent dashboard: the only script. Everything works without it; with it,
// (1) the page's main part refreshes when memory changes (an event stream from the
// daemon), unless you are typing in it, (2) forms marked data-confirm ask first, and
// (3) buttons marked data-copy copy a text (a new app's token).
// No inline script, no remote code (the Content-Security-Policy allows neither).
"use strict";
(function () {
  function refresh() {
    var main = document.getElementById("main");
    if (!main || !main.hasAttribute("data-live")) return;
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return;
    fetch(location.href, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (!html) return;
      var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
      if (fresh) main.replaceChildren.apply(main, Array.from(fresh.childNodes));
      document.body.dataset.refreshed = String(Date.now());
    }).catch(function () {});
  }
  document.addEventListener("click", function (e) {
    var id = e.target && e.target.dataset ? e.target.dataset.copy : null;
    var node = id ? document.getElementById(id) : null;
    if (node && navigator.clipboard) {
      navigator.clipboard.writeText(node.textContent.trim()).then(function () {
        e.target.textContent = "Copied";
      }, function () {});
    }
  });
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      e.preventDefault();
    }
  });
  if (window.EventSource && document.getElementById("main") &&
      document.getElementById("main").hasAttribute("data-live")) {
    var timer = null;
    var events = new EventSource("/ui/events");
    events.addEventListener("memory", function () {
      clearTimeout(timer);
      timer = setTimeout(refresh, 300);  // one refresh for a burst of changes
    });
    document.body.dataset.live = "1";
  }
})();
