/* The overview's node table: sortable by any column, filtered by name, the
 * first TABLE_MAX_ROWS rows in sort order (the filter finds any other node).
 * Built as DOM nodes with text, never as markup from the values nodes send;
 * each node keeps its row, and only cells whose content changed are replaced.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const V = window.GpulseVerdict;
  const TABLE_MAX_ROWS = 200;
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

    /* The cells after the name, built afresh; updateRow keeps those that show the same. */
    function valueCells(row) {
      const r = row.r;
      const down = row.status === "down";
      return [
        statusCell(row),
        healthCell(row),
        F.element("td", "num", (down ? "no data " : "") + F.age(row.age)),
        gpuCell(row),
        F.element("td", "num", down ? "—" : F.fixed(row.util, 1)),
        F.element("td", "num", down ? "—" : F.fixed(row.temp, 0)),
        F.element("td", "num", down ? "—" : F.fixed(row.power, 0)),
        F.element("td", "num", down ? "—" : F.fixed(row.mem / 1024, 0) + " / " + F.fixed(rows.memTotal[r] / 1024, 0)),
        probeCell(rows.probe[r]),
      ];
    }

    // node name -> its <tr>, kept across renders: rows are updated in place, so the
    // link a keyboard user is on keeps its focus while frames arrive.
    const rowElements = new Map();

    function rowElement(name) {
      let tr = rowElements.get(name);
      if (!tr) {
        tr = F.element("tr");
        tr.dataset.node = name;
        const link = F.element("a", "", name);
        link.href = nodeUrl(name);
        const nameCell = F.element("td");
        nameCell.append(link);
        tr.append(nameCell);
        rowElements.set(name, tr);
      }
      return tr;
    }

    function updateRow(row) {
      const tr = rowElement(row.name);
      const className = "row-" + row.status;
      if (tr.className !== className) tr.className = className;
      valueCells(row).forEach(function (td, k) {
        const old = tr.cells[k + 1];
        if (!old) tr.append(td);
        else if (!old.isEqualNode(td)) tr.replaceChild(td, old);
      });
      return tr;
    }

    function render() {
      const list = tableRows();
      const shown = Math.min(list.length, TABLE_MAX_ROWS);
      const focused = document.activeElement;
      const tbody = els.tbody;
      // Put the rows in order, moving only those out of place.
      let next = tbody.firstChild;
      for (let k = 0; k < shown; k++) {
        const tr = updateRow(list[k]);
        if (tr === next) next = next.nextSibling;
        else tbody.insertBefore(tr, next);
      }
      while (next) {
        const after = next.nextSibling;
        tbody.removeChild(next);
        next = after;
      }
      // A forgotten node's row goes for good.
      rowElements.forEach(function (tr, name) {
        if (!model.rowOf.has(name)) rowElements.delete(name);
      });
      // A row that moved (a new sort order) lost the focus: give it back.
      if (focused && focused !== document.activeElement && tbody.contains(focused)) focused.focus({ preventScroll: true });
      const total = model.names.length;
      const matching = list.length === total ? total + " nodes" : list.length + " of " + total + " nodes";
      els.nodeCount.textContent = shown < list.length ? matching + ", first " + shown + " shown: sort or filter to see others" : matching;
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

    /* Sort by ``key`` (a column's, or "problems": the nodes with the most faults first). */
    function sortBy(key, dir) {
      view.sortKey = key;
      view.sortDir = dir;
      markSortedHeader();
      render();
    }

    return { render: render, sortBy: sortBy, maxRows: TABLE_MAX_ROWS };
  }

  window.GpulseNodeTable = { create: create };
})();
