// The page's last resort: a classic script (no imports, nothing to fail to fetch) that
// says so when the page's module never ran. A module whose import fails (a link cut
// mid-file, a proxy that drops a request) runs nothing at all: the badge would say
// "connecting…" for ever. Module scripts run before the window's load event, so if
// viewer.js has not started by then, it is not going to.
window.addEventListener("load", () => {
  if (window.ahpViewerStarted) return;
  const badge = document.getElementById("connection");
  if (badge) {
    badge.textContent = "failed: the page's scripts did not load (reload to try again)";
    badge.className = "badge closed";
  }
});
