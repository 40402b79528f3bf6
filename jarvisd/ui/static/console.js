// The console's only script (no inline script: the CSP forbids it). It opens the
// page's server-sent event stream and puts the server's fragments in place: the
// server escaped every value in them, so they are inserted as HTML.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const url = document.body.dataset.sse;
  if (!url) return;
  const source = new EventSource(url);
  const put = (id, html, append) => {
    const el = document.getElementById(id);
    if (!el) return;
    if (append) el.insertAdjacentHTML("beforeend", html); else el.innerHTML = html;
  };
  source.addEventListener("ev", (e) => {
    const events = document.getElementById("events");
    if (events && events.querySelector('[data-seq="' + e.lastEventId + '"]')) return;
    put("events", e.data, true);
  });
  source.addEventListener("state", (e) => put("status", e.data, false));
  source.addEventListener("rows", (e) => put("rows", e.data, false));
  source.addEventListener("line", (e) => put("progress", e.data, true));
  source.addEventListener("end", () => source.close());
});
