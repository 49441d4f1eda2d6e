/* Node detail: status, live per-GPU charts (15 min), GPU and process tables,
 * bandwidth probes, history.
 *
 * The live charts start from the node's recent points (GET /api/v1/nodes/<name>
 * ?recent=1) and grow from /ws/nodes/<name>/, which sends the full sample
 * whenever the node's sample or status changes. A down node's last values are
 * never shown as if current: its tables say when data stopped instead.
 * History and probes come from GET /api/v1/nodes/<name>, reloaded every minute,
 * for the range in the page's URL (?since=6h, or ?since=&until= in unix seconds),
 * so a reload or a shared link shows the same view.
 * Dashed lines on the charts are the thresholds of the enabled alert rules that
 * apply to the node, and the GPUs with a firing alert are marked, both as the
 * alerts app's Alerts section (node-alert-rules) gives them: node-alerts.js
 * swaps in a fresh section as alerts change and says so ("gpulse:node-alerts").
 */
(function () {
  "use strict";

  const L = window.GpulseFormat;
  const Frames = window.GpulseFrames;
  // Recent points are rows of frames.py FIELDS, in that order.
  const FIELD = Frames.indexFields(Frames.FIELDS);
  const WINDOW_S = 15 * 60;
  // A step longer than this many intervals is a missed sample: draw a gap.
  const GAP_INTERVALS = 2;
  const HISTORY_GAP_S = 2 * 60;
  // Minute rollups and probes change slowly: reload them once a minute.
  const RELOAD_EVERY_MS = 60 * 1000;
  const MIB_PER_GIB = 1024;
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11, color: "#1f2933" };
  const PLOT_CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
  const EMPTY_TEXT = "No history in this range yet";
  const THRESHOLD_COLOUR = "#d1242f";

  // One chart per metric; `row` reads a recent point's row (frames.py FIELDS:
  // util, mem_used MiB, temp, power W, sm_clock, flags), `sample` a v1 GPU.
  const LIVE = [
    { id: "live-util", key: "util", title: "Utilization", unit: "%", digits: 0 },
    { id: "live-mem", key: "mem_used", title: "Memory used", unit: "GiB", digits: 1 },
    { id: "live-temp", key: "temp", title: "Temperature", unit: "°C", digits: 0 },
    { id: "live-power", key: "power", title: "Power", unit: "W", digits: 0 },
  ];
  const HISTORY = [
    { id: "hist-util", key: "util", title: "Utilization", unit: "%", scale: 1, digits: 1 },
    { id: "hist-mem", key: "mem_used", title: "Memory used", unit: "GiB", scale: 1 / L.GIB, digits: 1 },
    { id: "hist-temp", key: "temp", title: "Temperature", unit: "°C", scale: 1, digits: 1 },
    { id: "hist-power", key: "power", title: "Power", unit: "W", scale: 1, digits: 0 },
  ];
  const NO_VALUES = [null, null, null, null];

  const initial = JSON.parse(document.getElementById("node-data").textContent);
  const name = initial.node;
  const query = new URLSearchParams(location.search);
  const since = query.get("since") || "1h";
  const until = query.get("until"); // null: up to now
  // {thresholds: [{chart, value, gpu, label}], firing_gpus: [index]} (dashboard/alerts/templatetags/node_alerts.py)
  let rules = JSON.parse(document.getElementById("node-alert-rules").textContent);
  let firingGpus = new Set(rules.firing_gpus);

  const live = {
    status: initial.status,
    ts: initial.ts,
    interval: initial.interval || 1,
    sample: initial.status === "down" ? null : initial,
    skew: initial.clock_skew, // seconds the node's clock is off while beyond the allowed skew, else null
    restarts: initial.restarts || 0,
    rejected: initial.error || null, // why the API refused its latest sample (cluster.node_view)
    error: null,
  };
  let points = []; // {ts, values: [[util, mem GiB, temp, power] per GPU]}, oldest first
  let chartsQueued = false;
  let lastChartsAt = 0;
  let lastProbe = null; // the newest probe record, its age shown in #probe-last
  let lastHistory = null; // the latest history answer, drawn again when the zoom changes
  // The time range the person zoomed each section's charts to (Plotly dates), null when not zoomed:
  // the charts are redrawn every second or minute, which would otherwise undo the zoom.
  const zoom = { live: null, history: null };
  const zoomWatched = new Set();

  const els = {
    status: document.getElementById("node-status"),
    age: document.getElementById("node-age"),
    restarts: document.getElementById("node-restarts"),
    zone: document.getElementById("time-zone"),
    host: document.getElementById("node-host"),
    banner: document.getElementById("node-banner"),
    conn: document.getElementById("conn-state"),
    gpuBody: document.querySelector("#gpu-table tbody"),
    gpuTable: document.getElementById("gpu-table"),
    procBody: document.querySelector("#proc-table tbody"),
    historyNote: document.getElementById("history-note"),
    probeLast: document.getElementById("probe-last"),
    probeChart: document.getElementById("probe-chart"),
    rangeForm: document.getElementById("range-custom"),
    rangeSince: document.getElementById("range-since"),
    rangeUntil: document.getElementById("range-until"),
    resetZoom: { live: document.getElementById("live-reset-zoom"), history: document.getElementById("history-reset-zoom") },
    legend: { live: document.getElementById("live-legend"), history: document.getElementById("history-legend") },
  };

  const num = L.numberOrNull;

  const when = L.plotlyDate;

  /* ---- live points ------------------------------------------------------------- */

  function sampleValues(sample) {
    return sample.gpus.map(function (gpu) {
      if (gpu.lost) return NO_VALUES;
      const mem = num(gpu.mem_used);
      return [num(gpu.util), mem === null ? null : mem / L.GIB, num(gpu.temp), num(gpu.power)];
    });
  }

  function rowValues(rows) {
    return rows.map(function (row) {
      if (row[FIELD.flags] & Frames.FLAG.LOST) return NO_VALUES;
      const mem = num(row[FIELD.mem_used]);
      return [num(row[FIELD.util]), mem === null ? null : mem / MIB_PER_GIB, num(row[FIELD.temp]), num(row[FIELD.power])];
    });
  }

  /* Chart the sample at ``ts``: where gpulse placed it, its arrival when the node's clock is off. */
  function addSample(ts, sample) {
    const last = points.length ? points[points.length - 1].ts : -Infinity;
    if (ts <= last) return;
    points.push({ ts: ts, values: sampleValues(sample) });
    queueCharts();
  }

  /* Put the recent points older than anything the websocket already delivered in front. */
  function backfill(recent) {
    const first = points.length ? points[0].ts : Infinity;
    const older = [];
    recent.forEach(function (point) {
      if (point[0] < first) older.push({ ts: point[0], values: rowValues(point[1]) });
    });
    points = older.concat(points);
    queueCharts();
  }

  /* The GPUs of the live charts, in the sample's order: their index as the node sends it. */
  function liveGpus() {
    if (live.sample) return live.sample.gpus.map(function (gpu) { return String(gpu.index); });
    let n = 0;
    points.forEach(function (p) { n = Math.max(n, p.values.length); });
    const gpus = [];
    for (let g = 0; g < n; g++) gpus.push(String(g));
    return gpus;
  }

  /* A trace's name: Plotly renders pseudo-HTML in it, and the index is the node's to send. */
  function traceName(gpu) {
    return "GPU " + L.plotlyText(gpu);
  }

  /* ---- the legends: one per section, for its four charts ------------------------------ */

  // The GPUs whose lines a press on the section's legend hid. One HTML legend for the four charts
  // of a section, not a Plotly legend on each: Plotly drew its legends anew with every redraw, a
  // fifth of the node page's drawing time at 2,000 GPUs (issue 18).
  const hiddenGpus = { live: new Set(), history: new Set() };
  const legendShown = { live: "", history: "" };

  /* The section's legend: a button per GPU in its line's colour; ``gpus`` is [[index, colour]]. */
  function showLegend(section, gpus) {
    const signature = JSON.stringify(gpus);
    if (legendShown[section] === signature) return;
    legendShown[section] = signature;
    els.legend[section].replaceChildren.apply(els.legend[section], gpus.map(function (gpu) {
      const button = L.element("button", "legend-item");
      button.type = "button";
      button.dataset.gpu = gpu[0];
      button.setAttribute("aria-pressed", String(!hiddenGpus[section].has(gpu[0])));
      const swatch = L.element("span", "legend-swatch");
      swatch.style.background = gpu[1];
      button.append(swatch, "GPU " + gpu[0]);
      return button;
    }));
  }

  /* Whether GPU ``gpu``'s lines show on the section's charts. */
  function shown(section, gpu) {
    return !hiddenGpus[section].has(String(gpu));
  }

  ["live", "history"].forEach(function (section) {
    els.legend[section].addEventListener("click", function (event) {
      const button = event.target.closest("button[data-gpu]");
      if (!button) return;
      const gpu = button.dataset.gpu;
      if (hiddenGpus[section].has(gpu)) hiddenGpus[section].delete(gpu);
      else hiddenGpus[section].add(gpu);
      button.setAttribute("aria-pressed", String(!hiddenGpus[section].has(gpu)));
      if (section === "live") queueCharts();
      else if (lastHistory) renderHistory(lastHistory);
    });
  });

  function queueCharts() {
    if (!chartsQueued) {
      chartsQueued = true;
      requestAnimationFrame(renderLiveCharts);
    }
  }

  function renderLiveCharts() {
    chartsQueued = false;
    lastChartsAt = performance.now();
    const end = Date.now() / 1000;
    const start = end - WINDOW_S;
    let drop = 0;
    while (drop < points.length && points[drop].ts < start) drop++;
    if (drop) points = points.slice(drop);
    const gpus = liveGpus();
    showLegend("live", gpus.map(function (gpu, g) { return [gpu, COLOURS[g % COLOURS.length]]; }));
    const gapAfter = GAP_INTERVALS * live.interval;
    const limits = yLimits();
    // One time axis for every trace: the points' times, a gap after each missed sample.
    const x = [];
    const at = []; // the point of each x, -1 for a gap
    let previous = null;
    for (let p = 0; p < points.length; p++) {
      const ts = points[p].ts;
      if (previous !== null && ts - previous > gapAfter) {
        x.push(when(previous + live.interval));
        at.push(-1);
      }
      x.push(when(ts));
      at.push(p);
      previous = ts;
    }
    LIVE.forEach(function (chart, k) { inTurn(chart.id, function () {
      const traces = gpus.map(function (gpu, g) {
        const y = at.map(function (p) {
          const values = p < 0 ? null : points[p].values[g];
          return values ? values[k] : null;
        });
        return {
          type: "scatter", mode: "lines", name: traceName(gpu), x: x, y: y, connectgaps: false, visible: shown("live", gpu),
          line: { width: 1.5, color: COLOURS[g % COLOURS.length] },
          hovertemplate: "%{fullData.name}: %{y:." + chart.digits + "f} " + chart.unit + "<extra></extra>",
        };
      });
      draw(chart, traces, chartLayout(chart, zoom.live || [when(start), when(end)], limits[k]), "live");
    }); });
  }

  /* Draw the chart ``id`` (``job``) in an animation frame of its own, one chart a frame for the
   * whole page: four charts drawn in one task held the page for 50–120 ms every second, and
   * the live, history and probe charts asking at once (as the page loads) put two or three in
   * one frame (issue 18). A newer drawing of a chart replaces its waiting one, in its place.
   * Only charts near the screen are drawn, as Grafana draws only the panels in view: a chart
   * further than a screen's height away keeps its latest drawing waiting until it is scrolled
   * near. The history charts, below the tables, cost 13–61 ms a drawing on a slow 2-core machine
   * as the page loads (docs/PERFORMANCE.md). The first turn waits for Plotly, which loads in
   * stages, a task each (vendor/plotly/index.js). */
  const turns = new Map(); // chart id -> its waiting job, in the order asked
  const near = new Set(); // ids of the charts within a screen's height of the screen
  let turnQueued = false;

  const nearScreen = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) near.add(entry.target.id);
      else near.delete(entry.target.id);
    });
    queueTurn();
  }, { rootMargin: "100% 0px" });
  LIVE.concat(HISTORY).forEach(function (chart) { nearScreen.observe(document.getElementById(chart.id)); });
  nearScreen.observe(els.probeChart);

  function inTurn(id, job) {
    turns.set(id, job);
    queueTurn();
  }

  /* The id of the first waiting chart near the screen, or null. */
  function nextNear() {
    for (const id of turns.keys()) if (near.has(id)) return id;
    return null;
  }

  function queueTurn() {
    if (turnQueued || nextNear() === null) return;
    turnQueued = true;
    window.GpulsePlotly.then(function () { requestAnimationFrame(nextTurn); });
  }

  function nextTurn() {
    turnQueued = false;
    const id = nextNear();
    if (id === null) return; // scrolled away meanwhile
    const job = turns.get(id);
    turns.delete(id);
    queueTurn();
    job();
  }

  /* Fixed y ranges where the hardware sets one, so lines do not jump around. */
  function yLimits() {
    let memTotal = 0, powerLimit = 0;
    if (live.sample) {
      live.sample.gpus.forEach(function (gpu) {
        memTotal = Math.max(memTotal, num(gpu.mem_total) || 0);
        powerLimit = Math.max(powerLimit, num(gpu.power_limit) || 0);
      });
    }
    return [
      [0, 105],
      memTotal ? [0, (memTotal / L.GIB) * 1.02] : null,
      null,
      powerLimit ? [0, powerLimit * 1.05] : null,
    ];
  }

  /* The layout of a time chart; a drag zooms its time axis only (yaxis fixedrange). */
  function chartLayout(chart, xrange, yrange) {
    return {
      height: 250,
      margin: { l: 46, r: 28, t: 30, b: 36 },
      font: FONT,
      title: { text: chart.title + " (" + chart.unit + ")", x: 0.01, xanchor: "left", y: 0.97, font: { size: 13 } },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "#ffffff",
      // Tick labels are drawn without Plotly's check that each stays inside the chart, which measured
      // every label once per label placed (issue 18): the margins leave them room.
      xaxis: { type: "date", range: xrange, gridcolor: "#e8ecf0", linecolor: "#c9d1d9", ticklabeloverflow: "allow" },
      yaxis: yrange
        ? { range: yrange, autorange: false, fixedrange: true, gridcolor: "#e8ecf0", zeroline: false, ticklabeloverflow: "allow" }
        : { autorange: true, rangemode: "tozero", fixedrange: true, gridcolor: "#e8ecf0", zeroline: false, ticklabeloverflow: "allow" },
      shapes: thresholdShapes(chart.key),
      hovermode: "x unified",
      showlegend: false, // the section's legend (showLegend)
    };
  }

  /* A dashed line across the chart at each applicable rule's threshold, labelled with the rule. */
  function thresholdShapes(key) {
    return rules.thresholds.filter(function (rule) { return rule.chart === key; }).map(function (rule) {
      // Rule names are people's to choose: escaped for Plotly's pseudo-HTML.
      const label = rule.label + (rule.gpu === null ? "" : ", GPU " + rule.gpu);
      return {
        type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: rule.value, y1: rule.value,
        line: { color: THRESHOLD_COLOUR, width: 1, dash: "dash" },
        label: { text: L.plotlyText(label), textposition: "end", yanchor: "bottom", font: { size: 10, color: THRESHOLD_COLOUR } },
      };
    });
  }

  const firstDrawn = new Map(); // chart id -> how many parts of its first drawing it has had (first-drawing.js)

  /* Draw a chart, or where no trace has a value, say so in place of empty axes. */
  function draw(chart, traces, layout, section) {
    const empty = !traces.some(function (trace) { return trace.y.some(function (v) { return v !== null; }); });
    if (empty) {
      traces = [];
      layout.xaxis.visible = layout.yaxis.visible = false;
      layout.shapes = [];
      layout.annotations = [{ text: EMPTY_TEXT, xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false, font: { size: 13, color: "#57606a" } }];
    }
    const turn = firstDrawn.get(chart.id) || 0;
    const parts = empty ? [] : window.GpulseFirstDrawing.parts(traces, layout);
    if (turn < parts.length) {
      // The first drawing with lines, a part a turn; a newer drawing of the chart, asked
      // meanwhile, takes the rest's place and goes on from there.
      firstDrawn.set(chart.id, turn + 1);
      Plotly.react(chart.id, parts[turn][0], parts[turn][1], PLOT_CONFIG);
      inTurn(chart.id, function () { draw(chart, traces, layout, section); });
    } else {
      // Axes with a message only: the frame of a first drawing, which its lines need not draw again.
      if (empty) firstDrawn.set(chart.id, Math.max(turn, 1));
      Plotly.react(chart.id, traces, layout, PLOT_CONFIG);
    }
    watchZoom(document.getElementById(chart.id), section);
  }

  /* Follow the person's zoom on a chart: every chart of its section shows that time range. */
  function watchZoom(gd, section) {
    if (zoomWatched.has(gd)) return;
    zoomWatched.add(gd);
    gd.on("plotly_relayout", function (event) {
      if ("xaxis.range[0]" in event) setZoom(section, [event["xaxis.range[0]"], event["xaxis.range[1]"]]);
      else if (Array.isArray(event["xaxis.range"])) setZoom(section, event["xaxis.range"].slice());
      else if (event["xaxis.autorange"]) setZoom(section, null); // a double-click resets, as the button does
    });
  }

  function setZoom(section, range) {
    zoom[section] = range;
    els.resetZoom[section].hidden = !range;
    if (section === "live") queueCharts();
    else if (lastHistory) renderHistory(lastHistory);
  }

  /* ---- status and tables ---------------------------------------------------------- */

  function onMessage(text) {
    const message = JSON.parse(text);
    if (message.type !== "node") return;
    window.GpulseNodeHealth.nodeMessage(message);
    if (message.error) {
      live.error = message.error;
      renderStatus();
      return;
    }
    live.error = null;
    live.status = message.status;
    live.ts = message.ts === null || message.ts === undefined ? live.ts : message.ts;
    live.sample = message.sample;
    live.skew = message.clock_skew;
    live.restarts = message.restarts || 0;
    if (message.sample) live.rejected = null;
    if (message.sample) {
      live.interval = message.sample.interval || live.interval;
      addSample(live.ts, message.sample);
    }
    renderStatus();
    renderTables();
  }

  function renderStatus() {
    const status = live.error ? "unknown" : live.status;
    els.status.textContent = status;
    els.status.className = "status status-" + status;
    const age = live.ts ? Date.now() / 1000 - live.ts : null;
    let banner = "";
    let level = "";
    if (live.error) {
      banner = "Live data unavailable: " + live.error + ". The values below may be old.";
      level = "warn";
    } else if (live.status === "down") {
      if (live.rejected) banner = "Down: its latest sample was rejected (" + live.rejected + ").";
      else if (live.ts) banner = "Down: no data since " + L.dateTime(live.ts) + " (" + L.age(age) + " ago). Its latest sample expired, so no values are shown.";
      else banner = "Down: gpulse has no data from this node.";
      level = "error";
    } else if (live.status === "stale") {
      banner = "Stale: the latest sample is " + L.age(age) + " old (expected every " + live.interval + " s); the values below are from " + L.clockTime(live.ts) + ".";
      level = "warn";
    }
    if (L.isNum(live.skew) && live.status !== "down") {
      banner += (banner ? " " : "") + "Clock skew " + L.skew(live.skew) + ": this node's clock is " + L.age(Math.abs(live.skew)) +
        (live.skew < 0 ? " behind" : " ahead of") + " gpulse's, so its samples are placed at the time they arrived.";
      level = level || "warn";
    }
    els.banner.hidden = !banner;
    els.banner.textContent = banner;
    els.banner.className = "banner " + level;
    els.banner.title = live.ts ? "latest sample: " + L.utcTime(live.ts) : "";
    els.restarts.hidden = !live.restarts;
    els.restarts.textContent = live.restarts ? "collector restarted " + live.restarts + (live.restarts === 1 ? " time" : " times") : "";
    els.age.textContent = live.status === "down" ? "" : "last sample " + L.age(age) + " ago";
    els.gpuTable.classList.toggle("stale", live.status === "stale" || Boolean(live.error));
    const host = live.sample && live.sample.host;
    els.host.textContent = host
      ? "host CPU " + L.fixed(num(host.cpu_util), 0) + " % · memory " + L.gib(num(host.mem_used), 0) + " / " + L.gib(num(host.mem_total), 0) + " GiB"
      : "";
  }

  function na() {
    return '<span class="na" title="This GPU or its driver does not report it">not supported</span>';
  }

  function value(v, digits) {
    return num(v) === null ? na() : v.toFixed(digits);
  }

  function pair(a, b, format) {
    if (num(a) === null && num(b) === null) return na();
    return (num(a) === null ? "—" : format(a)) + " / " + (num(b) === null ? "—" : format(b));
  }

  function gib(bytes) {
    return (bytes / L.GIB).toFixed(1);
  }

  function round(v) {
    return String(Math.round(v));
  }

  function throttleText(reasons) {
    if (!Array.isArray(reasons)) return na();
    if (!reasons.length) return '<span class="muted">none</span>';
    return reasons.map(function (reason) {
      const slowdown = reason !== "gpu_idle" && reason !== "applications_clocks_setting";
      return '<span class="' + (slowdown ? "warn-text" : "muted") + '">' + L.escapeHtml(String(reason).replace(/_/g, " ")) + "</span>";
    }).join(", ");
  }

  function xidText(xids) {
    if (!Array.isArray(xids)) return na();
    if (!xids.length) return '<span class="muted">none</span>';
    return '<span class="error-text">' + xids.map(function (x) {
      return L.escapeHtml(typeof x === "object" && x !== null ? x.code || JSON.stringify(x) : x);
    }).join(", ") + "</span>";
  }

  function gpuRow(gpu) {
    const alerting = firingGpus.has(gpu.index);
    const mark = alerting ? ' <b class="tag tag-alert" title="An alert is firing on this GPU: see Alerts above">ALERT</b>' : "";
    const head = '<td class="num">' + L.escapeHtml(gpu.index) + mark + "</td><td>" + L.escapeHtml(gpu.name || "") + "</td>";
    if (gpu.lost) {
      return '<tr class="lost">' + head + '<td colspan="11"><b class="status status-down">LOST</b> the GPU fell off the bus: no readings</td></tr>';
    }
    const ecc = num(gpu.ecc_uncorrected);
    return (alerting ? '<tr class="alerting">' : "<tr>") + head +
      '<td class="num">' + value(gpu.util, 0) + "</td>" +
      '<td class="num">' + pair(gpu.mem_used, gpu.mem_total, gib) + "</td>" +
      '<td class="num">' + value(gpu.temp, 0) + "</td>" +
      '<td class="num">' + pair(gpu.power, gpu.power_limit, round) + "</td>" +
      '<td class="num">' + pair(gpu.sm_clock, gpu.mem_clock, round) + "</td>" +
      '<td class="num">' + value(gpu.fan, 0) + "</td>" +
      "<td>" + throttleText(gpu.throttle) + "</td>" +
      '<td class="num">' + (ecc === null ? na() : ecc > 0 ? '<span class="error-text">' + L.escapeHtml(ecc) + "</span>" : "0") + "</td>" +
      "<td>" + xidText(gpu.xid) + "</td>" +
      '<td class="num">' + pair(gpu.pcie_tx, gpu.pcie_rx, L.rate) + "</td>" +
      '<td class="num">' + pair(gpu.nvlink_tx, gpu.nvlink_rx, L.rate) + "</td>" +
      "</tr>";
  }

  function renderTables() {
    const sample = live.sample;
    if (!sample) {
      const why = live.ts ? "No current data: the node has sent nothing since " + L.dateTime(live.ts) + "." : "No data from this node.";
      els.gpuBody.innerHTML = '<tr><td colspan="13" class="empty">' + why + "</td></tr>";
      els.procBody.innerHTML = '<tr><td colspan="5" class="empty">' + why + "</td></tr>";
      return;
    }
    els.gpuBody.innerHTML = sample.gpus.map(gpuRow).join("");
    const procs = [];
    let supported = false;
    sample.gpus.forEach(function (gpu) {
      if (!Array.isArray(gpu.processes)) return;
      supported = true;
      gpu.processes.forEach(function (p) { procs.push([gpu.index, p]); });
    });
    if (!procs.length) {
      const text = supported ? "No processes on this node's GPUs." : "The GPUs do not report processes (not supported).";
      els.procBody.innerHTML = '<tr><td colspan="5" class="empty">' + text + "</td></tr>";
      return;
    }
    procs.sort(function (a, b) { return a[0] - b[0] || (b[1].mem_used || 0) - (a[1].mem_used || 0); });
    els.procBody.innerHTML = procs.map(function (entry) {
      const p = entry[1];
      return '<tr><td class="num">' + L.escapeHtml(entry[0]) + '</td><td class="num">' + L.escapeHtml(p.pid) + "</td><td>" +
        L.escapeHtml(p.user || "—") + "</td><td>" + L.escapeHtml(p.name || "—") + '</td><td class="num">' +
        (num(p.mem_used) === null ? na() : gib(p.mem_used)) + "</td></tr>";
    }).join("");
  }

  /* ---- history ---------------------------------------------------------------------- */

  /* Fetch the history range and the probes; withRecent also backfills the live charts. */
  function loadHistory(withRecent) {
    const url = "/api/v1/nodes/" + encodeURIComponent(name) + "?since=" + encodeURIComponent(since) +
      (until ? "&until=" + encodeURIComponent(until) : "") + (withRecent ? "&recent=1" : "");
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error(body.error || "HTTP " + response.status);
          return body;
        });
      })
      .then(function (body) {
        if (body.recent) backfill(body.recent);
        els.historyNote.hidden = true;
        lastHistory = body.history;
        renderHistory(body.history);
        showRange(body.history);
        renderProbes(body.probes || []);
      })
      .catch(function (error) {
        els.historyNote.hidden = false;
        els.historyNote.textContent = "History unavailable: " + error.message;
      });
  }

  function alpha(hex, a) {
    return "rgba(" + L.rgb(hex).join(",") + "," + a + ")";
  }

  function renderHistory(history) {
    const gpus = history.gpus || [];
    if (!gpus.length) {
      els.historyNote.hidden = false;
      els.historyNote.textContent =
        "No minute rollups in this range yet: ingest writes one per GPU and minute, about two minutes after the minute ends.";
    }
    const xrange = zoom.history || [when(history.since), when(history.until)];
    showLegend("history", gpus.map(function (series) { return [String(series.gpu), COLOURS[series.gpu % COLOURS.length]]; }));
    HISTORY.forEach(function (chart) { inTurn(chart.id, function () {
      const traces = [];
      gpus.forEach(function (series) {
        const colour = COLOURS[series.gpu % COLOURS.length];
        const x = [], low = [], mean = [], high = [];
        let previous = null;
        series.ts.forEach(function (ts, i) {
          if (previous !== null && ts - previous > HISTORY_GAP_S) {
            x.push(when(previous + 60));
            low.push(null); mean.push(null); high.push(null);
          }
          const triple = series[chart.key][i];
          x.push(when(ts));
          low.push(triple[0] === null ? null : triple[0] * chart.scale);
          mean.push(triple[1] === null ? null : triple[1] * chart.scale);
          high.push(triple[2] === null ? null : triple[2] * chart.scale);
          previous = ts;
        });
        const visible = shown("history", series.gpu);
        const band = { type: "scatter", mode: "lines", x: x, visible: visible, hoverinfo: "skip", line: { width: 0, color: colour } };
        traces.push(Object.assign({}, band, { y: low }));
        traces.push(Object.assign({}, band, { y: high, fill: "tonexty", fillcolor: alpha(colour, 0.15) }));
        traces.push({
          type: "scatter", mode: "lines", name: traceName(series.gpu), visible: visible, x: x, y: mean,
          customdata: low.map(function (v, i) { return [v, high[i]]; }),
          line: { width: 1.5, color: colour },
          hovertemplate: "%{fullData.name}: %{y:." + chart.digits + "f} " + chart.unit +
            " (%{customdata[0]:." + chart.digits + "f}–%{customdata[1]:." + chart.digits + "f})<extra></extra>",
        });
      });
      draw(chart, traces, chartLayout(chart, xrange, chart.key === "util" ? [0, 105] : null), "history");
    }); });
  }

  /* ---- the custom range (?since=&until= in unix seconds) --------------------------------- */

  /* A unix time as a datetime-local input's value, in the browser's zone. */
  function localInput(ts) {
    return when(ts).slice(0, 16).replace(" ", "T");
  }

  /* Fill the from/to inputs with the range shown, once: later reloads must not undo an edit. */
  function showRange(history) {
    if (els.rangeSince.value || els.rangeUntil.value) return;
    els.rangeSince.value = localInput(history.since);
    els.rangeUntil.value = localInput(history.until);
  }

  els.rangeForm.addEventListener("submit", function (event) {
    event.preventDefault();
    // datetime-local values carry no zone: Date reads them in the browser's, as they were shown.
    const from = new Date(els.rangeSince.value).getTime() / 1000;
    const to = new Date(els.rangeUntil.value).getTime() / 1000;
    if (!(from < to)) {
      els.rangeUntil.setCustomValidity("Pick a time after the start");
      els.rangeUntil.reportValidity();
      return;
    }
    location.search = "?" + new URLSearchParams({ since: String(from), until: String(to) }).toString();
  });
  els.rangeUntil.addEventListener("input", function () { els.rangeUntil.setCustomValidity(""); });

  /* ---- bandwidth probes (collectors/probe.py records, oldest first) ---------------------- */

  function renderProbes(probes) {
    lastProbe = probes.length ? probes[probes.length - 1] : null;
    renderLastProbe();
    if (!probes.length) {
      els.probeChart.hidden = true;
      return;
    }
    const ok = { x: [], y: [], text: [] };
    const failed = { x: [], y: [], text: [] };
    probes.forEach(function (probe) {
      const x = when(probe.ts);
      // Hover text: Plotly renders pseudo-HTML in it, and probe records come from the node.
      const where = L.plotlyText(probe.backend + ", " + (probe.world_size ? probe.world_size + " ranks" : "ranks unknown"));
      if (probe.status === "succeeded" && num(probe.busbw) !== null) {
        ok.x.push(x);
        ok.y.push(probe.busbw);
        ok.text.push(where);
      } else {
        failed.x.push(x);
        failed.y.push(0); // a failed probe has no bandwidth: mark it on the axis
        failed.text.push(L.plotlyText(probe.status + (probe.reason ? ": " + probe.reason : "")) + " (" + where + ")");
      }
    });
    const traces = [
      {
        type: "scatter", mode: "lines+markers", name: "busbw", x: ok.x, y: ok.y, text: ok.text,
        line: { width: 1.5, color: COLOURS[0] }, marker: { size: 5 },
        hovertemplate: "%{y:.1f} GB/s · %{text}<extra></extra>",
      },
      {
        type: "scatter", mode: "markers", name: "failed", x: failed.x, y: failed.y, text: failed.text,
        marker: { symbol: "x", size: 9, color: "#d1242f" },
        hovertemplate: "%{text}<extra></extra>",
      },
    ];
    els.probeChart.hidden = false;
    const layout = chartLayout({ title: "Bus bandwidth", unit: "GB/s" }, null, null);
    layout.xaxis.autorange = true;
    layout.hovermode = "closest";
    layout.showlegend = failed.x.length > 0;
    inTurn(els.probeChart.id, function () { Plotly.react(els.probeChart, traces, layout, PLOT_CONFIG); });
  }

  function renderLastProbe() {
    const probe = lastProbe;
    if (!probe) {
      els.probeLast.className = "muted";
      els.probeLast.textContent = "no probe yet (collector --probe-interval, default 10 min)";
      return;
    }
    const succeeded = probe.status === "succeeded";
    const parts = [
      succeeded ? L.fixed(num(probe.busbw), 1) + " GB/s" : "no bandwidth",
      probe.backend,
    ];
    if (probe.world_size) parts.push(probe.world_size + " ranks");
    parts.push(L.age(Date.now() / 1000 - probe.ts) + " ago");
    let state = probe.status + (probe.reason ? ": " + probe.reason : "");
    if (succeeded && probe.wrong) state += ", " + probe.wrong + " wrong results";
    els.probeLast.className = succeeded && !probe.wrong ? "" : "error-text";
    els.probeLast.textContent = "last probe: " + parts.join(", ") + " · " + state;
  }

  /* ---- start --------------------------------------------------------------------------- */

  function tick() {
    renderStatus();
    if (lastProbe) renderLastProbe();
    // Slide the 15-minute window even when nothing arrives (a down node's gap grows).
    if (performance.now() - lastChartsAt > 2000) queueCharts();
  }

  document.addEventListener("gpulse:node-alerts", function () {
    rules = JSON.parse(document.getElementById("node-alert-rules").textContent);
    firingGpus = new Set(rules.firing_gpus);
    renderTables();
    queueCharts();
    if (lastHistory) renderHistory(lastHistory);
  });

  ["live", "history"].forEach(function (section) {
    els.resetZoom[section].addEventListener("click", function () { setZoom(section, null); });
  });
  els.zone.textContent = "times in " + L.zoneName();
  els.zone.title = "This browser's time zone; the banner's tooltip gives the time in UTC";
  if (live.sample && live.ts) addSample(live.ts, live.sample);
  renderStatus();
  renderTables();
  loadHistory(true);
  setInterval(tick, 1000);
  setInterval(loadHistory, RELOAD_EVERY_MS, false);
  window.GpulseSocket.connect("/ws/nodes/" + encodeURIComponent(name) + "/", {
    onMessage: onMessage,
    onState: function (state, detail) { window.GpulseSocket.showState(els.conn, state, detail); },
  });
})();
