// A fabric sweep's page while its rounds run: load it again every few seconds, so each
// round's pairs and, at the end, the matrix show without a reload by hand.
"use strict";

(() => {
  if (!document.getElementById("sweep-active")) return;
  setTimeout(() => location.reload(), 3000);
})();
