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
  const S = window.GpulseLiveSection;

  async function refresh() {
    const current = document.getElementById("node-alerts");
    if (document.hidden || !current) return;
    const fresh = await S.fetchPart(current.dataset.refresh, "node-alerts");
    // Unchanged: left alone, so a link in it keeps the keyboard's focus.
    if (!fresh || fresh.isEqualNode(current)) return;
    current.replaceWith(fresh);
    document.dispatchEvent(new CustomEvent("gpulse:node-alerts"));
  }

  S.every(REFRESH_MS, refresh);
})();
