/* The overview's heatmap of every GPU: one Plotly heatmap trace whose z is
 * restyled in place each frame, an outline on every fault (a lost GPU, an Xid,
 * uncorrected ECC errors, a firing alert, a down node's GPUs), and our own
 * tooltip, which follows the pointer and refreshes with every frame.
 * A cell can also be picked (select(), by heatmap-input.js: the keyboard or a
 * tap): a box marks it and the tooltip stays on it, both following its node and
 * GPU through reorders and frames.
 * A node whose bandwidth probe is low, or whose health verdict is degraded or
 * failing, is flagged on its row label. Rows are in name order, or with
 * view.order "problems" the nodes with the most faults first.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const FLAG = window.GpulseFrames.FLAG;
  const FAULT = window.GpulseFrames.FAULT;
  const V = window.GpulseVerdict;
  // Health mode: z is the verdict's level (0 healthy, 1 degraded, 2 failing); each
  // cell also says it in words, and the row label marks the node.
  const LEVEL_NAMES = ["healthy", "degraded", "failing"];
  const LEVEL_TEXT = ["", "DEGR", "FAIL"];
  // Usage mode: z is 0 not allocated, 1 allocated and busy, 2 allocated but idle (frame flags
  // ALLOCATED and IDLE, gpulse/usage.py); idle cells say so in words too.
  const USAGE_NAMES = ["not allocated", "busy (allocated)", "idle (allocated)"];
  const USAGE_TEXT = ["", "", "IDLE"];

  // Rows shorter than this get no numbers in the cells, only the fault outlines.
  const COMPACT_ROW_PX = 18;
  // However many nodes, a row stays this tall: a 3-px line hides one hot GPU or a dead node.
  const MIN_ROW_PX = 6;
  const FAULT_COLOUR = "#d1242f";
  const MAX_ROW_LABELS = 16;
  const NODATA_COLOUR = "#c3c9d1";
  const PLOT_CONFIG = { displaylogo: false, displayModeBar: false, responsive: true, scrollZoom: false };
  const SCALES = {
    util: [[0, "#f4f8fd"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
    temp: [[0, "#ffffcc"], [0.35, "#fed976"], [0.6, "#fd8d3c"], [0.8, "#e31a1c"], [1, "#800026"]],
    power: [[0, "#fcfbfd"], [0.3, "#dadaeb"], [0.6, "#9e9ac8"], [0.8, "#6a51a3"], [1, "#3f007d"]],
    mem: [[0, "#f7fcf5"], [0.3, "#c7e9c0"], [0.6, "#74c476"], [0.8, "#238b45"], [1, "#00441b"]],
    // Steps, not a gradient: light green, amber, dark red (white text on it; failing
    // against healthy over 3:1), and the verdict's word in every unhealthy cell.
    health: [[0, "#d5f2dd"], [0.25, "#d5f2dd"], [0.25, "#f59e0b"], [0.75, "#f59e0b"], [0.75, "#b42318"], [1, "#b42318"]],
    // Steps: light grey (free, unlike the hatched no-data grey), green, amber (the warning colour).
    usage: [[0, "#eef0f3"], [0.25, "#eef0f3"], [0.25, "#74c476"], [0.75, "#74c476"], [0.75, "#f59e0b"], [1, "#f59e0b"]],
  };

  function rowPixels(n) {
    if (n <= 24) return 34;
    return Math.max(MIN_ROW_PX, Math.min(22, 880 / n));
  }

  function tagText(flags) {
    if (flags & FLAG.LOST) return "LOST";
    const tags = [];
    if (flags & FLAG.ALERT) tags.push("ALERT");
    if (flags & FLAG.XID) tags.push("XID");
    if (flags & FLAG.ECC) tags.push("ECC");
    if (flags & FLAG.THROTTLED) tags.push("THR");
    return tags.join(" ");
  }

  /* The heatmap of ``model`` (GpulseCluster) in els.heatmap, coloured by
   * view.metric; onOpen(name) is called when a GPU is clicked. */
  function create(model, view, els, onOpen) {
    const cells = model.cells;
    const rows = model.rows;
    const dirty = { layout: true, cells: false, labels: true, dots: true };
    // Rows on screen: z and cellText are in display order; order[p] is the model row shown at p, at[r] where row r is.
    let order = [];
    let at = new Int32Array(0);
    let orderVersion = 0; // counts reorders, so the row labels are sent again
    let z = [];
    let cellText = []; // rows of strings, empty in compact layouts
    let spec = metricSpec();
    let drawn = false;
    let labelSignature = "";
    let dotSignature = "";
    let hoverMouse = null; // where the tooltip was asked for, to refresh its values each frame
    // The picked cell: {name, g, p (its last row on screen, for when its node goes), touch (a tap picked it)}.
    let picked = null;
    let lastPointer = "mouse"; // the kind of pointer pressed last: a click opens a node, a tap does not

    function isCompact() {
      return rowPixels(model.names.length) < COMPACT_ROW_PX;
    }

    function metricSpec() {
      switch (view.metric) {
        case "temp":
          return { label: "Temperature", unit: "°C", zmin: 25, zmax: 95, value: function (i) { return cells.temp[i]; } };
        case "power":
          if (view.powerScale === "watts") {
            return { label: "Power", unit: "W", zmin: 0, zmax: maxPowerLimit(), value: function (i) { return cells.power[i]; } };
          }
          return {
            label: "Power", unit: "% of limit", zmin: 0, zmax: 100,
            value: function (i) { return (100 * cells.power[i]) / cells.powerLimit[i]; },
          };
        case "health":
          return {
            label: "Health", unit: "", zmin: 0, zmax: 2, minLabel: "healthy", maxLabel: "failing",
            value: function (i) {
              if (!cells.present[i]) return NaN;
              const level = V.LEVEL[rows.health[Math.floor(i / model.cols)].verdict];
              return level === undefined ? NaN : level; // unknown: no data
            },
            cellText: function (v) { return LEVEL_TEXT[v]; },
            valueText: function (v) { return LEVEL_NAMES[v]; },
          };
        case "usage":
          return {
            label: "Usage", unit: "", zmin: 0, zmax: 2, minLabel: "not allocated", maxLabel: "idle",
            value: function (i) {
              if (!cells.present[i] || rows.status[Math.floor(i / model.cols)] === "down") return NaN;
              const flags = cells.flags[i];
              if (flags & FLAG.LOST) return NaN;
              return !(flags & FLAG.ALLOCATED) ? 0 : flags & FLAG.IDLE ? 2 : 1;
            },
            cellText: function (v) { return USAGE_TEXT[v]; },
            valueText: function (v, i) {
              // Allocated without a utilization: no verdict, as the alert metric gives none.
              return v === 1 && cells.util[i] !== cells.util[i] ? "allocated, utilization not reported" : USAGE_NAMES[v];
            },
          };
        case "mem":
          return {
            label: "Memory used", unit: "%", zmin: 0, zmax: 100,
            value: function (i) { return (100 * cells.memUsed[i]) / cells.memTotal[i]; },
          };
        default:
          return { label: "Utilization", unit: "%", zmin: 0, zmax: 100, value: function (i) { return cells.util[i]; } };
      }
    }

    function maxPowerLimit() {
      let max = 0;
      if (!cells.powerLimit) return 700;
      for (let i = 0; i < cells.powerLimit.length; i++) if (cells.powerLimit[i] > max) max = cells.powerLimit[i];
      return max || 700;
    }

    /* The model was laid out anew: size z and the cell text to it. */
    function laidOut() {
      const n = model.names.length;
      z = new Array(n);
      // Text in the cells only where rows are tall enough to read it (small clusters).
      cellText = isCompact() ? [] : new Array(n);
      for (let r = 0; r < n; r++) {
        z[r] = new Array(model.cols).fill(null);
        if (!isCompact()) cellText[r] = new Array(model.cols).fill("");
      }
      order = model.names.map(function (_, r) { return r; });
      at = Int32Array.from(order);
      dirty.layout = true;
    }

    /* With view.order "problems", put the nodes with the most faults first (then by name, as
     * the model's rows are); move only row references, and only when the order changed. */
    function reorder() {
      const next = model.names.map(function (_, r) { return r; });
      if (view.order === "problems") {
        const problems = rows.problems;
        next.sort(function (a, b) { return problems[b] - problems[a] || a - b; });
      }
      let same = true;
      for (let p = 0; p < next.length && same; p++) same = next[p] === order[p];
      if (same) return;
      const byRow = [], textByRow = [];
      order.forEach(function (r, p) { byRow[r] = z[p]; textByRow[r] = cellText[p]; });
      next.forEach(function (r, p) {
        z[p] = byRow[r];
        if (cellText.length) cellText[p] = textByRow[r];
        at[r] = p;
      });
      order = next;
      orderVersion += 1;
      dirty.cells = dirty.labels = dirty.dots = true;
    }

    /* Recompute one heatmap row: its colour values, and in roomy layouts its cell text. */
    function rowChanged(r) {
      const cols = model.cols;
      const line = z[at[r]];
      const value = spec.value;
      const text = cellText[at[r]];
      const down = rows.status[r] === "down";
      for (let g = 0; g < cols; g++) {
        const i = r * cols + g;
        const v = value(i);
        const known = v === v && isFinite(v); // NaN and ±Inf: no data
        line[g] = known ? Math.round(v * 10) / 10 : null;
        if (text) {
          const flags = cells.flags[i];
          const tags = down || !flags ? "" : tagText(flags);
          const shown = !known ? "" : spec.cellText ? spec.cellText(v) : Math.round(v);
          text[g] = flags & FLAG.LOST ? tags : shown + (tags ? "<br>" + tags : "");
        }
      }
      dirty.cells = dirty.labels = dirty.dots = true;
    }

    /* The metric or its scale changed: recolour every row. */
    function recolour() {
      spec = metricSpec();
      for (let r = 0; r < model.names.length; r++) rowChanged(r);
      dirty.layout = true; // colour scale, range and colour bar title change too
    }

    function heatTrace() {
      const compact = isCompact();
      const x = [];
      for (let g = 0; g < model.cols; g++) x.push(g);
      return {
        type: "heatmap",
        z: z.slice(),
        x: x,
        y: model.names.map(function (_, r) { return r; }),
        zmin: spec.zmin,
        zmax: spec.zmax,
        colorscale: SCALES[view.metric] || SCALES.util,
        hoverinfo: "none",
        hoverongaps: true,
        // One image pixel per GPU, scaled up sharply by gpulse.css (image-rendering:
        // pixelated): without zsmooth, Plotly would set that in a style attribute,
        // which the Content-Security-Policy refuses.
        zsmooth: "fast",
        // Cell text: the value, and under it the tags of a flagged GPU (Plotly picks
        // a text colour that contrasts with each cell). Tiny rows get dots instead.
        text: compact ? undefined : cellText.slice(),
        texttemplate: compact ? "" : "%{text}",
        textfont: { size: 11 },
        // The colour scale is drawn in HTML (showScale): a Plotly colour bar is redrawn every frame.
        showscale: false,
      };
    }

    /* Where the faults are: every GPU of a down node, and each GPU with a FAULT flag. */
    function faultCells() {
      const x = [], y = [];
      const cols = model.cols;
      for (let p = 0; p < order.length; p++) {
        const r = order[p];
        if (!rows.problems[r]) continue;
        const down = rows.status[r] === "down";
        for (let g = 0; g < cols; g++) {
          const i = r * cols + g;
          if (!cells.present[i] || !(down || cells.flags[i] & FAULT)) continue;
          x.push(g);
          y.push(p);
        }
      }
      return { x: x, y: y };
    }

    /* An outline on each fault, in two traces: a white halo under a red square, so it
     * shows on every colour of every scale, and sized to stand out of the smallest rows. */
    function outlineTraces(faults) {
      const size = Math.min(30, Math.max(10, rowPixels(model.names.length) + 4));
      return [["#ffffff", 4], [FAULT_COLOUR, 2]].map(function (style) {
        return {
          type: "scatter", mode: "markers", x: faults.x, y: faults.y, hoverinfo: "skip",
          marker: { symbol: "square-open", size: size, color: style[0], line: { width: style[1], color: style[0] } },
        };
      });
    }

    function rowLabels() {
      const n = model.names.length;
      // Plotly measures every tick label on each redraw, so big clusters get a few
      // labels (the tooltip names every node) rather than one per dozen pixels.
      const every = Math.max(1, Math.ceil(12 / rowPixels(n)), Math.ceil(n / MAX_ROW_LABELS));
      const vals = [], text = [];
      for (let p = 0; p < n; p += every) {
        vals.push(p);
        const r = order[p];
        const status = rows.status[r];
        const probe = rows.probe[r];
        const verdict = rows.health[r].verdict;
        // Node names are the node's to choose: escaped, or Plotly renders their tags.
        text.push(F.plotlyText(model.names[r]) + (status === "up" ? "" : status === "down" ? "  ✕ down" : "  ⚠ stale") +
          (probe && probe.low ? "  ⚠ probe" : "") + (verdict === "failing" ? "  ✖ failing" : verdict === "degraded" ? "  ⚠ degraded" : ""));
      }
      return { vals: vals, text: text };
    }

    /* White lines between cells (drawn rather than gaps, so only empty cells show the hatch)
     * and a wash over stale rows. */
    function cellShapes() {
      const shapes = [];
      const n = model.names.length;
      const cols = model.cols;
      if (!isCompact()) {
        const line = { color: "#ffffff", width: 2 };
        for (let g = 1; g < cols; g++) {
          shapes.push({ type: "line", xref: "x", yref: "y", x0: g - 0.5, x1: g - 0.5, y0: -0.5, y1: n - 0.5, line: line, layer: "above" });
        }
        for (let r = 1; r < n; r++) {
          shapes.push({ type: "line", xref: "x", yref: "y", x0: -0.5, x1: cols - 0.5, y0: r - 0.5, y1: r - 0.5, line: line, layer: "above" });
        }
      }
      for (let p = 0; p < n; p++) {
        if (rows.status[order[p]] !== "stale") continue;
        shapes.push({
          type: "rect", xref: "x", yref: "y", x0: -0.5, x1: cols - 0.5, y0: p - 0.5, y1: p + 0.5,
          fillcolor: "rgba(255,255,255,0.55)", line: { width: 0 }, layer: "above",
        });
      }
      return shapes;
    }

    // Plotly's default for a linear axis hides labels that stick out of the div, and checks it
    // by measuring every label once per label drawn: a quarter of each redraw's time at 2,000
    // GPUs (issue 18). The labels here stay inside (the y axis makes room for them): no check.
    const TICK_LABELS_INSIDE = "allow";

    function heatLayout(labels) {
      const n = model.names.length;
      const plotHeight = Math.max(n, 1) * rowPixels(n);
      const ticks = [];
      for (let g = 0; g < model.cols; g++) ticks.push("GPU " + g);
      return {
        height: Math.max(160, plotHeight + 40),
        margin: { l: 8, r: 8, t: 28, b: 8 },
        font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11, color: "#1f2933" },
        paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: NODATA_COLOUR,
        xaxis: {
          tickvals: ticks.map(function (_, g) { return g; }), ticktext: ticks, side: "top",
          range: [-0.5, model.cols - 0.5], showgrid: false, zeroline: false, fixedrange: true, ticks: "",
          ticklabeloverflow: TICK_LABELS_INSIDE,
        },
        yaxis: {
          tickvals: labels.vals, ticktext: labels.text, range: [n - 0.5, -0.5], showgrid: false, zeroline: false,
          fixedrange: n <= 64, ticks: "", automargin: true, ticklabelstandoff: 6, ticklabeloverflow: TICK_LABELS_INSIDE,
        },
        shapes: cellShapes(),
        showlegend: false,
        dragmode: n <= 64 ? false : "zoom",
      };
    }

    function showScale() {
      const stops = (SCALES[view.metric] || SCALES.util).map(function (stop) { return stop[1] + " " + stop[0] * 100 + "%"; });
      els.scaleBar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
      els.scaleMin.textContent = spec.minLabel || spec.zmin + " " + spec.unit;
      els.scaleMax.textContent = spec.maxLabel || spec.zmax + " " + spec.unit;
    }

    function draw() {
      spec = metricSpec(); // the power scale in W follows the largest limit, known from meta
      showScale();
      const labels = rowLabels();
      labelSignature = orderVersion + "|" + labels.text.join("|");
      const faults = faultCells();
      dotSignature = faults.x.join(",") + "|" + faults.y.join(",");
      Plotly.react(els.heatmap, [heatTrace()].concat(outlineTraces(faults)), heatLayout(labels), PLOT_CONFIG);
      if (!drawn) {
        drawn = true;
        els.heatmap.on("plotly_click", function (event) {
          if (lastPointer === "touch") return; // a tap previews first (heatmap-input.js)
          const cell = event.event ? cellAt(event.event) : null;
          if (cell) onOpen(model.names[cell.r]);
        });
      }
    }

    /* Send Plotly only what changed: z every frame; labels and tags when they differ. */
    function update() {
      const layoutUpdate = {};
      const traceUpdate = { z: [z.slice()] };
      if (dirty.labels) {
        const labels = rowLabels();
        const signature = orderVersion + "|" + labels.text.join("|");
        if (signature !== labelSignature) {
          labelSignature = signature;
          layoutUpdate["yaxis.ticktext"] = labels.text;
          layoutUpdate["yaxis.tickvals"] = labels.vals;
          layoutUpdate.shapes = cellShapes();
        }
      }
      if (!isCompact()) traceUpdate.text = [cellText.slice()];
      Plotly.update(els.heatmap, traceUpdate, layoutUpdate, [0]);
      if (dirty.dots) {
        const faults = faultCells();
        const signature = faults.x.join(",") + "|" + faults.y.join(",");
        if (signature !== dotSignature) {
          dotSignature = signature;
          Plotly.restyle(els.heatmap, { x: [faults.x, faults.x], y: [faults.y, faults.y] }, [1, 2]);
        }
      }
    }

    /* Draw what changed since the last render; true if the layout was drawn anew. */
    function render() {
      reorder();
      const relaid = dirty.layout;
      if (dirty.layout) draw();
      else if (dirty.cells) update();
      dirty.layout = dirty.cells = dirty.labels = dirty.dots = false;
      if (picked) showPicked();
      if (hoverMouse) showTooltip(hoverMouse);
      return relaid;
    }

    /* The cell under the mouse, from its own position: Plotly's hover data lags
     * behind fast moves, and a click must open the node that is under the pointer. */
    function cellAt(mouse) {
      const full = els.heatmap._fullLayout;
      const box = els.heatmap.getBoundingClientRect();
      const p = Math.round(full.yaxis.p2l(mouse.clientY - box.top - full._size.t));
      const g = Math.round(full.xaxis.p2l(mouse.clientX - box.left - full._size.l));
      if (p < 0 || p >= model.names.length || g < 0 || g >= model.cols) return null;
      const r = order[p];
      return { p: p, r: r, g: g, i: r * model.cols + g };
    }

    /* The cell of node ``name``'s GPU ``g`` where it is on screen now, or null. */
    function cellOf(name, g) {
      const r = model.rowOf.get(name);
      if (r === undefined || g >= model.cols) return null;
      return { p: at[r], r: r, g: g, i: r * model.cols + g };
    }

    /* The cell ``dp`` rows and ``dg`` columns from the picked one (or the first cell), kept inside the heatmap. */
    function cellFrom(dp, dg) {
      const n = model.names.length;
      if (!n || !model.cols) return null;
      const from = picked ? cellOf(picked.name, picked.g) : null;
      const p = Math.max(0, Math.min(n - 1, (from ? from.p : 0) + dp));
      const g = Math.max(0, Math.min(model.cols - 1, (from ? from.g : 0) + dg));
      return { p: p, r: order[p], g: g, i: order[p] * model.cols + g };
    }

    /* Mark ``cell`` (null: none) as picked, its tooltip with an "Open node" link when a tap picked it;
     * the text of its tooltip, for a live region to say. */
    function select(cell, touch) {
      picked = cell ? { name: model.names[cell.r], g: cell.g, p: cell.p, touch: Boolean(touch) } : null;
      const preview = Boolean(picked && touch);
      els.tooltip.classList.toggle("pinned", preview);
      els.tooltipOpen.hidden = !preview;
      if (preview) els.tooltipOpen.href = F.nodeUrl(picked.name);
      if (!picked) {
        els.focusBox.hidden = true;
        if (!hoverMouse) els.tooltip.hidden = true;
        return "";
      }
      hoverMouse = null;
      return showPicked().map(function (part) {
        return typeof part === "string" ? part : part.tagName === "BR" ? ". " : part.textContent;
      }).join("");
    }

    /* Draw the box on the picked cell and, unless the pointer has the tooltip, the tooltip beside it:
     * the node and GPU it was, where they are now; if the node went, the cell now in its place.
     * The tooltip's parts, if it drew them. */
    function showPicked() {
      if (!drawn || !model.names.length) {
        els.focusBox.hidden = els.tooltip.hidden = true;
        return [];
      }
      let cell = cellOf(picked.name, picked.g);
      if (!cell) {
        const p = Math.min(picked.p, model.names.length - 1);
        cell = { p: p, r: order[p], g: Math.min(picked.g, model.cols - 1) };
        cell.i = cell.r * model.cols + cell.g;
        picked.name = model.names[cell.r];
        picked.g = cell.g;
      }
      picked.p = cell.p;
      const full = els.heatmap._fullLayout;
      const x0 = full._size.l + full.xaxis.l2p(cell.g - 0.5), x1 = full._size.l + full.xaxis.l2p(cell.g + 0.5);
      const y0 = full._size.t + full.yaxis.l2p(cell.p - 0.5), y1 = full._size.t + full.yaxis.l2p(cell.p + 0.5);
      const box = els.focusBox.style;
      box.left = Math.min(x0, x1) + "px";
      box.top = Math.min(y0, y1) + "px";
      box.width = Math.abs(x1 - x0) + "px";
      box.height = Math.abs(y1 - y0) + "px";
      els.focusBox.hidden = false;
      if (hoverMouse) return []; // the pointer's tooltip stays where the pointer is
      const plot = els.heatmap.getBoundingClientRect();
      return placeTooltip(cell, plot.left + Math.max(x0, x1) - 6, plot.top + Math.max(y0, y1) - 6);
    }

    function showTooltip(mouse) {
      if (mouse.pointerType === "touch") return; // a tap picks a cell (heatmap-input.js)
      const cell = drawn ? cellAt(mouse) : null;
      if (!cell) return hideTooltip();
      hoverMouse = { clientX: mouse.clientX, clientY: mouse.clientY };
      placeTooltip(cell, mouse.clientX + 14, mouse.clientY + 14);
    }

    /* Fill the tooltip with ``cell``'s readings and put it at (x, y), inside the window; its parts. */
    function placeTooltip(cell, x, y) {
      const parts = describeCell(cell);
      els.tooltipText.replaceChildren.apply(els.tooltipText, parts);
      els.tooltip.hidden = false;
      const box = els.tooltip.getBoundingClientRect();
      els.tooltip.style.left = Math.max(4, Math.min(x, window.innerWidth - box.width - 8)) + "px";
      els.tooltip.style.top = Math.max(4, Math.min(y, window.innerHeight - box.height - 8)) + "px";
      return parts;
    }

    function hideTooltip(event) {
      if (event && event.pointerType === "touch") return;
      hoverMouse = null;
      if (picked) showPicked();
      else els.tooltip.hidden = true;
    }

    /* An element holding ``text`` as text. */
    function span(tag, className, text) {
      const el = document.createElement(tag);
      if (className) el.className = className;
      el.textContent = text;
      return el;
    }

    /* The tooltip's nodes: lines of text and spans, never markup built from values. */
    function describeCell(cell) {
      const parts = [];
      const line = function () {
        if (parts.length) parts.push(document.createElement("br"));
        for (let k = 0; k < arguments.length; k++) parts.push(arguments[k]);
      };
      const status = rows.status[cell.r];
      const i = cell.i;
      line(span("b", "", model.names[cell.r] + " · GPU " + cell.g));
      if (cells.model[i]) line(cells.model[i]);
      if (!cells.present[i]) {
        line("no GPU " + cell.g + " on this node");
        return parts;
      }
      if (status === "down") {
        line(span("span", "status-down", "node down"), ": no data since " + F.clockTime(rows.ts[cell.r]));
        return parts;
      }
      const flags = cells.flags[i];
      if (flags & FLAG.LOST) {
        line(span("span", "status-down", "LOST"), ": fell off the bus, no readings");
        return parts;
      }
      const v = z[cell.p][cell.g];
      const valueText = v === null ? "not reported" : spec.valueText ? spec.valueText(v, i) : F.fixed(v, 0) + " " + spec.unit;
      line(spec.label + ": ", span("b", "", valueText));
      line("util " + F.fixed(cells.util[i], 0) + " % · " + F.fixed(cells.temp[i], 0) + " °C");
      line("power " + F.fixed(cells.power[i], 0) + " / " + F.fixed(cells.powerLimit[i], 0) + " W");
      line("memory " + F.fixed(cells.memUsed[i] / 1024, 1) + " / " + F.fixed(cells.memTotal[i] / 1024, 1) + " GiB");
      if (status === "stale") line(span("span", "status-stale", "stale"), ": sample from " + F.clockTime(rows.ts[cell.r]));
      const tags = [];
      if (flags & FLAG.ALERT) tags.push("alert firing");
      if (flags & FLAG.XID) tags.push("Xid error");
      if (flags & FLAG.ECC) tags.push("uncorrected ECC errors");
      if (flags & FLAG.THROTTLED) tags.push("thermal or hardware slowdown");
      if (tags.length) line(span("span", "status-stale", tags.join(", ")));
      const health = rows.health[cell.r];
      if (health.verdict === "failing" || health.verdict === "degraded") {
        line(span("span", health.verdict === "failing" ? "status-down" : "status-stale", health.verdict), ": " + (health.reason || "no reason given"));
        if (health.action) line("→ " + health.action);
      }
      const probe = rows.probe[cell.r];
      if (probe && probe.low) line(span("span", "status-down", "probe LOW"), ": " + window.GpulseCluster.describeProbe(probe));
      return parts;
    }

    // Our own hover, from the pointer's position: the tooltip follows the mouse
    // exactly and its numbers refresh with every frame.
    els.heatmap.addEventListener("pointerdown", function (event) { lastPointer = event.pointerType; }, true);
    els.heatmap.addEventListener("pointermove", showTooltip);
    els.heatmap.addEventListener("pointerleave", hideTooltip);

    return {
      laidOut: laidOut, rowChanged: rowChanged, recolour: recolour, render: render,
      cellAt: cellAt, cellOf: cellOf, cellFrom: cellFrom, select: select,
      picked: function () { return picked; },
      open: function (cell) { onOpen(model.names[cell.r]); },
    };
  }

  window.GpulseHeatmap = { create: create };
})();
