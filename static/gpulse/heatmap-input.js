/* Picking a heatmap cell without a mouse (issue 18): the keyboard and a phone's taps.
 *
 * Keyboard: the heatmap is one tab stop. Arrow keys move the picked cell (node row ×
 * GPU column), Home/End go to the row's first and last GPU, PageUp/PageDown ten rows;
 * Enter opens the node, Escape lets go of the cell. A polite live region says the cell
 * once per move, never on a frame: a screen reader is not read every number every second.
 * Touch: a first tap on a cell previews it (its tooltip, with an "Open node" link); the
 * link or a second tap on the same cell opens the node, a tap anywhere else closes it.
 * A mouse keeps heatmap.js's hover and click.
 */
(function () {
  "use strict";

  const PAGE_ROWS = 10;
  const TAP_SLOP_PX = 10; // a finger that moved further scrolled or zoomed: not a tap
  const MOVES = {
    ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
    PageUp: [-PAGE_ROWS, 0], PageDown: [PAGE_ROWS, 0],
  };

  /* Keys and taps on els.heatmap for ``heatmap`` (GpulseHeatmap); els.said is the live region. */
  function attach(heatmap, els) {
    let touchStart = null;
    let left = null; // the cell the keyboard was on when focus left, picked again when it comes back

    function pick(cell, touch) {
      els.said.textContent = heatmap.select(cell, touch);
      // Arrow keys do not scroll the page (a tall heatmap of many nodes): the picked cell does.
      if (cell && !touch) els.focusBox.scrollIntoView({ block: "nearest", inline: "nearest" });
    }

    els.heatmap.addEventListener("focus", function () {
      // A click focuses the heatmap too: only focus from the keyboard picks a cell.
      if (heatmap.picked() || !els.heatmap.matches(":focus-visible")) return;
      pick((left && heatmap.cellOf(left.name, left.g)) || heatmap.cellFrom(0, 0), false);
    });
    els.heatmap.addEventListener("blur", function () {
      const picked = heatmap.picked();
      if (!picked || picked.touch) return;
      left = { name: picked.name, g: picked.g };
      pick(null);
    });
    els.heatmap.addEventListener("keydown", function (event) {
      if (event.altKey || event.metaKey) return;
      const picked = heatmap.picked();
      let cell = null;
      if (MOVES[event.key]) cell = heatmap.cellFrom(MOVES[event.key][0], MOVES[event.key][1]);
      else if (event.key === "Home") cell = heatmap.cellFrom(event.ctrlKey ? -Infinity : 0, -Infinity);
      else if (event.key === "End") cell = heatmap.cellFrom(event.ctrlKey ? Infinity : 0, Infinity);
      else if (event.key === "Enter" && picked) cell = heatmap.cellFrom(0, 0);
      else if (event.key === "Escape" && picked) {
        event.preventDefault();
        left = null;
        pick(null);
        return;
      } else return;
      event.preventDefault(); // the keys move the cell, not the page
      if (!cell) return;
      if (event.key === "Enter") heatmap.open(cell);
      else pick(cell, false);
    });

    els.heatmap.addEventListener("pointerdown", function (event) {
      touchStart = event.pointerType === "touch" ? { x: event.clientX, y: event.clientY } : null;
    }, true);
    els.heatmap.addEventListener("pointerup", function (event) {
      if (!touchStart || event.pointerType !== "touch") return;
      const moved = Math.hypot(event.clientX - touchStart.x, event.clientY - touchStart.y);
      touchStart = null;
      if (moved > TAP_SLOP_PX) return;
      const cell = heatmap.cellAt(event);
      const picked = heatmap.picked();
      const previewed = picked && picked.touch ? heatmap.cellFrom(0, 0) : null;
      if (cell && previewed && previewed.r === cell.r && previewed.g === cell.g) heatmap.open(cell);
      else pick(cell, true);
    }, true);
    // A tap outside the heatmap and its preview closes the preview.
    document.addEventListener("pointerdown", function (event) {
      const picked = heatmap.picked();
      if (!picked || !picked.touch || els.heatmap.contains(event.target) || els.tooltip.contains(event.target)) return;
      pick(null);
    }, true);
  }

  window.GpulseHeatmapInput = { attach: attach };
})();
