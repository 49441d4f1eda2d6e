/* One clock on every page: each <time class="local-time" datetime="…"> the server wrote (the
 * local_time template tag, in UTC) is shown in the browser's zone with its offset
 * ("2026-11-27 21:50:39 UTC+01:00"), UTC on hover, as the live pages write their own times
 * (format.js). base.html loads it on every page; a part of a page fetched again
 * (live-section.js) is localized before it is compared or swapped in.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  // How much of "2026-11-27 21:50:39" each precision keeps.
  const LENGTH = { second: 19, minute: 16 };

  /* Rewrite every server time in ``root`` (an element or the document) in the browser's zone. */
  function localize(root) {
    root.querySelectorAll("time.local-time[datetime]").forEach(function (el) {
      const ms = Date.parse(el.getAttribute("datetime"));
      if (ms !== ms) return; // not a time: left as the server wrote it
      const ts = ms / 1000;
      const shown = F.localDateTime(ts).slice(0, LENGTH[el.dataset.precision] || LENGTH.second);
      el.textContent = shown + " " + F.utcOffset(new Date(ms));
      el.title = F.utcTime(ts);
    });
  }

  localize(document);
  window.GpulseLocalTime = { localize: localize };
})();
