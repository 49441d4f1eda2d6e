/* Rows a server-rendered table holds back: the /usage/ tables' rows past the first 25 wait in a
 * <template> in their tbody (parsed, but never styled or laid out) and are moved into the table,
 * a batch at a time, while the browser is idle. Laid out with the page, By job's 100 rows were
 * most of its first layout (issue 18, docs/PERFORMANCE.md).
 */
(function () {
  "use strict";

  const BATCH = 25;
  const WAIT_AT_MOST_MS = 1000; // a page kept busy still gets its rows
  const idle = window.requestIdleCallback || function (work) { return setTimeout(work, 50); };

  function fill(template) {
    const rows = template.content;
    const tbody = template.parentNode;
    function next() {
      for (let k = 0; k < BATCH && rows.firstElementChild; k++) tbody.insertBefore(rows.firstElementChild, template);
      if (rows.firstElementChild) idle(next, { timeout: WAIT_AT_MOST_MS });
      else template.remove();
    }
    idle(next, { timeout: WAIT_AT_MOST_MS });
  }

  document.querySelectorAll("template.later-rows").forEach(fill);
})();
