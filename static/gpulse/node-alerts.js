/* The node page's Alerts section, live: fetched again every REFRESH_MS from the URL in its
 * data-refresh (the alerts app renders it with the template the page was rendered with) and
 * swapped in when it changed. node.js then marks the firing GPUs and draws the thresholds
 * the fresh section carries ("gpulse:node-alerts").
 * A poll, not the node's socket: alerts change at the evaluator's pace, and two small queries
 * (the active alerts, by the indexed status; the enabled rules) every few seconds cost less
 * than sending alert state with every sample.
 */
(function () {
  "use strict";

  const REFRESH_MS = 5000;

  async function refresh() {
    const current = document.getElementById("node-alerts");
    if (document.hidden || !current) return;
    const response = await fetch(current.dataset.refresh, { credentials: "same-origin", cache: "no-store" });
    // Logged out meanwhile: show the login page rather than a section that silently stopped.
    if (response.redirected) {
      window.location.reload();
      return;
    }
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("node-alerts");
    // Unchanged: left alone, so a link in it keeps the keyboard's focus.
    if (!fresh || fresh.isEqualNode(current)) return;
    current.replaceWith(fresh);
    document.dispatchEvent(new CustomEvent("gpulse:node-alerts"));
  }

  // A failed fetch (server restarting, network gone) leaves the section as it is; the next one tries again.
  setInterval(function () { refresh().catch(function () {}); }, REFRESH_MS);
})();
