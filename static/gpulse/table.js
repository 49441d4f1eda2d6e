/* The overview's node table: sortable by any column, filtered by name, every
 * matching node in its scroll box, but only the rows in or near the box's view
 * drawn (the table's margins stand in for the others, as Grafana's table panel
 * does). Built as DOM nodes with text, never as markup from the values nodes
 * send; each node keeps its row, and only cells whose content changed are
 * touched. Rows are made at most NEW_ROWS_A_FRAME an animation frame.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const V = window.GpulseVerdict;
  // Rows drawn above and below the box's view, so a scroll or a Tab lands on drawn rows. Only
  // drawn rows are laid out and painted: with 100 drawn, a re-sort each second by a column that
  // changes took 53-80 ms at 2,000 GPUs, most of it layout and paint of moved rows (issue 18).
  const OVERSCAN = 8;
  // Rows drawn before one has been measured: about a box's view of them.
  const FIRST_DRAWN = 30;
  // The first 200 rows made, laid out and painted at once took one task of 60-195 ms at
  // 2,000 GPUs (issue 18): they are made this many an animation frame.
  const NEW_ROWS_A_FRAME = 40;
  const STATUS_RANK = { down: 0, stale: 1, up: 2 };

  const nodeUrl = F.nodeUrl;


  /* The table of ``model`` (GpulseCluster) in els.table, sorted and filtered by ``view``. */
  function create(model, view, els) {
    const rows = model.rows;

    function tableRows() {
      const now = F.serverClock.now();
      const filter = view.filter;
      const list = [];
      for (let r = 0; r < model.names.length; r++) {
        const name = model.names[r];
        if (filter && name.toLowerCase().indexOf(filter) < 0) continue;
        list.push({
          r: r,
          name: name,
          status: rows.status[r],
          health: V.RANK[rows.health[r].verdict],
          age: now - rows.ts[r],
          gpus: rows.gpus[r],
          util: rows.utilN[r] ? rows.utilSum[r] / rows.utilN[r] : NaN,
          temp: rows.maxTemp[r],
          power: rows.reporting[r] ? rows.power[r] : NaN,
          mem: rows.reporting[r] ? rows.memUsed[r] : NaN,
          probe: rows.probe[r] ? F.numberOrNaN(rows.probe[r].busbw) : NaN,
          problems: rows.problems[r],
        });
      }
      const key = view.sortKey, dir = view.sortDir;
      list.sort(function (a, b) {
        let d;
        if (key === "name") d = F.compareNames(a.name, b.name);
        else if (key === "status") d = (STATUS_RANK[a.status] || 0) - (STATUS_RANK[b.status] || 0);
        else {
          const x = a[key], y = b[key];
          if (x !== x || y !== y) return (x !== x) - (y !== y); // no data sorts last either way
          d = x - y;
        }
        return d * dir || F.compareNames(a.name, b.name);
      });
      return list;
    }

    function gpuCell(row) {
      const td = F.element("td", "num");
      const r = row.r;
      if (row.status === "down") {
        td.textContent = row.gpus || "—";
        return td;
      }
      td.append(String(rows.reporting[r]));
      if (rows.lost[r]) td.append(" ", F.element("span", "status-down", "(" + rows.lost[r] + " lost)"));
      if (rows.reporting[r] + rows.lost[r] < row.gpus) td.append(" / " + row.gpus);
      return td;
    }

    function probeCell(probe) {
      if (!probe) {
        const empty = F.element("td", "num muted", "—");
        empty.title = "No bandwidth probe yet";
        return empty;
      }
      const td = F.element("td", "num", probe.status === "succeeded" ? F.fixed(F.numberOrNaN(probe.busbw), 1) : String(probe.status));
      td.title = window.GpulseCluster.describeProbe(probe);
      if (probe.low) td.append(" ", F.element("b", "tag tag-alert", "LOW"));
      return td;
    }

    function statusCell(row) {
      const td = F.element("td");
      td.append(F.element("span", "status status-" + row.status, row.status));
      const skew = rows.skew[row.r];
      if (skew === skew) {
        const badge = F.element("b", "tag warn-text", "clock skew " + F.skew(skew));
        badge.title = "This node's clock is " + F.age(Math.abs(skew)) + (skew < 0 ? " behind" : " ahead of") +
          " gpulse's: its samples are placed at the time they arrived";
        td.append(" ", badge);
      }
      return td;
    }

    /* The verdict as a badge, the reason and action in its title. */
    function healthCell(row) {
      const td = F.element("td");
      td.append(V.badge(rows.health[row.r]));
      return td;
    }

    // Each cell after the name: what it shows, as a string (its key), and the cell that shows
    // it. A row keeps its cells while their keys stay the same; a cell of text alone takes its
    // new text in place. Building every cell of 200 rows each second to compare them with the
    // shown ones cost more than the comparison saved (issue 18).
    function textCell(text) {
      return { key: text, text: true, build: function () { return F.element("td", "num", text); } };
    }

    /* The mean utilization of the node's GPUs not in MIG mode: NVML reports none for a GPU in MIG mode
     * (its instances' SM activity is on the heatmap and the node page), so a node of MIG GPUs alone reads
     * "MIG", not a "—" that looks like missing data. */
    function utilSpec(row) {
      const mig = rows.mig[row.r];
      if (!mig) return textCell(F.fixed(row.util, 1));
      const text = row.util === row.util ? F.fixed(row.util, 1) : "MIG";
      const title = (mig > 1 ? mig + " GPUs in MIG mode, which report" : "1 GPU in MIG mode, which reports") + " no utilization" +
        (row.util === row.util ? ", not in this mean" : "") + ": see SM activity on the heatmap or the node page";
      return {
        key: text + " " + mig,
        build: function () {
          const td = F.element("td", row.util === row.util ? "num" : "num muted", text);
          td.title = title;
          return td;
        },
      };
    }

    function cellSpecs(row) {
      const r = row.r;
      const down = row.status === "down";
      const skew = rows.skew[r];
      const probe = rows.probe[r];
      const health = rows.health[r];
      return [
        { key: row.status + (skew === skew ? F.skew(skew) : ""), build: function () { return statusCell(row); } },
        { key: V.describe(health), build: function () { return healthCell(row); } },
        textCell((down ? "no data " : "") + F.age(row.age)),
        { key: down ? "down " + row.gpus : rows.reporting[r] + " " + rows.lost[r] + " " + row.gpus,
          build: function () { return gpuCell(row); } },
        down ? textCell("—") : utilSpec(row),
        textCell(down ? "—" : F.fixed(row.temp, 0)),
        textCell(down ? "—" : F.fixed(row.power, 0)),
        textCell(down ? "—" : F.fixed(row.mem / 1024, 0) + " / " + F.fixed(rows.memTotal[r] / 1024, 0)),
        { key: probe ? window.GpulseCluster.describeProbe(probe) + (probe.low ? " LOW" : "") : "",
          build: function () { return probeCell(probe); } },
      ];
    }

    // node name -> its row: the <tr> and the keys of its cells, kept across renders (drawn or
    // not). Rows are updated in place, so the link a keyboard user is on keeps its focus while
    // frames arrive.
    const rowElements = new Map();
    let renderQueued = false; // a render in the next animation frame, which makes the rows due
    // The scroll box: where its view is, from its scroll and resize events, and the height of a
    // drawn row, from the drawn rows' size once laid out: a render reads no layout.
    const box = els.table.closest(".table-wrap");
    const boxView = { top: box.scrollTop, height: box.clientHeight };
    let rowHeight = 0; // px; 0 until rows have been drawn and laid out
    let gapHeight = 0; // px, of the gap row while it is drawn

    function rowElement(name) {
      let entry = rowElements.get(name);
      if (!entry) {
        const tr = F.element("tr");
        tr.dataset.node = name;
        const link = F.element("a", "", name);
        link.href = nodeUrl(name);
        const nameCell = F.element("td");
        nameCell.append(link);
        tr.append(nameCell);
        entry = { tr: tr, keys: [], rowIndex: "" };
        rowElements.set(name, entry);
      }
      return entry;
    }

    /* The row of ``row``, the list's ``k``th, up to date. */
    function updateRow(row, k) {
      const entry = rowElement(row.name);
      const tr = entry.tr;
      const rowIndex = String(k + 2); // aria-rowindex counts from 1, the header row first
      if (entry.rowIndex !== rowIndex) tr.setAttribute("aria-rowindex", (entry.rowIndex = rowIndex));
      const className = "row-" + row.status;
      if (tr.className !== className) tr.className = className;
      cellSpecs(row).forEach(function (spec, k) {
        if (entry.keys[k] === spec.key) return;
        const old = tr.cells[k + 1];
        if (!old) tr.append(spec.build());
        else if (spec.text) old.textContent = spec.key;
        else tr.replaceChild(spec.build(), old);
        entry.keys[k] = spec.key;
      });
      return tr;
    }

    /* The indexes into ``at`` of a longest increasing run of its values (-1: none), in order. */
    function longestRun(at) {
      const tails = []; // tails[n]: the index ending the best run of length n + 1 so far
      const before = new Array(at.length);
      for (let k = 0; k < at.length; k++) {
        if (at[k] < 0) continue;
        let lo = 0, hi = tails.length;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (at[tails[mid]] < at[k]) lo = mid + 1;
          else hi = mid;
        }
        before[k] = lo > 0 ? tails[lo - 1] : -1;
        tails[lo] = k;
      }
      const run = new Array(tails.length);
      for (let n = tails.length - 1, k = tails[n]; n >= 0; n--, k = before[k]) run[n] = k;
      return run;
    }

    /* Make ``trs`` tbody's rows, in that order. The rows that keep their relative order (the
     * longest run of them) stay where they are and only the others move: a moved row is laid out
     * and painted again, and a re-sort each second by a column that changes moved nearly every
     * row when each out of place moved the ones after it (issue 18). */
    function placeRows(tbody, trs) {
      const wanted = new Set(trs);
      const at = new Map();
      for (let tr = tbody.firstChild, next; tr; tr = next) {
        next = tr.nextSibling;
        if (wanted.has(tr)) at.set(tr, at.size);
        else tbody.removeChild(tr);
      }
      const stays = new Set(longestRun(trs.map(function (tr) { return at.has(tr) ? at.get(tr) : -1; })));
      let anchor = null;
      for (let k = trs.length - 1; k >= 0; k--) {
        if (!stays.has(k)) tbody.insertBefore(trs[k], anchor);
        anchor = trs[k];
      }
    }

    // Stands in for the rows between the focused row and the drawn ones when the box is scrolled
    // away from it: the focused row stays drawn, so the keyboard's place is kept.
    const gapRow = F.element("tr", "row-gap");
    gapRow.setAttribute("aria-hidden", "true");
    gapRow.append(F.element("td"));
    gapRow.cells[0].colSpan = els.table.querySelectorAll("thead th").length;

    function gap(rows) {
      gapHeight = rows * rowHeight;
      if (gapRow.style.height !== gapHeight + "px") gapRow.style.height = gapHeight + "px";
      return gapRow;
    }

    function queueRender() {
      if (renderQueued) return;
      renderQueued = true;
      requestAnimationFrame(function () {
        renderQueued = false;
        render();
      });
    }

    box.addEventListener("scroll", function () {
      boxView.top = box.scrollTop;
      queueRender();
    }, { passive: true });
    // Called after layout, so reading sizes here costs no layout of its own. A render follows only
    // when the box's height or a row's changed: a render that changes the drawn rows calls it too.
    const sized = new ResizeObserver(function () {
      const drawn = els.tbody.rows.length - (gapRow.isConnected ? 1 : 0);
      const height = drawn ? (els.tbody.offsetHeight - (gapRow.isConnected ? gapHeight : 0)) / drawn : 0;
      const rowChanged = height && Math.abs(height - rowHeight) > 0.01;
      if (rowChanged) rowHeight = height;
      if (!rowChanged && box.clientHeight === boxView.height) return;
      boxView.height = box.clientHeight;
      queueRender();
    });
    sized.observe(box);
    sized.observe(els.tbody);

    /* The list's rows to draw, [first, last): those in the box's view and OVERSCAN either side. */
    function drawnRange(count) {
      if (!rowHeight) return [0, Math.min(count, FIRST_DRAWN)];
      const size = Math.ceil(boxView.height / rowHeight) + 2 * OVERSCAN;
      const first = Math.max(0, Math.min(Math.floor(boxView.top / rowHeight) - OVERSCAN, count - size));
      return [first, Math.min(count, first + size)];
    }

    function render() {
      const tbody = els.tbody;
      const list = tableRows();
      const focused = document.activeElement;
      const focusedRow = focused && tbody.contains(focused) ? focused.closest("tr[data-node]") : null;
      const range = drawnRange(list.length);
      // The focused row's place in the list (-1: none): drawn apart where it is outside the range.
      const focusedAt = focusedRow ? list.findIndex(function (row) { return row.name === focusedRow.dataset.node; }) : -1;
      // At most NEW_ROWS_A_FRAME rows are made an animation frame, by the render that a frame
      // queued for the next when one is queued; the drawn range ends before the first row not
      // made yet (the bottom margin stands in for it), and the next frame goes on.
      const trs = [];
      let canMake = renderQueued ? 0 : NEW_ROWS_A_FRAME;
      function rowAt(k) {
        return updateRow(list[k], k);
      }
      const above = focusedAt >= 0 && focusedAt < range[0];
      if (above) trs.push(rowAt(focusedAt), gap(range[0] - focusedAt - 1));
      for (let k = range[0]; k < range[1]; k++) {
        if (!rowElements.has(list[k].name)) {
          if (canMake === 0) {
            range[1] = k;
            queueRender();
            break;
          }
          canMake -= 1;
        }
        trs.push(rowAt(k));
      }
      const below = focusedAt >= range[1];
      if (below) trs.push(gap(focusedAt - range[1]), rowAt(focusedAt));
      placeRows(tbody, trs);
      // The rows not drawn, as the table's margins: the box scrolls over every matching node.
      const marginTop = (above ? focusedAt : range[0]) * rowHeight + "px";
      const marginBottom = (list.length - (below ? focusedAt + 1 : range[1])) * rowHeight + "px";
      if (els.table.style.marginTop !== marginTop) els.table.style.marginTop = marginTop;
      if (els.table.style.marginBottom !== marginBottom) els.table.style.marginBottom = marginBottom;
      const rowCount = String(list.length + 1);
      if (els.table.getAttribute("aria-rowcount") !== rowCount) els.table.setAttribute("aria-rowcount", rowCount);
      // A forgotten node's row goes for good.
      rowElements.forEach(function (entry, name) {
        if (!model.rowOf.has(name)) rowElements.delete(name);
      });
      // A row that moved (a new sort order) lost the focus: give it back.
      if (focused && focused !== document.activeElement && tbody.contains(focused)) focused.focus({ preventScroll: true });
      const total = model.names.length;
      els.nodeCount.textContent = list.length === total ? total + " nodes" : list.length + " of " + total + " nodes";
    }

    function markSortedHeader() {
      els.table.querySelectorAll("th[data-key]").forEach(function (th) {
        const sorted = th.dataset.key === view.sortKey;
        th.setAttribute("aria-sort", sorted ? (view.sortDir > 0 ? "ascending" : "descending") : "none");
      });
    }

    // Each header holds a button: a click, Enter or Space sorts, and the button keeps the
    // focus through the renders that follow (they never touch the header).
    els.table.querySelector("thead").addEventListener("click", function (event) {
      const th = event.target.closest("th[data-key]");
      if (!th) return;
      const key = th.dataset.key;
      // Names read best A→Z, status and health worst first; for numbers the largest (hottest, busiest) first.
      const ascending = key === "name" || key === "status" || key === "health";
      view.sortDir = key === view.sortKey ? -view.sortDir : ascending ? 1 : -1;
      view.sortKey = key;
      markSortedHeader();
      render();
    });
    els.tbody.addEventListener("click", function (event) {
      if (event.target.closest("a")) return;
      const tr = event.target.closest("tr[data-node]");
      if (tr) location.href = nodeUrl(tr.dataset.node);
    });
    els.filter.addEventListener("input", function () {
      view.filter = els.filter.value.trim().toLowerCase();
      render();
    });
    markSortedHeader();

    /* Sort by ``key`` (a column's, or "problems": down, failing, degraded, then the most faults first). */
    function sortBy(key, dir) {
      view.sortKey = key;
      view.sortDir = dir;
      markSortedHeader();
      render();
    }

    return { render: render, sortBy: sortBy };
  }

  window.GpulseNodeTable = { create: create };
})();
