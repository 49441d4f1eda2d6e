/* The overview's heatmap of every GPU, painted on a canvas each frame: a cell per
 * GPU coloured by the chosen metric, an outline on every fault (a lost GPU, an Xid,
 * uncorrected ECC errors, a firing alert, a down node's GPUs), row labels and GPU
 * heads as HTML beside it, and a tooltip that follows the pointer and refreshes with
 * every frame. Not Plotly: its heatmap cost 20-45 ms a frame and 110-200 ms to first
 * draw at 2,000 GPUs, mostly axes and tick labels (issue 18); the canvas takes a few.
 * A cell can also be picked (select(), by heatmap-input.js: the keyboard or a
 * tap): a box marks it and the tooltip stays on it, both following its node and
 * GPU through reorders and frames.
 * A node whose bandwidth probe is low, or whose health verdict is degraded or
 * failing, is flagged on its row label. Rows are in name order, or with
 * view.order "problems" the down, failing and degraded nodes first, then those with faults.
 * A GPU in MIG mode is drawn divided into its instances, each as wide as its compute slices
 * (of 7, or of more where its instances add up to more), coloured by its own value where the
 * metric has one per instance (SM activity, memory, usage), else by the GPU's.
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
  // ALLOCATED and IDLE, gpulse/usage.py: by SM activity where the GPU reports it, else utilization);
  // idle cells say so in words too.
  const USAGE_NAMES = ["not allocated", "busy (allocated)", "idle (allocated)"];
  const USAGE_TEXT = ["", "", "IDLE"];
  // A MIG GPU's compute slices (A100 to B200); an instance whose profile names none counts as one.
  const MIG_SLICES = 7;
  // An instance where the metric has no value of its own and the GPU none either (utilization in
  // MIG mode): a plain slate, not the no-data hatch, since the GPU reports, by instance.
  const MIG_FILL = "#d3dae4";

  // Rows shorter than this get no numbers in the cells, only the fault outlines.
  const COMPACT_ROW_PX = 18;
  // However many nodes, a row stays this tall: a 3-px line hides one hot GPU or a dead node.
  const MIN_ROW_PX = 6;
  const FAULT_COLOUR = "#d1242f";
  // A row label's line: rows shorter than this share a label with the next ones.
  const LABEL_LINE_PX = 14;
  const CELL_FONT = "11px system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const CELL_LINE_PX = 13;
  const HATCH_PX = 6;
  const HEAD_MIN_PX = 48; // a GPU column narrower than this is headed by its index alone
  const STALE_WASH = "rgba(255,255,255,0.55)";
  const DARK_INK = "#1f2933";
  const SCALES = {
    util: [[0, "#f4f8fd"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
    temp: [[0, "#ffffcc"], [0.35, "#fed976"], [0.6, "#fd8d3c"], [0.8, "#e31a1c"], [1, "#800026"]],
    power: [[0, "#fcfbfd"], [0.3, "#dadaeb"], [0.6, "#9e9ac8"], [0.8, "#6a51a3"], [1, "#3f007d"]],
    mem: [[0, "#f7fcf5"], [0.3, "#c7e9c0"], [0.6, "#74c476"], [0.8, "#238b45"], [1, "#00441b"]],
    // Oranges, unlike utilization's blues: the two side by side are the stalled loader (blue, pale).
    activity: [[0, "#fff5eb"], [0.25, "#fdd0a2"], [0.5, "#fd8d3c"], [0.75, "#d94801"], [1, "#7f2704"]],
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

  const colourTables = new Map(); // scale -> its 256 colours, RGBA

  /* The scale's colour at 256 even steps from its low end to its high end, RGBA: linear
   * between stops, and a step where two stops share a place. */
  function colourTable(scale) {
    let table = colourTables.get(scale);
    if (table) return table;
    table = new Uint8ClampedArray(256 * 4);
    const stops = scale.map(function (stop) { return [stop[0], F.rgb(stop[1])]; });
    for (let k = 0; k < 256; k++) {
      const t = k / 255;
      let s = 0;
      while (s < stops.length - 2 && t > stops[s + 1][0]) s++;
      const from = stops[s], to = stops[s + 1];
      const f = to[0] > from[0] ? Math.max(0, Math.min(1, (t - from[0]) / (to[0] - from[0]))) : 1;
      for (let c = 0; c < 3; c++) table[4 * k + c] = Math.round(from[1][c] + f * (to[1][c] - from[1][c]));
      table[4 * k + 3] = 255;
    }
    colourTables.set(scale, table);
    return table;
  }

  /* WCAG relative luminance of an sRGB colour. */
  function luminance(r, g, b) {
    const lin = function (c) {
      c /= 255;
      return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  }

  const DARK_INK_LUMINANCE = luminance.apply(null, F.rgb(DARK_INK));

  /* Dark or white text, whichever contrasts more with the cell's colour. */
  function inkOn(r, g, b) {
    const l = luminance(r, g, b);
    return (l + 0.05) / (DARK_INK_LUMINANCE + 0.05) > 1.05 / (l + 0.05) ? DARK_INK : "#ffffff";
  }

  function tagText(flags) {
    if (flags & FLAG.LOST) return "LOST";
    const tags = [];
    if (flags & FLAG.ALERT) tags.push("ALERT");
    if (flags & FLAG.XID) tags.push("XID");
    if (flags & FLAG.ECC) tags.push("ECC");
    if (flags & FLAG.THROTTLED) tags.push("THR");
    if (flags & FLAG.SM_IDLE) tags.push("SM IDLE");
    return tags.join(" ");
  }

  /* The heatmap of ``model`` (GpulseCluster) in els.heatmap, coloured by
   * view.metric; onOpen(name) is called when a GPU is clicked. */
  function create(model, view, els, onOpen) {
    const cells = model.cells;
    const rows = model.rows;
    // size: the first drawing's labels and canvas height are laid out; the canvas is sized and painted next.
    const dirty = { layout: true, size: false, cells: false, labels: true, dots: true };
    // Rows on screen: z and cellText are in display order; order[p] is the model row shown at p, at[r] where row r is.
    let order = [];
    let at = new Int32Array(0);
    let z = [];
    let cellText = []; // rows of strings, empty in compact layouts
    // Per row on screen, in display order: null, or per GPU null or its instances' parts (migParts).
    let zMig = [];
    let spec = metricSpec();
    let geometry = null; // the canvas's size in CSS pixels and its cells', once laid out
    // What was drawn, for the page's tests: z and the cell text
    // in display order, the scale's range, the fault outlines' cells.
    const drawn = (els.heatmap.gpulseDrawn = { z: [], text: [], mig: [], zmin: 0, zmax: 0, faults: { x: [], y: [] } });
    const grid = buildGrid();
    // Read at the first paint, not here: read as the page's scripts run, the computed style
    // took the page's first style pass into the overview's start (issue 18).
    const theme = {};
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
            instanceValue: function (inst) { return !(inst.flags & FLAG.ALLOCATED) ? 0 : inst.flags & FLAG.IDLE ? 2 : 1; },
            value: function (i) {
              if (!cells.present[i] || rows.status[Math.floor(i / model.cols)] === "down") return NaN;
              const flags = cells.flags[i];
              if (flags & FLAG.LOST) return NaN;
              return !(flags & FLAG.ALLOCATED) ? 0 : flags & FLAG.IDLE ? 2 : 1;
            },
            cellText: function (v) { return USAGE_TEXT[v]; },
            valueText: function (v, i) {
              // Allocated without SM activity or utilization: no verdict, as the alert metric gives none.
              const unjudged = cells.util[i] !== cells.util[i] && cells.smActive[i] !== cells.smActive[i];
              return v === 1 && unjudged ? "allocated, neither SM activity nor utilization reported" : USAGE_NAMES[v];
            },
          };
        case "activity":
          // SM activity (frames' sm_active, %): NaN where the GPU does not report it, drawn as no data, never 0.
          return {
            label: "SM activity", unit: "%", zmin: 0, zmax: 100, value: function (i) { return cells.smActive[i]; },
            instanceValue: function (inst) { return inst.smActive; },
          };
        case "mem":
          return {
            label: "Memory used", unit: "%", zmin: 0, zmax: 100,
            value: function (i) { return (100 * cells.memUsed[i]) / cells.memTotal[i]; },
            instanceValue: function (inst) { return (100 * inst.memUsed) / inst.memTotal; },
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
      zMig = new Array(n).fill(null);
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

    /* With view.order "problems", put the worst nodes first (rows.problems; then by name, as
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
      const byRow = [], textByRow = [], migByRow = [];
      order.forEach(function (r, p) { byRow[r] = z[p]; textByRow[r] = cellText[p]; migByRow[r] = zMig[p]; });
      next.forEach(function (r, p) {
        z[p] = byRow[r];
        zMig[p] = migByRow[r];
        if (cellText.length) cellText[p] = textByRow[r];
        at[r] = p;
      });
      order = next;
      dirty.cells = dirty.labels = dirty.dots = true;
    }

    /* Recompute one heatmap row: its colour values, and in roomy layouts its cell text. */
    function rowChanged(r) {
      const cols = model.cols;
      const line = z[at[r]];
      const value = spec.value;
      const text = cellText[at[r]];
      const down = rows.status[r] === "down";
      const mig = rows.mig[r] ? new Array(cols).fill(null) : null;
      zMig[at[r]] = mig;
      for (let g = 0; g < cols; g++) {
        const i = r * cols + g;
        const v = value(i);
        const known = v === v && isFinite(v); // NaN and ±Inf: no data
        line[g] = known ? Math.round(v * 10) / 10 : null;
        const instances = mig && cells.mig[i];
        if (instances) mig[g] = migParts(instances);
        if (text) {
          const flags = cells.flags[i];
          const tags = down || !flags ? "" : tagText(flags);
          // A MIG GPU says so where its own value is not what its instances are coloured by.
          const shown = instances && (!known || spec.instanceValue) ? "MIG ×" + instances.length
            : !known ? "" : spec.cellText ? spec.cellText(v) : Math.round(v);
          text[g] = flags & FLAG.LOST ? tags : shown + (tags ? "\n" + tags : "");
        }
      }
      dirty.cells = dirty.labels = dirty.dots = true;
    }

    /* A MIG GPU's instances as parts of its cell: {from, to} (fractions of its width) and each one's
     * value (rounded as z's), null where the metric has none per instance or the instance none. */
    function migParts(instances) {
      let used = 0;
      instances.forEach(function (inst) { used += inst.slices || 1; });
      const total = Math.max(MIG_SLICES, used);
      let filled = 0;
      return instances.map(function (inst) {
        const from = filled / total;
        filled += inst.slices || 1;
        const v = spec.instanceValue ? spec.instanceValue(inst) : NaN;
        return { from: from, to: filled / total, v: v === v && isFinite(v) ? Math.round(v * 10) / 10 : null };
      });
    }

    /* The metric or its scale changed: recolour every row. */
    function recolour() {
      spec = metricSpec();
      for (let r = 0; r < model.names.length; r++) rowChanged(r);
      dirty.layout = true; // colour scale, range and colour bar title change too
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

    /* The row labels in display order: the node's name (as text, never markup), and its
     * flags. Every row gets one while rows are tall enough to read it, else every few rows
     * (the tooltip names every node). */
    function rowLabels() {
      const n = model.names.length;
      const every = Math.max(1, Math.ceil(LABEL_LINE_PX / rowPixels(n)));
      const labels = [];
      for (let p = 0; p < n; p += every) {
        const r = order[p];
        const status = rows.status[r];
        const probe = rows.probe[r];
        const verdict = rows.health[r].verdict;
        labels.push(model.names[r] + (status === "up" ? "" : status === "down" ? "  ✕ down" : "  ⚠ stale") +
          (probe && probe.low ? "  ⚠ probe" : "") + (verdict === "failing" ? "  ✖ failing" : verdict === "degraded" ? "  ⚠ degraded" : ""));
      }
      return { every: every, text: labels };
    }

    /* The row labels and the GPU column heads, as HTML beside and above the cells. */
    function drawLabels(labels) {
      const n = model.names.length;
      const rowPx = rowPixels(n);
      const kept = grid.rows.children;
      for (let k = 0; k < labels.text.length; k++) {
        let el = kept[k];
        if (!el) el = grid.rows.appendChild(F.element("div", "heat-row-label"));
        // Written only when it differs: labels are checked every frame, and change rarely.
        if (el.textContent !== labels.text[k]) el.textContent = labels.text[k];
        const height = Math.min(labels.every, n - k * labels.every) * rowPx + "px";
        if (el.style.height !== height) el.style.height = height;
      }
      while (kept.length > labels.text.length) grid.rows.lastChild.remove();
      // Each label's line centred on its first row.
      const shift = "translateY(" + (rowPx - LABEL_LINE_PX) / 2 + "px)";
      if (grid.rows.style.transform !== shift) grid.rows.style.transform = shift;
      if (grid.cols.children.length !== model.cols) {
        const heads = [];
        for (let g = 0; g < model.cols; g++) heads.push(F.element("span"));
        grid.cols.replaceChildren.apply(grid.cols, heads);
      }
    }

    /* Each GPU's head: "GPU 3", or "3" where the columns are too narrow for it (a phone). */
    function nameColumns() {
      const prefix = geometry.colPx < HEAD_MIN_PX ? "" : "GPU ";
      Array.from(grid.cols.children).forEach(function (head, g) {
        if (head.textContent !== prefix + g) head.textContent = prefix + g;
      });
    }

    /* The canvas sized to the cells: one row of rowPixels per node, the panel's width. */
    function sizeCanvas() {
      const n = model.names.length;
      const height = canvasHeight();
      grid.canvas.style.height = height + "px";
      const ratio = window.devicePixelRatio || 1;
      const width = grid.canvas.clientWidth;
      geometry = { width: width, height: height, rowPx: rowPixels(n), colPx: width / Math.max(model.cols, 1), ratio: ratio };
      const w = Math.round(width * ratio), h = Math.round(height * ratio);
      if (grid.canvas.width !== w) grid.canvas.width = w;
      if (grid.canvas.height !== h) grid.canvas.height = h;
      nameColumns();
    }

    function canvasHeight() {
      const n = model.names.length;
      return Math.max(n, 1) * rowPixels(n);
    }

    /* Paint every cell: the hatch where there is no data, each value's colour from the
     * scale (one pixel per GPU, scaled up sharp), then the cell text, the lines between
     * roomy cells, the wash over stale rows and the fault outlines. A few milliseconds at
     * 2,000 GPUs. */
    function paint() {
      if (!theme.hatch) readTheme();
      const n = model.names.length, cols = model.cols;
      const ctx = grid.canvas.getContext("2d");
      const geo = geometry;
      ctx.setTransform(geo.ratio, 0, 0, geo.ratio, 0, 0);
      if (!n || !cols) {
        ctx.fillStyle = theme.hatch;
        ctx.fillRect(0, 0, geo.width, geo.height);
        return;
      }
      const colours = colourTable(SCALES[view.metric] || SCALES.util);
      const image = grid.pixels.getContext("2d").createImageData(cols, n);
      let noData = false;
      for (let p = 0; p < n; p++) {
        const line = z[p];
        for (let g = 0; g < cols; g++) {
          const v = line[g];
          if (v === null) {
            noData = true; // transparent: the hatch shows
            continue;
          }
          const k = colourAt(v);
          const o = 4 * (p * cols + g);
          image.data[o] = colours[k];
          image.data[o + 1] = colours[k + 1];
          image.data[o + 2] = colours[k + 2];
          image.data[o + 3] = 255;
        }
      }
      grid.pixels.width = cols;
      grid.pixels.height = n;
      grid.pixels.getContext("2d").putImageData(image, 0, 0);
      // The hatch under the cells only where one has no data: opaque cells cover it, and the
      // pattern over a 1,300 x 880 px canvas doubled the raster of each painting (0.7 -> 1.35 ms).
      if (noData) {
        ctx.fillStyle = theme.hatch;
        ctx.fillRect(0, 0, geo.width, geo.height);
      }
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(grid.pixels, 0, 0, geo.width, geo.height);
      paintInstances(ctx, colours);
      if (!isCompact()) paintRoomy(ctx, colours);
      ctx.fillStyle = STALE_WASH;
      for (let p = 0; p < n; p++) {
        if (rows.status[order[p]] === "stale") ctx.fillRect(0, p * geo.rowPx, geo.width, geo.rowPx);
      }
      paintFaults(ctx, faultCells());
    }

    /* Where value ``v``'s colour starts in the scale's colour table (colourTable). */
    function colourAt(v) {
      return 4 * Math.max(0, Math.min(255, Math.round((255 * (v - spec.zmin)) / (spec.zmax - spec.zmin))));
    }

    /* Each MIG GPU's instances over its cell: a part per instance, coloured by its own value where
     * the metric has one (the hatch where that instance has none), else left in the GPU's colour, or
     * the MIG slate where the GPU has none either; its unmade slices in the panel's colour, and a line
     * between parts. */
    function paintInstances(ctx, colours) {
      const geo = geometry;
      const line = Math.max(1, Math.min(2, geo.colPx / 40));
      for (let p = 0; p < zMig.length; p++) {
        const mig = zMig[p];
        if (!mig) continue;
        const y = p * geo.rowPx;
        for (let g = 0; g < mig.length; g++) {
          const parts = mig[g];
          if (!parts) continue;
          const x = g * geo.colPx;
          const end = parts.length ? parts[parts.length - 1].to : 0;
          ctx.fillStyle = theme.panel;
          ctx.fillRect(x + end * geo.colPx, y, (1 - end) * geo.colPx, geo.rowPx);
          parts.forEach(function (part, k) {
            const x0 = x + part.from * geo.colPx, w = (part.to - part.from) * geo.colPx;
            let fill = null;
            if (part.v !== null) {
              const c = colourAt(part.v);
              fill = "rgb(" + colours[c] + "," + colours[c + 1] + "," + colours[c + 2] + ")";
            } else if (spec.instanceValue) fill = theme.hatch;
            else if (z[p][g] === null) fill = MIG_FILL;
            if (fill) {
              ctx.fillStyle = fill;
              ctx.fillRect(x0, y, w, geo.rowPx);
            }
            if (k) {
              ctx.fillStyle = theme.panel;
              ctx.fillRect(x0 - line / 2, y, line, geo.rowPx);
            }
          });
        }
      }
    }

    /* Rows tall enough to read: each cell's text (in a colour that contrasts with the cell),
     * and lines of the panel's colour between the cells. */
    function paintRoomy(ctx, colours) {
      const n = model.names.length, cols = model.cols, geo = geometry;
      ctx.font = CELL_FONT;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      for (let p = 0; p < n; p++) {
        for (let g = 0; g < cols; g++) {
          const text = cellText[p][g];
          if (!text) continue;
          const v = z[p][g];
          const k = v === null ? -1 : colourAt(v);
          ctx.fillStyle = k < 0 ? theme.ink : inkOn(colours[k], colours[k + 1], colours[k + 2]);
          const lines = text.split("\n");
          const x = (g + 0.5) * geo.colPx, y = (p + 0.5) * geo.rowPx - ((lines.length - 1) * CELL_LINE_PX) / 2;
          if (zMig[p] && zMig[p][g]) {
            // Over parts of several colours: on a backing of the panel's colour, in its ink.
            const wide = Math.max.apply(null, lines.map(function (words) { return ctx.measureText(words).width; })) + 6;
            ctx.fillStyle = theme.panel;
            ctx.fillRect(x - wide / 2, y - CELL_LINE_PX / 2, wide, lines.length * CELL_LINE_PX);
            ctx.fillStyle = theme.ink;
          }
          lines.forEach(function (words, k2) { ctx.fillText(words, x, y + k2 * CELL_LINE_PX); });
        }
      }
      ctx.fillStyle = theme.panel;
      for (let g = 1; g < cols; g++) ctx.fillRect(g * geo.colPx - 1, 0, 2, geo.height);
      for (let p = 1; p < n; p++) ctx.fillRect(0, p * geo.rowPx - 1, geo.width, 2);
    }

    /* An outline on each fault: a white halo under a red square, so it shows on every
     * colour of every scale: around the cell where rows are roomy, else a square that
     * stands out of the smallest rows. */
    function paintFaults(ctx, faults) {
      const geo = geometry;
      const roomy = !isCompact();
      const size = Math.max(10, geo.rowPx + 4);
      const w = roomy ? geo.colPx - 4 : size, h = roomy ? geo.rowPx - 4 : size;
      [["#ffffff", 4], [FAULT_COLOUR, 2]].forEach(function (style) {
        ctx.strokeStyle = style[0];
        ctx.lineWidth = style[1];
        for (let k = 0; k < faults.x.length; k++) {
          ctx.strokeRect((faults.x[k] + 0.5) * geo.colPx - w / 2, (faults.y[k] + 0.5) * geo.rowPx - h / 2, w, h);
        }
      });
      drawn.faults = faults;
    }

    /* The heatmap's parts in els.heatmap: GPU heads above, row labels beside, the cells'
     * canvas, and an off-screen canvas of one pixel per GPU that is scaled up onto it. */
    function buildGrid() {
      const parts = {
        cols: F.element("div", "heat-cols"),
        rows: F.element("div", "heat-rows"),
        canvas: F.element("canvas", "heat-cells"),
        pixels: document.createElement("canvas"),
      };
      els.heatmap.replaceChildren(parts.cols, parts.rows, parts.canvas);
      return parts;
    }

    /* The theme's colours for what is painted: the no-data hatch (as the legend's swatch),
     * the lines between cells, text on a cell without data. */
    function readTheme() {
      const style = getComputedStyle(els.heatmap);
      const tile = document.createElement("canvas");
      tile.width = tile.height = HATCH_PX;
      const ctx = tile.getContext("2d");
      ctx.fillStyle = style.getPropertyValue("--nodata").trim() || "#c3c9d1";
      ctx.fillRect(0, 0, HATCH_PX, HATCH_PX);
      ctx.strokeStyle = style.getPropertyValue("--nodata-stripe").trim() || "#9aa3ad";
      ctx.lineWidth = 2;
      ctx.beginPath(); // a 45° stripe, continued across the tile's corners so the tiles join
      [[0, HATCH_PX, HATCH_PX, 0], [-1, 1, 1, -1], [HATCH_PX - 1, HATCH_PX + 1, HATCH_PX + 1, HATCH_PX - 1]].forEach(function (l) {
        ctx.moveTo(l[0], l[1]);
        ctx.lineTo(l[2], l[3]);
      });
      ctx.stroke();
      theme.hatch = grid.canvas.getContext("2d").createPattern(tile, "repeat");
      theme.panel = style.getPropertyValue("--panel").trim() || "#ffffff";
      theme.ink = style.getPropertyValue("--ink").trim() || DARK_INK;
    }

    function showScale() {
      const stops = (SCALES[view.metric] || SCALES.util).map(function (stop) { return stop[1] + " " + stop[0] * 100 + "%"; });
      els.scaleBar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
      els.scaleMin.textContent = spec.minLabel || spec.zmin + " " + spec.unit;
      els.scaleMax.textContent = spec.maxLabel || spec.zmax + " " + spec.unit;
    }

    /* Draw what changed since the last render; true if the layout was drawn anew. The first
     * drawing takes two renders, in two frames (waitsForPaint() is true between them): the row
     * labels and the canvas's height, then the canvas sized and painted. In one frame, their
     * layout, the cells' painting and the canvas's commit made frames of 55-70 ms as the overview
     * loaded at 2,000 GPUs on a 2-core machine (issue 18). Later layouts (a node joins) stay in
     * one frame: a frame of new labels beside the old cells would misplace rows. */
    function render() {
      reorder();
      const relaid = dirty.layout;
      if (dirty.layout) {
        spec = metricSpec(); // the power scale in W follows the largest limit, known from meta
        showScale();
      }
      if (dirty.layout || dirty.labels) drawLabels(rowLabels());
      if (!geometry && !dirty.size) {
        grid.canvas.style.height = canvasHeight() + "px";
        dirty.layout = dirty.labels = false;
        dirty.size = true;
        return relaid;
      }
      if (dirty.layout || dirty.size) sizeCanvas();
      if (dirty.layout || dirty.size || dirty.cells || dirty.dots) paint();
      drawn.z = z;
      drawn.text = cellText;
      drawn.mig = zMig;
      drawn.zmin = spec.zmin;
      drawn.zmax = spec.zmax;
      dirty.layout = dirty.size = dirty.cells = dirty.labels = dirty.dots = false;
      if (picked) showPicked();
      if (hoverMouse) showTooltip(hoverMouse);
      return relaid;
    }

    /* The cell under the mouse, from its position over the canvas. */
    function cellAt(mouse) {
      if (!geometry) return null;
      const box = grid.canvas.getBoundingClientRect();
      const p = Math.floor((mouse.clientY - box.top) / geometry.rowPx);
      const g = Math.floor((mouse.clientX - box.left) / geometry.colPx);
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
      if (!geometry || !model.names.length) {
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
      // The box is placed in the heatmap's wrapper, the canvas's offset parent.
      const x0 = grid.canvas.offsetLeft + cell.g * geometry.colPx, y0 = grid.canvas.offsetTop + cell.p * geometry.rowPx;
      const box = els.focusBox.style;
      box.left = x0 + "px";
      box.top = y0 + "px";
      box.width = geometry.colPx + "px";
      box.height = geometry.rowPx + "px";
      els.focusBox.hidden = false;
      if (hoverMouse) return []; // the pointer's tooltip stays where the pointer is
      const canvas = grid.canvas.getBoundingClientRect();
      return placeTooltip(cell, canvas.left + (cell.g + 1) * geometry.colPx - 6, canvas.top + (cell.p + 1) * geometry.rowPx - 6);
    }

    function showTooltip(mouse) {
      if (mouse.pointerType === "touch") return; // a tap picks a cell (heatmap-input.js)
      const cell = cellAt(mouse);
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

    /* The tooltip's nodes: lines of text and spans, never markup built from values. */
    function describeCell(cell) {
      const parts = [];
      const line = function () {
        if (parts.length) parts.push(document.createElement("br"));
        for (let k = 0; k < arguments.length; k++) parts.push(arguments[k]);
      };
      const status = rows.status[cell.r];
      const i = cell.i;
      line(F.element("b", "", model.names[cell.r] + " · GPU " + cell.g));
      if (cells.model[i]) line(cells.model[i]);
      if (!cells.present[i]) {
        line("no GPU " + cell.g + " on this node");
        return parts;
      }
      if (status === "down") {
        line(F.element("span", "status-down", "node down"), ": no data since " + F.clockTime(rows.ts[cell.r]));
        return parts;
      }
      const flags = cells.flags[i];
      if (flags & FLAG.LOST) {
        line(F.element("span", "status-down", "LOST"), ": fell off the bus, no readings");
        return parts;
      }
      const v = z[cell.p][cell.g];
      const instances = cells.mig[i];
      const valueText = v === null && instances ? "MIG: " + instances.length + (instances.length === 1 ? " instance" : " instances")
        : v === null ? (view.metric === "activity" ? "not reported by this GPU" : "not reported") : spec.valueText ? spec.valueText(v, i) : F.fixed(v, 0) + " " + spec.unit;
      line(spec.label + ": ", F.element("b", "", valueText));
      line((instances && cells.util[i] !== cells.util[i] ? "util: per instance in MIG mode · " : "util " + F.fixed(cells.util[i], 0) + " % · ") +
        (cells.smActive[i] === cells.smActive[i] ? "SM " + F.fixed(cells.smActive[i], 0) + " % · " : "") + F.fixed(cells.temp[i], 0) + " °C");
      line("power " + F.fixed(cells.power[i], 0) + " / " + F.fixed(cells.powerLimit[i], 0) + " W");
      line("memory " + F.fixed(cells.memUsed[i] / 1024, 1) + " / " + F.fixed(cells.memTotal[i] / 1024, 1) + " GiB");
      if (instances) instances.forEach(function (inst) { line(describeInstance(inst)); });
      if (status === "stale") line(F.element("span", "status-stale", "stale"), ": sample from " + F.clockTime(rows.ts[cell.r]));
      const tags = [];
      if (flags & FLAG.ALERT) tags.push("alert firing");
      if (flags & FLAG.XID) tags.push("Xid error");
      if (flags & FLAG.ECC) tags.push("uncorrected ECC errors");
      if (flags & FLAG.THROTTLED) tags.push("thermal or hardware slowdown");
      if (flags & FLAG.SM_IDLE) tags.push("kernels run, SMs idle (utilization ≥ 90 %, SM activity < 20 % for a minute)");
      if (tags.length) line(F.element("span", "status-stale", tags.join(", ")));
      const health = rows.health[cell.r];
      if (health.verdict === "failing" || health.verdict === "degraded") {
        line(F.element("span", health.verdict === "failing" ? "status-down" : "status-stale", health.verdict), ": " + (health.reason || "no reason given"));
        if (health.action) line("→ " + health.action);
      }
      const probe = rows.probe[cell.r];
      if (probe && probe.low) line(F.element("span", "status-down", "probe LOW"), ": " + window.GpulseCluster.describeProbe(probe));
      return parts;
    }

    /* One MIG instance's line of the tooltip, as text: "GI 1/0 1g.10gb · SM 61 % · 2.0 / 10.0 GiB · held". */
    function describeInstance(inst) {
      const ids = "GI " + F.fixed(inst.gi, 0) + (inst.ci === inst.ci ? "/" + F.fixed(inst.ci, 0) : "");
      const use = !(inst.flags & FLAG.ALLOCATED) ? "free" : inst.flags & FLAG.IDLE ? "held, idle" : "held";
      return ids + " " + (inst.profile || "profile not reported") + " · SM " +
        (inst.smActive === inst.smActive ? F.fixed(inst.smActive, 0) + " %" : "not reported") + " · " +
        F.fixed(inst.memUsed / 1024, 1) + " / " + F.fixed(inst.memTotal / 1024, 1) + " GiB · " + use;
    }

    // Our own hover, from the pointer's position: the tooltip follows the mouse
    // exactly and its numbers refresh with every frame.
    els.heatmap.addEventListener("pointerdown", function (event) { lastPointer = event.pointerType; }, true);
    els.heatmap.addEventListener("click", function (event) {
      if (lastPointer === "touch") return; // a tap previews first (heatmap-input.js)
      const cell = cellAt(event);
      if (cell) onOpen(model.names[cell.r]);
    });
    // The canvas follows the panel's width (a resized window, a phone turned) and the theme.
    new ResizeObserver(function () {
      if (!geometry || grid.canvas.clientWidth === geometry.width) return;
      sizeCanvas();
      paint();
      if (picked) showPicked();
    }).observe(grid.canvas);
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", function () {
      readTheme();
      if (geometry) paint();
    });
    els.heatmap.addEventListener("pointermove", showTooltip);
    els.heatmap.addEventListener("pointerleave", hideTooltip);

    return {
      laidOut: laidOut, rowChanged: rowChanged, recolour: recolour, render: render,
      waitsForPaint: function () { return dirty.size; },
      cellAt: cellAt, cellOf: cellOf, cellFrom: cellFrom, select: select,
      picked: function () { return picked; },
      open: function (cell) { onOpen(model.names[cell.r]); },
    };
  }

  window.GpulseHeatmap = { create: create };
})();
