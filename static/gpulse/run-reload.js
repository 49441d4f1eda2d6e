// A fabric sweep's or a GPU check run's page while it runs: load it again every few seconds, so each
// round's pairs or node's results and, at the end, the outcome show without a reload by hand.
"use strict";

(() => {
  if (!document.getElementById("run-active")) return;
  setTimeout(() => location.reload(), 3000);
})();
