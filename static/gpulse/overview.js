/* Cluster overview: KPIs, one heatmap of every GPU, a sortable node table.
 *
 * Frames (dashboard/live/frames.py) arrive once per tick over /ws/cluster/.
 * The handler only writes numbers into typed arrays laid out per snapshot
 * (row = node, column = GPU index); drawing happens at most once per animation
 * frame, and the heatmap is one Plotly trace whose z is restyled in place, so
 * an 8,000-GPU cluster costs one array walk per frame, not 8,000 DOM updates.
 * A node whose bandwidth probe is low (frames' "probe") is flagged in the
 * table and on its heatmap row label.
 */
(function () {
  "use strict";

  const L = window.GpulseLive;

  // Bits of a row's flags field (dashboard/live/frames.py).
  const FLAG_LOST = 1;
  const FLAG_THROTTLED = 2;
  const FLAG_XID = 4;
  const FLAG_ECC = 8;
  const FLAG_ALERT = 16;

  const DEFAULT_FIELDS = ["util", "mem_used", "temp", "power", "sm_clock", "flags"];
  const FRAME_LATE_S = 3;
  const TABLE_EVERY_MS = 1000;
  const TIMINGS_KEPT = 300;
  const RESYNC_EVERY_MS = 5000;
  // A seq this far below the last one means ingest restarted and counts from 1 again.
  const SEQ_RESTART_GAP = 10;
  // Rows shorter than this get no numbers in the cells and dots instead of tags.
  const COMPACT_ROW_PX = 18;
  const MAX_ROW_LABELS = 16;
  // The table shows the first rows in sort order; the filter finds any other node.
  const TABLE_MAX_ROWS = 200;
  const NODATA_COLOUR = "#c3c9d1";
  const STATUS_RANK = { down: 0, stale: 1, up: 2 };

  const SCALES = {
    util: [[0, "#f4f8fd"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
    temp: [[0, "#ffffcc"], [0.35, "#fed976"], [0.6, "#fd8d3c"], [0.8, "#e31a1c"], [1, "#800026"]],
    power: [[0, "#fcfbfd"], [0.3, "#dadaeb"], [0.6, "#9e9ac8"], [0.8, "#6a51a3"], [1, "#3f007d"]],
    mem: [[0, "#f7fcf5"], [0.3, "#c7e9c0"], [0.6, "#74c476"], [0.8, "#238b45"], [1, "#00441b"]],
  };

  const timings = (window.gpulse = {
    frames: 0,
    lastHandleMs: 0,
    maxHandleMs: 0,
    handleMs: [],
    renders: 0,
    lastRenderMs: 0,
    maxRenderMs: 0,
    renderMs: [],
    lastSeq: null,
  });

  const els = {
    heatmap: document.getElementById("heatmap"),
    tooltip: document.getElementById("heat-tooltip"),
    metric: document.getElementById("heat-metric"),
    powerScale: document.getElementById("power-scale"),
    powerScaleLabel: document.getElementById("power-scale-label"),
    frameAge: document.getElementById("frame-age"),
    conn: document.getElementById("conn-state"),
    table: document.getElementById("node-table"),
    tbody: document.querySelector("#node-table tbody"),
    filter: document.getElementById("node-filter"),
    nodeCount: document.getElementById("node-count"),
    scaleBar: document.getElementById("scale-bar"),
    scaleMin: document.getElementById("scale-min"),
    scaleMax: document.getElementById("scale-max"),
  };

  /* ---- state -------------------------------------------------------------- */

  const st = {
    fieldIndex: indexFields(DEFAULT_FIELDS),
    entries: new Map(), // node -> its latest frame entry, meta carried over
    summary: {},
    haveSnapshot: false,
    pending: [],
    lastSeq: -1,
    lastResync: 0,
    lastFrameAt: null,
    // Laid out by layout(): rows = nodes in name order, columns = GPU index.
    names: [],
    rowOf: new Map(),
    cols: 0,
  };
  const cells = {}; // typed arrays, one slot per (row, column)
  const rows = {}; // typed arrays and lists, one slot per node
  let z = [];
  let cellText = []; // rows of strings, empty in compact layouts

  const view = {
    metric: localStorage.getItem("gpulse.heatmap.metric") || "util",
    powerScale: localStorage.getItem("gpulse.heatmap.power") || "pct",
    sortKey: "name",
    sortDir: 1,
    filter: "",
  };
  const dirty = { layout: true, cells: false, labels: true, dots: true, table: true };
  let drawn = false;
  let renderQueued = false;
  let lastTableAt = 0;
  let labelSignature = "";
  let dotSignature = "";
  let socket = null;
  let hoverMouse = null; // where the tooltip was asked for, to refresh its values each frame

  function indexFields(fields) {
    const index = {};
    fields.forEach(function (name, i) { index[name] = i; });
    return index;
  }

  function num(value) {
    return typeof value === "number" ? value : NaN;
  }

  /* ---- frames --------------------------------------------------------------- */

  function onMessage(text) {
    const started = performance.now();
    const frame = JSON.parse(text);
    if (frame.type === "snapshot") applySnapshot(frame);
    else if (frame.type === "delta") applyDelta(frame);
    else return;
    st.lastFrameAt = performance.now();
    L.serverClock.observe(frame.sent);
    timings.frames += 1;
    timings.lastSeq = frame.seq;
    record("handle", performance.now() - started);
    queueRender();
  }

  function record(kind, ms) {
    const list = timings[kind + "Ms"];
    list.push(ms);
    if (list.length > TIMINGS_KEPT) list.shift();
    timings["last" + kind[0].toUpperCase() + kind.slice(1) + "Ms"] = ms;
    const max = "max" + kind[0].toUpperCase() + kind.slice(1) + "Ms";
    if (ms > timings[max]) timings[max] = ms;
  }

  function applySnapshot(frame) {
    if (frame.fields) st.fieldIndex = indexFields(frame.fields);
    st.entries = new Map(Object.entries(frame.nodes || {}));
    st.lastSeq = frame.seq;
    st.haveSnapshot = true;
    applySummary(frame.summary);
    layout();
    // Deltas that overtook the snapshot: keep only those newer than it.
    const pending = st.pending;
    st.pending = [];
    pending.forEach(applyDelta);
  }

  function applyDelta(frame) {
    if (!st.haveSnapshot) {
      st.pending.push(frame);
      return;
    }
    if (frame.seq <= st.lastSeq) {
      if (st.lastSeq - frame.seq > SEQ_RESTART_GAP) resync();
      return;
    }
    st.lastSeq = frame.seq;
    if (frame.fields) st.fieldIndex = indexFields(frame.fields);
    applySummary(frame.summary);
    let relayout = false;
    const nodes = frame.nodes || {};
    for (const name in nodes) {
      const entry = nodes[name];
      const known = st.entries.get(name);
      if (!entry.meta) {
        if (known && known.meta) entry.meta = known.meta;
        else resync(); // a node we never had meta for: models and sizes come with a snapshot
      }
      st.entries.set(name, entry);
      const row = st.rowOf.get(name);
      if (row === undefined || entry.gpus.length > st.cols) relayout = true;
      else writeRow(row, entry);
    }
    if (relayout) layout();
  }

  function applySummary(summary) {
    if (summary && Object.keys(summary).length) st.summary = summary;
  }

  function resync() {
    const now = Date.now();
    if (socket && now - st.lastResync > RESYNC_EVERY_MS) {
      st.lastResync = now;
      socket.reconnect();
    }
  }

  /* Lay the cells out again: on a snapshot, a new node, or a node with more GPUs. */
  function layout() {
    const names = Array.from(st.entries.keys()).sort(L.compareNames);
    let cols = 1;
    st.entries.forEach(function (entry) {
      cols = Math.max(cols, entry.gpus.length, entry.meta ? entry.meta.length : 0);
    });
    const n = names.length;
    st.names = names;
    st.cols = cols;
    st.rowOf = new Map(names.map(function (name, i) { return [name, i]; }));
    ["util", "memUsed", "temp", "power", "memTotal", "powerLimit"].forEach(function (key) {
      cells[key] = new Float32Array(n * cols);
    });
    cells.flags = new Uint8Array(n * cols);
    cells.present = new Uint8Array(n * cols);
    cells.model = new Array(n * cols).fill("");
    rows.status = new Array(n).fill("down");
    rows.probe = new Array(n).fill(null);
    rows.ts = new Float64Array(n);
    ["gpus", "reporting", "lost", "utilSum", "utilN", "maxTemp", "power", "powerLimit", "memUsed", "memTotal"].forEach(
      function (key) { rows[key] = new Float64Array(n); }
    );
    z = new Array(n);
    // Text in the cells only where rows are tall enough to read it (small clusters).
    cellText = rowPixels(n) < COMPACT_ROW_PX ? [] : new Array(n);
    for (let r = 0; r < n; r++) {
      z[r] = new Array(cols).fill(null);
      if (rowPixels(n) >= COMPACT_ROW_PX) cellText[r] = new Array(cols).fill("");
      writeRow(r, st.entries.get(names[r]));
    }
    dirty.layout = true;
  }

  /* Copy one node's entry into the cell arrays, its aggregates and its heatmap row. */
  function writeRow(r, entry) {
    const f = st.fieldIndex;
    const cols = st.cols;
    const gpus = entry.gpus;
    const meta = entry.meta || [];
    const notDown = entry.status !== "down";
    let reporting = 0, lost = 0, utilSum = 0, utilN = 0, maxTemp = NaN;
    let power = 0, powerLimit = 0, memUsed = 0, memTotal = 0;
    for (let g = 0; g < cols; g++) {
      const i = r * cols + g;
      const row = gpus[g];
      const info = meta[g];
      cells.model[i] = info ? info[0] : "";
      cells.memTotal[i] = info ? num(info[1]) : NaN;
      cells.powerLimit[i] = info ? num(info[2]) : NaN;
      if (!row) {
        cells.present[i] = 0;
        cells.flags[i] = 0;
        cells.util[i] = cells.memUsed[i] = cells.temp[i] = cells.power[i] = NaN;
        continue;
      }
      cells.present[i] = 1;
      const flags = row[f.flags] || 0;
      const u = (cells.util[i] = num(row[f.util]));
      const m = (cells.memUsed[i] = num(row[f.mem_used]));
      const t = (cells.temp[i] = num(row[f.temp]));
      const p = (cells.power[i] = num(row[f.power]));
      cells.flags[i] = flags;
      if (flags & FLAG_LOST) {
        lost += 1;
        continue;
      }
      if (!notDown) continue;
      reporting += 1;
      if (u === u) { utilSum += u; utilN += 1; }
      if (t === t && !(t <= maxTemp)) maxTemp = t;
      if (p === p) power += p;
      if (cells.powerLimit[i] === cells.powerLimit[i]) powerLimit += cells.powerLimit[i];
      if (m === m) memUsed += m;
      if (cells.memTotal[i] === cells.memTotal[i]) memTotal += cells.memTotal[i];
    }
    if (rows.status[r] !== entry.status) dirty.table = true; // a node going down shows at once
    const probe = entry.probe || null;
    const before = rows.probe[r];
    // Probes come every few minutes: redraw only when this node's verdict or reading changes.
    if (!before !== !probe || (probe && (probe.low !== before.low || probe.ts !== before.ts))) dirty.table = true;
    rows.probe[r] = probe;
    rows.status[r] = entry.status;
    rows.ts[r] = entry.ts;
    rows.gpus[r] = gpus.length;
    rows.reporting[r] = reporting;
    rows.lost[r] = lost;
    rows.utilSum[r] = utilSum;
    rows.utilN[r] = utilN;
    rows.maxTemp[r] = maxTemp;
    rows.power[r] = power;
    rows.powerLimit[r] = powerLimit;
    rows.memUsed[r] = memUsed;
    rows.memTotal[r] = memTotal;
    fillZRow(r);
    dirty.cells = dirty.labels = dirty.dots = true;
  }

  /* ---- the heatmap ------------------------------------------------------------ */

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
      case "mem":
        return {
          label: "Memory used", unit: "%", zmin: 0, zmax: 100,
          value: function (i) { return (100 * cells.memUsed[i]) / cells.memTotal[i]; },
        };
      default:
        return { label: "Utilization", unit: "%", zmin: 0, zmax: 100, value: function (i) { return cells.util[i]; } };
    }
  }

  let spec = metricSpec();

  function maxPowerLimit() {
    let max = 0;
    if (!cells.powerLimit) return 700;
    for (let i = 0; i < cells.powerLimit.length; i++) if (cells.powerLimit[i] > max) max = cells.powerLimit[i];
    return max || 700;
  }

  /* Recompute one heatmap row: its colour values, and in roomy layouts its cell text. */
  function fillZRow(r) {
    const cols = st.cols;
    const line = z[r];
    const value = spec.value;
    const text = cellText[r];
    const down = rows.status[r] === "down";
    for (let g = 0; g < cols; g++) {
      const i = r * cols + g;
      const v = value(i);
      const known = v === v && isFinite(v); // NaN and ±Inf: no data
      line[g] = known ? Math.round(v * 10) / 10 : null;
      if (text) {
        const flags = cells.flags[i];
        const tags = down || !flags ? "" : tagText(flags);
        text[g] = flags & FLAG_LOST ? tags : (known ? Math.round(v) : "") + (tags ? "<br>" + tags : "");
      }
    }
  }

  function rowPixels(n) {
    if (n <= 24) return 34;
    return Math.max(1, Math.min(22, 880 / n));
  }

  function isCompact() {
    return rowPixels(st.names.length) < COMPACT_ROW_PX;
  }

  function heatTrace() {
    const compact = isCompact();
    const x = [];
    for (let g = 0; g < st.cols; g++) x.push(g);
    return {
      type: "heatmap",
      z: z.slice(),
      x: x,
      y: st.names.map(function (_, r) { return r; }),
      zmin: spec.zmin,
      zmax: spec.zmax,
      colorscale: SCALES[view.metric] || SCALES.util,
      hoverinfo: "none",
      hoverongaps: true,
      // Cell text: the value, and under it the tags of a flagged GPU (Plotly picks
      // a text colour that contrasts with each cell). Tiny rows get dots instead.
      text: compact ? undefined : cellText.slice(),
      texttemplate: compact ? "" : "%{text}",
      textfont: { size: 11 },
      // The colour scale is drawn in HTML (showScale): a Plotly colour bar is redrawn every frame.
      showscale: false,
    };
  }

  function tagText(flags) {
    if (flags & FLAG_LOST) return "LOST";
    const tags = [];
    if (flags & FLAG_ALERT) tags.push("ALERT");
    if (flags & FLAG_XID) tags.push("XID");
    if (flags & FLAG_ECC) tags.push("ECC");
    if (flags & FLAG_THROTTLED) tags.push("THR");
    return tags.join(" ");
  }

  /* Dots on flagged GPUs where rows are too small for text. */
  function dotTrace() {
    const x = [], y = [], colour = [];
    if (isCompact()) {
      const cols = st.cols;
      for (let r = 0; r < st.names.length; r++) {
        if (rows.status[r] === "down") continue;
        for (let g = 0; g < cols; g++) {
          const flags = cells.flags[r * cols + g];
          if (!flags || flags === FLAG_THROTTLED) continue; // throttling alone is common and harmless
          x.push(g);
          y.push(r);
          colour.push(flags & (FLAG_ALERT | FLAG_LOST) ? "#d1242f" : "#f59e0b");
        }
      }
    }
    return {
      type: "scatter", mode: "markers", x: x, y: y, hoverinfo: "skip",
      marker: { symbol: "circle", size: 5, color: colour, line: { width: 1, color: "#ffffff" } },
    };
  }

  function rowLabels() {
    const n = st.names.length;
    // Plotly measures every tick label on each redraw, so big clusters get a few
    // labels (the tooltip names every node) rather than one per dozen pixels.
    const every = Math.max(1, Math.ceil(12 / rowPixels(n)), Math.ceil(n / MAX_ROW_LABELS));
    const vals = [], text = [];
    for (let r = 0; r < n; r += every) {
      vals.push(r);
      const status = rows.status[r];
      const probe = rows.probe[r];
      text.push(st.names[r] + (status === "up" ? "" : status === "down" ? "  ✕ down" : "  ⚠ stale") +
        (probe && probe.low ? "  ⚠ probe" : ""));
    }
    return { vals: vals, text: text };
  }

  /* White lines between cells (drawn rather than gaps, so only empty cells show the hatch)
   * and a wash over stale rows. */
  function cellShapes() {
    const shapes = [];
    const n = st.names.length;
    if (!isCompact()) {
      const line = { color: "#ffffff", width: 2 };
      for (let g = 1; g < st.cols; g++) {
        shapes.push({ type: "line", xref: "x", yref: "y", x0: g - 0.5, x1: g - 0.5, y0: -0.5, y1: n - 0.5, line: line, layer: "above" });
      }
      for (let r = 1; r < n; r++) {
        shapes.push({ type: "line", xref: "x", yref: "y", x0: -0.5, x1: st.cols - 0.5, y0: r - 0.5, y1: r - 0.5, line: line, layer: "above" });
      }
    }
    for (let r = 0; r < st.names.length; r++) {
      if (rows.status[r] !== "stale") continue;
      shapes.push({
        type: "rect", xref: "x", yref: "y", x0: -0.5, x1: st.cols - 0.5, y0: r - 0.5, y1: r + 0.5,
        fillcolor: "rgba(255,255,255,0.55)", line: { width: 0 }, layer: "above",
      });
    }
    return shapes;
  }

  function heatLayout(labels) {
    const n = st.names.length;
    const plotHeight = Math.max(n, 1) * rowPixels(n);
    const ticks = [];
    for (let g = 0; g < st.cols; g++) ticks.push("GPU " + g);
    return {
      height: Math.max(160, plotHeight + 40),
      margin: { l: 8, r: 8, t: 28, b: 8 },
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11, color: "#1f2933" },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: NODATA_COLOUR,
      xaxis: {
        tickvals: ticks.map(function (_, g) { return g; }), ticktext: ticks, side: "top",
        range: [-0.5, st.cols - 0.5], showgrid: false, zeroline: false, fixedrange: true, ticks: "",
      },
      yaxis: {
        tickvals: labels.vals, ticktext: labels.text, range: [n - 0.5, -0.5], showgrid: false, zeroline: false,
        fixedrange: n <= 64, ticks: "", automargin: true, ticklabelstandoff: 6,
      },
      shapes: cellShapes(),
      showlegend: false,
      dragmode: n <= 64 ? false : "zoom",
    };
  }

  const PLOT_CONFIG = { displaylogo: false, displayModeBar: false, responsive: true, scrollZoom: false };

  function showScale() {
    const stops = (SCALES[view.metric] || SCALES.util).map(function (stop) { return stop[1] + " " + stop[0] * 100 + "%"; });
    els.scaleBar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
    els.scaleMin.textContent = spec.zmin + " " + spec.unit;
    els.scaleMax.textContent = spec.zmax + " " + spec.unit;
  }

  function drawHeatmap() {
    spec = metricSpec(); // the power scale in W follows the largest limit, known from meta
    showScale();
    const labels = rowLabels();
    const heat = heatTrace();
    labelSignature = labels.text.join("|");
    dotSignature = "";
    Plotly.react(els.heatmap, [heat, dotTrace()], heatLayout(labels), PLOT_CONFIG);
    if (!drawn) {
      drawn = true;
      els.heatmap.on("plotly_click", openNode);
    }
  }

  /* Send Plotly only what changed: z every frame; labels and tags when they differ. */
  function updateHeatmap() {
    const layoutUpdate = {};
    const traceUpdate = { z: [z.slice()] };
    if (dirty.labels) {
      const labels = rowLabels();
      const signature = labels.text.join("|");
      if (signature !== labelSignature) {
        labelSignature = signature;
        layoutUpdate["yaxis.ticktext"] = labels.text;
        layoutUpdate["yaxis.tickvals"] = labels.vals;
        layoutUpdate.shapes = cellShapes();
      }
    }
    if (!isCompact()) traceUpdate.text = [cellText.slice()];
    Plotly.update(els.heatmap, traceUpdate, layoutUpdate, [0]);
    if (dirty.dots && isCompact()) {
      const dots = dotTrace();
      const signature = dots.x.join(",") + "|" + dots.y.join(",") + "|" + dots.marker.color.join(",");
      if (signature !== dotSignature) {
        dotSignature = signature;
        Plotly.restyle(els.heatmap, { x: [dots.x], y: [dots.y], "marker.color": [dots.marker.color] }, [1]);
      }
    }
  }

  /* The cell under the mouse, from its own position: Plotly's hover data lags
   * behind fast moves, and a click must open the node that is under the pointer. */
  function cellAt(mouse) {
    const full = els.heatmap._fullLayout;
    const box = els.heatmap.getBoundingClientRect();
    const r = Math.round(full.yaxis.p2l(mouse.clientY - box.top - full._size.t));
    const g = Math.round(full.xaxis.p2l(mouse.clientX - box.left - full._size.l));
    if (r < 0 || r >= st.names.length || g < 0 || g >= st.cols) return null;
    return { r: r, g: g, i: r * st.cols + g };
  }

  function showTooltip(mouse) {
    const cell = drawn ? cellAt(mouse) : null;
    if (!cell) return hideTooltip();
    hoverMouse = { clientX: mouse.clientX, clientY: mouse.clientY };
    els.tooltip.innerHTML = describeCell(cell);
    els.tooltip.hidden = false;
    const box = els.tooltip.getBoundingClientRect();
    const left = Math.min(mouse.clientX + 14, window.innerWidth - box.width - 8);
    const top = Math.min(mouse.clientY + 14, window.innerHeight - box.height - 8);
    els.tooltip.style.left = Math.max(4, left) + "px";
    els.tooltip.style.top = Math.max(4, top) + "px";
  }

  function hideTooltip() {
    hoverMouse = null;
    els.tooltip.hidden = true;
  }

  function describeCell(cell) {
    const name = st.names[cell.r];
    const status = rows.status[cell.r];
    const i = cell.i;
    const head = "<b>" + L.escapeHtml(name) + " · GPU " + cell.g + "</b>" +
      (cells.model[i] ? "<br>" + L.escapeHtml(cells.model[i]) : "");
    if (!cells.present[i]) return head + "<br>no GPU " + cell.g + " on this node";
    if (status === "down") {
      return head + '<br><span class="status-down">node down</span>: no data since ' + L.clockTime(rows.ts[cell.r]);
    }
    const flags = cells.flags[i];
    if (flags & FLAG_LOST) return head + '<br><span class="status-down">LOST</span>: fell off the bus, no readings';
    const v = z[cell.r][cell.g];
    const lines = [
      head,
      spec.label + ": <b>" + (v === null ? "not reported" : L.fixed(v, 0) + " " + spec.unit) + "</b>",
      "util " + L.fixed(cells.util[i], 0) + " % · " + L.fixed(cells.temp[i], 0) + " °C",
      "power " + L.fixed(cells.power[i], 0) + " / " + L.fixed(cells.powerLimit[i], 0) + " W",
      "memory " + L.fixed(cells.memUsed[i] / 1024, 1) + " / " + L.fixed(cells.memTotal[i] / 1024, 1) + " GiB",
    ];
    if (status === "stale") lines.push('<span class="status-stale">stale</span>: sample from ' + L.clockTime(rows.ts[cell.r]));
    const tags = [];
    if (flags & FLAG_ALERT) tags.push("alert firing");
    if (flags & FLAG_XID) tags.push("Xid error");
    if (flags & FLAG_ECC) tags.push("uncorrected ECC errors");
    if (flags & FLAG_THROTTLED) tags.push("power/thermal slowdown");
    if (tags.length) lines.push('<span class="status-stale">' + tags.join(", ") + "</span>");
    const probe = rows.probe[cell.r];
    if (probe && probe.low) lines.push('<span class="status-down">probe LOW</span>: ' + L.escapeHtml(probeDetail(probe)));
    return lines.join("<br>");
  }

  function openNode(event) {
    const cell = event.event ? cellAt(event.event) : null;
    if (cell) location.href = nodeUrl(st.names[cell.r]);
  }

  function nodeUrl(name) {
    return "/nodes/" + encodeURIComponent(name) + "/";
  }

  /* ---- KPIs ------------------------------------------------------------------- */

  function setText(id, text) {
    const el = document.getElementById(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function renderKpis() {
    const n = st.names.length;
    let up = 0, stale = 0, down = 0, gpus = 0, lost = 0, utilSum = 0, utilN = 0, busy = 0;
    let power = 0, powerLimit = 0, memUsed = 0, memTotal = 0;
    for (let r = 0; r < n; r++) {
      const status = rows.status[r];
      if (status === "up") up++;
      else if (status === "stale") stale++;
      else { down++; continue; }
      gpus += rows.gpus[r];
      lost += rows.lost[r];
      utilSum += rows.utilSum[r];
      utilN += rows.utilN[r];
      power += rows.power[r];
      powerLimit += rows.powerLimit[r];
      memUsed += rows.memUsed[r];
      memTotal += rows.memTotal[r];
    }
    for (let i = 0; i < cells.util.length; i++) if (cells.util[i] >= 50) busy++;
    setText("kpi-nodes", String(n));
    setText("kpi-up", up + " up");
    setText("kpi-stale", stale + " stale");
    setText("kpi-down", down + " down");
    setText("kpi-gpus", String(gpus));
    setText("kpi-lost", lost + " lost");
    document.getElementById("kpi-lost").classList.toggle("status-down", lost > 0);
    setText("kpi-util", utilN ? (utilSum / utilN).toFixed(1) + " %" : "—");
    setText("kpi-busy", busy + " GPUs ≥ 50 %");
    setText("kpi-power", watts(power));
    setText("kpi-power-limit", "of " + watts(powerLimit) + " limit");
    const memUnit = memTotal >= 1024 * 1024 * 10 ? ["TiB", 1024 * 1024] : ["GiB", 1024];
    setText("kpi-mem", (memUsed / memUnit[1]).toFixed(1) + " " + memUnit[0]);
    setText("kpi-mem-total", "of " + (memTotal / memUnit[1]).toFixed(1) + " " + memUnit[0] +
      (memTotal ? " (" + ((100 * memUsed) / memTotal).toFixed(0) + " %)" : ""));
    const s = st.summary;
    setText("kpi-alerts", L.isNum(s.alerts_firing) ? String(s.alerts_firing) : "—");
    document.getElementById("kpi-alerts").classList.toggle("status-down", s.alerts_firing > 0);
    setText("kpi-jobs", L.isNum(s.jobs_running) ? s.jobs_running + " running" : "—");
    setText("kpi-queued", (L.isNum(s.jobs_queued) ? s.jobs_queued : "—") + " queued");
    setText("kpi-throughput", throughputText(s));
    const nav = document.getElementById("nav-firing");
    if (nav && L.isNum(s.alerts_firing)) nav.textContent = s.alerts_firing ? String(s.alerts_firing) : "";
  }

  // "3/h · 42 s mean · 12.3 GB/s ↑ sim-01,sim-02": the newest job's busbw against the run before on those nodes.
  function throughputText(s) {
    if (!L.isNum(s.jobs_last_hour)) return "";
    const parts = [s.jobs_last_hour + "/h"];
    if (L.isNum(s.job_mean_s)) parts.push(Math.round(s.job_mean_s) + " s mean");
    const b = s.latest_busbw;
    if (b && L.isNum(b.busbw)) {
      const trend = L.isNum(b.previous) ? (b.busbw > b.previous * 1.02 ? " ↑" : b.busbw < b.previous * 0.98 ? " ↓" : " =") : "";
      parts.push(b.busbw.toFixed(2) + " GB/s" + trend + " " + b.nodes);
    }
    return parts.join(" · ");
  }

  function watts(w) {
    return w >= 10000 ? (w / 1000).toFixed(1) + " kW" : Math.round(w) + " W";
  }

  /* ---- the node table ------------------------------------------------------------ */

  function tableRows() {
    const now = L.serverClock.now();
    const filter = view.filter;
    const list = [];
    for (let r = 0; r < st.names.length; r++) {
      const name = st.names[r];
      if (filter && name.toLowerCase().indexOf(filter) < 0) continue;
      list.push({
        r: r,
        name: name,
        status: rows.status[r],
        age: now - rows.ts[r],
        gpus: rows.gpus[r],
        util: rows.utilN[r] ? rows.utilSum[r] / rows.utilN[r] : NaN,
        temp: rows.maxTemp[r],
        power: rows.reporting[r] ? rows.power[r] : NaN,
        mem: rows.reporting[r] ? rows.memUsed[r] : NaN,
        probe: rows.probe[r] ? num(rows.probe[r].busbw) : NaN,
      });
    }
    const key = view.sortKey, dir = view.sortDir;
    list.sort(function (a, b) {
      let d;
      if (key === "name") d = L.compareNames(a.name, b.name);
      else if (key === "status") d = STATUS_RANK[a.status] - STATUS_RANK[b.status];
      else {
        const x = a[key], y = b[key];
        if (x !== x || y !== y) return (x !== x) - (y !== y); // no data sorts last either way
        d = x - y;
      }
      return d * dir || L.compareNames(a.name, b.name);
    });
    return list;
  }

  function renderTable() {
    lastTableAt = performance.now();
    dirty.table = false;
    const list = tableRows();
    const shown = Math.min(list.length, TABLE_MAX_ROWS);
    const html = new Array(shown);
    for (let k = 0; k < shown; k++) {
      const row = list[k];
      const r = row.r;
      const down = row.status === "down";
      const name = L.escapeHtml(row.name);
      const gpuText = down ? row.gpus || "—" :
        rows.reporting[r] + (rows.lost[r] ? ' <span class="status-down">(' + rows.lost[r] + " lost)</span>" : "") +
        (rows.reporting[r] + rows.lost[r] < row.gpus ? " / " + row.gpus : "");
      html[k] =
        '<tr data-node="' + name + '" class="row-' + row.status + '">' +
        '<td><a href="' + nodeUrl(row.name) + '">' + name + "</a></td>" +
        '<td><span class="status status-' + row.status + '">' + row.status + "</span></td>" +
        '<td class="num">' + (down ? "no data " : "") + L.age(row.age) + "</td>" +
        '<td class="num">' + gpuText + "</td>" +
        '<td class="num">' + (down ? "—" : L.fixed(row.util, 1)) + "</td>" +
        '<td class="num">' + (down ? "—" : L.fixed(row.temp, 0)) + "</td>" +
        '<td class="num">' + (down ? "—" : L.fixed(row.power, 0)) + "</td>" +
        '<td class="num">' + (down ? "—" : L.fixed(row.mem / 1024, 0) + " / " + L.fixed(rows.memTotal[r] / 1024, 0)) + "</td>" +
        probeCell(rows.probe[r]) +
        "</tr>";
    }
    els.tbody.innerHTML = html.join("");
    const matching = list.length === st.names.length ? st.names.length + " nodes" : list.length + " of " + st.names.length + " nodes";
    els.nodeCount.textContent = shown < list.length ? matching + ", first " + shown + " shown: sort or filter to see others" : matching;
  }

  /* "182.4 GB/s vs median 190.1 GB/s", or why the probe has no bandwidth. */
  function probeDetail(probe) {
    if (probe.status !== "succeeded") return "probe " + probe.status + " at " + L.clockTime(probe.ts);
    const median = L.isNum(probe.median) ? " vs median " + probe.median.toFixed(1) + " GB/s" : " (too few earlier probes for a median)";
    return L.fixed(num(probe.busbw), 1) + " GB/s" + median;
  }

  function probeCell(probe) {
    if (!probe) return '<td class="num muted" title="No bandwidth probe yet">—</td>';
    const value = probe.status === "succeeded" ? L.fixed(num(probe.busbw), 1) : probe.status;
    const badge = probe.low ? ' <b class="tag tag-alert">LOW</b>' : "";
    return '<td class="num" title="' + L.escapeHtml(probeDetail(probe)) + '">' + L.escapeHtml(value) + badge + "</td>";
  }

  function markSortedHeader() {
    els.table.querySelectorAll("th[data-key]").forEach(function (th) {
      const sorted = th.dataset.key === view.sortKey;
      th.setAttribute("aria-sort", sorted ? (view.sortDir > 0 ? "ascending" : "descending") : "none");
    });
  }

  /* ---- rendering ---------------------------------------------------------------- */

  function queueRender() {
    if (!renderQueued) {
      renderQueued = true;
      requestAnimationFrame(render);
    }
  }

  function render() {
    renderQueued = false;
    const started = performance.now();
    if (dirty.layout) {
      drawHeatmap();
      dirty.layout = false;
      dirty.table = true;
    } else if (dirty.cells) {
      updateHeatmap();
    }
    dirty.cells = dirty.labels = dirty.dots = false;
    const heatmapDone = performance.now();
    if (hoverMouse) showTooltip(hoverMouse);
    renderKpis();
    const kpisDone = performance.now();
    // Small clusters get the table every frame, in step with the heatmap; big ones once a second.
    const tableEvery = st.names.length > TABLE_MAX_ROWS ? TABLE_EVERY_MS : 0;
    if (dirty.table || performance.now() - lastTableAt >= tableEvery) renderTable();
    timings.lastParts = { heatmap: heatmapDone - started, kpis: kpisDone - heatmapDone, table: performance.now() - kpisDone };
    timings.renders += 1;
    record("render", performance.now() - started);
  }

  function refreshAllZ() {
    spec = metricSpec();
    for (let r = 0; r < st.names.length; r++) fillZRow(r);
    dirty.layout = true; // colour scale, range and colour bar title change too
    queueRender();
  }

  function showFrameAge() {
    if (st.lastFrameAt === null) {
      els.frameAge.classList.add("late");
      return;
    }
    const seconds = (performance.now() - st.lastFrameAt) / 1000;
    const late = seconds > FRAME_LATE_S;
    els.frameAge.classList.toggle("late", late);
    els.frameAge.textContent = late
      ? "no live frame for " + L.age(seconds) + ": data is not current (ingest, Redis or the connection is down)"
      : "last frame " + seconds.toFixed(1) + " s ago";
    // Ages in the table keep counting even while no frame arrives.
    if (late && performance.now() - lastTableAt >= TABLE_EVERY_MS) renderTable();
  }

  function onState(state, detail) {
    if (state === "open") {
      // Every connection starts with a snapshot; hold its deltas until that arrives.
      st.haveSnapshot = false;
      st.pending = [];
    }
    els.conn.textContent = L.describeState(state, detail);
    els.conn.className = "conn conn-" + state;
  }

  /* ---- controls -------------------------------------------------------------------- */

  function setUpControls() {
    // Our own hover, from the pointer's position: the tooltip follows the mouse
    // exactly and its numbers refresh with every frame.
    els.heatmap.addEventListener("mousemove", showTooltip);
    els.heatmap.addEventListener("mouseleave", hideTooltip);
    if (!els.metric.querySelector('option[value="' + view.metric + '"]')) view.metric = "util";
    els.metric.value = view.metric;
    els.powerScale.value = view.powerScale;
    els.powerScaleLabel.hidden = view.metric !== "power";
    els.metric.addEventListener("change", function () {
      view.metric = els.metric.value;
      localStorage.setItem("gpulse.heatmap.metric", view.metric);
      els.powerScaleLabel.hidden = view.metric !== "power";
      refreshAllZ();
    });
    els.powerScale.addEventListener("change", function () {
      view.powerScale = els.powerScale.value;
      localStorage.setItem("gpulse.heatmap.power", view.powerScale);
      refreshAllZ();
    });
    els.table.querySelector("thead").addEventListener("click", function (event) {
      const th = event.target.closest("th[data-key]");
      if (!th) return;
      const key = th.dataset.key;
      // Names read best A→Z; for numbers the largest (hottest, busiest) first.
      view.sortDir = key === view.sortKey ? -view.sortDir : key === "name" || key === "status" ? 1 : -1;
      view.sortKey = key;
      markSortedHeader();
      renderTable();
    });
    els.tbody.addEventListener("click", function (event) {
      if (event.target.closest("a")) return;
      const tr = event.target.closest("tr[data-node]");
      if (tr) location.href = nodeUrl(tr.dataset.node);
    });
    els.filter.addEventListener("input", function () {
      view.filter = els.filter.value.trim().toLowerCase();
      renderTable();
    });
    markSortedHeader();
  }

  setUpControls();
  setInterval(showFrameAge, 250);
  socket = L.connect("/ws/cluster/", {
    onMessage: onMessage,
    onState: onState,
  });
})();
