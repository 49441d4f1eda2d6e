/* A part of a page rendered on the server, kept live by fetching the page again: the alerts
 * page's rule groups (alerts.js) and the node page's Alerts section (node-alerts.js). Its times
 * are shown as base.html's local-time.js shows the page's.
 */
(function () {
  "use strict";

  /* The element with ``id`` in the page at ``url`` as the server renders it now, or null when
   * the answer is no such page. Logged out meanwhile: the page is reloaded to show the login
   * page, rather than a part that silently stopped. */
  async function fetchPart(url, id) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (response.redirected) {
      window.location.reload();
      return null;
    }
    if (!response.ok) return null;
    const part = new DOMParser().parseFromString(await response.text(), "text/html").getElementById(id);
    // Its times in the browser's zone, as the part on the page is: else an unchanged part never
    // compares equal to the one shown.
    if (part) window.GpulseLocalTime.localize(part);
    return part;
  }

  /* refresh() every ``ms``. A failed fetch (server restarting, network gone) leaves the page as
   * it is; the next one tries again. */
  function every(ms, refresh) {
    setInterval(function () { refresh().catch(function () {}); }, ms);
  }

  window.GpulseLiveSection = { fetchPart: fetchPart, every: every };
})();
