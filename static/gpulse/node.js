/* Node detail: status, live per-GPU charts (15 min), GPU and process tables,
 * bandwidth probes, history. The charts are uPlot's (time-chart.js): the live
 * ones are redrawn every second, where Plotly's redraws made long tasks (issue 18).
 *
 * The live charts start from the node's recent points (GET /api/v1/nodes/<name>
 * ?recent=1) and grow from /ws/nodes/<name>/, which sends the full sample
 * whenever the node's sample or status changes. A down node's last values are
 * never shown as if current: its tables say when data stopped instead.
 * History and probes come from GET /api/v1/nodes/<name>, reloaded every minute,
 * for the range in the page's URL (?since=6h, or ?since=&until= in unix seconds),
 * so a reload or a shared link shows the same view: minute rollups up to 7 days, hourly ones
 * beyond (the answer's "rollups"), in wider buckets where a range holds more than 720 of them
 * (its "resolution"), and older ones from the long-term store where one is set (its "source");
 * the section names all three.
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
  // A history point missing for longer than this many of its steps (a minute or an hour) is a gap.
  const HISTORY_GAP_STEPS = 2;
  // What the history section calls its points, by their step in seconds.
  // What a history point is: a rollup row, or a wider bucket of them (a long range; history.resolution, s).
  const BUCKET_NAMES = { 300: "5-minute", 900: "15-minute", 21600: "6-hour", 86400: "daily" };
  // Minute rollups and probes change slowly: reload them once a minute.
  const RELOAD_EVERY_MS = 60 * 1000;
  const MIB_PER_GIB = 1024;
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const EMPTY_TEXT = "No history in this range yet";
  const FAILED_COLOUR = "#d1242f";

  // One chart per metric; `row` reads a recent point's row (frames.py FIELDS:
  // util, mem_used MiB, temp, power W, sm_clock, sm_active %, flags), `sample` a v1 GPU.
  // The activity charts (GPM or DCGM profiling, ratios in the sample, drawn in %) are empty on a GPU
  // that does not report them; recent points carry SM activity only, so the tensor and DRAM lines
  // start when the page opens.
  const LIVE = [
    { id: "live-util", key: "util", title: "Utilization", unit: "%", digits: 0 },
    { id: "live-mem", key: "mem_used", title: "Memory used", unit: "GiB", digits: 1 },
    { id: "live-temp", key: "temp", title: "Temperature", unit: "°C", digits: 0 },
    { id: "live-power", key: "power", title: "Power", unit: "W", digits: 0 },
    { id: "live-sm", key: "sm_active", title: "SM activity", unit: "%", digits: 0 },
    { id: "live-tensor", key: "tensor_active", title: "Tensor activity", unit: "%", digits: 0 },
    { id: "live-dram", key: "dram_active", title: "DRAM activity", unit: "%", digits: 0 },
  ];
  const HISTORY = [
    { id: "hist-util", key: "util", title: "Utilization", unit: "%", scale: 1, digits: 1 },
    { id: "hist-mem", key: "mem_used", title: "Memory used", unit: "GiB", scale: 1 / L.GIB, digits: 1 },
    { id: "hist-temp", key: "temp", title: "Temperature", unit: "°C", scale: 1, digits: 1 },
    { id: "hist-power", key: "power", title: "Power", unit: "W", scale: 1, digits: 0 },
    { id: "hist-sm", key: "sm_active", title: "SM activity", unit: "%", scale: 100, digits: 1 },
    { id: "hist-tensor", key: "tensor_active", title: "Tensor activity", unit: "%", scale: 100, digits: 1 },
    { id: "hist-dram", key: "dram_active", title: "DRAM activity", unit: "%", scale: 100, digits: 1 },
  ];
  // The charts drawn from 0 to 100 %.
  const PERCENT_KEYS = new Set(["util", "sm_active", "tensor_active", "dram_active"]);
  const NO_VALUES = LIVE.map(function () { return null; });

  /* The time charts of a section: the live or the history ones. */
  function timeCharts(section, charts) {
    return charts.map(function (chart) {
      return new window.GpulseTimeChart(document.getElementById(chart.id), {
        title: chart.title + " (" + chart.unit + ")", unit: chart.unit, digits: chart.digits, emptyText: EMPTY_TEXT,
        onZoom: function (range) { setZoom(section, range); },
      });
    });
  }
  const liveCharts = timeCharts("live", LIVE);
  const historyCharts = timeCharts("history", HISTORY);

  const initial = JSON.parse(document.getElementById("node-data").textContent);
  const name = initial.node;
  const query = new URLSearchParams(location.search);
  const since = query.get("since") || "1h";
  const until = query.get("until"); // null: up to now
  // {thresholds: [{chart, value, gpu, label}], firing_gpus: [index]} (dashboard/alerts/templatetags/node_alerts.py)
  let rules = JSON.parse(document.getElementById("node-alert-rules").textContent);
  let firingGpus = new Set(rules.firing_gpus);
  // The GPUs ingest flags "kernels run, SMs idle" (frames FLAG_SM_IDLE, gpulse/activity.py), as the node's
  // websocket message names them (sm_idle_gpus: [index]); none where it names none.
  let smIdleGpus = idleGpus(initial.sm_idle_gpus);

  const live = {
    status: initial.status,
    ts: initial.ts,
    interval: initial.interval || 1,
    sample: initial.status === "down" ? null : initial,
    skew: initial.clock_skew, // seconds the node's clock is off while beyond the allowed skew, else null
    restarts: initial.restarts || 0,
    twin: initial.twin_collectors || null, // since when a second collector reports as this node, else null
    rejected: initial.error || null, // why the API refused its latest sample (cluster.node_view)
    error: null,
  };
  let points = []; // {ts, values: [[util, mem GiB, temp, power] per GPU]}, oldest first
  let chartsQueued = false;
  let lastChartsAt = 0;
  let lastProbe = null; // the newest probe record, its age shown in #probe-last
  let lastHistory = null; // the latest history answer, drawn again when the zoom changes
  // The time range the person zoomed each section's charts to (unix seconds), null when not zoomed:
  // the charts are redrawn every second or minute, which would otherwise undo the zoom.
  const zoom = { live: null, history: null };

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
    migPanel: document.getElementById("mig-panel"),
    migBody: document.querySelector("#mig-table tbody"),
    historyNote: document.getElementById("history-note"),
    historyResolution: document.getElementById("history-resolution"),
    probeLast: document.getElementById("probe-last"),
    probeChart: document.getElementById("probe-chart"),
    rangeForm: document.getElementById("range-custom"),
    rangeSince: document.getElementById("range-since"),
    rangeUntil: document.getElementById("range-until"),
    resetZoom: { live: document.getElementById("live-reset-zoom"), history: document.getElementById("history-reset-zoom") },
    legend: { live: document.getElementById("live-legend"), history: document.getElementById("history-legend") },
  };

  const num = L.numberOrNull;
  // A process's command line, shown cut to this many characters (the whole, as the sample bounds it, on hover).
  const CMD_SHOWN = 80;
  const PROC_COLUMNS = 9; // live/_process_columns.html

  /* ---- live points ------------------------------------------------------------- */

  function sampleValues(sample) {
    return sample.gpus.map(function (gpu) {
      if (gpu.lost) return NO_VALUES;
      const mem = num(gpu.mem_used);
      return [num(gpu.util), mem === null ? null : mem / L.GIB, num(gpu.temp), num(gpu.power),
        percent(gpu.sm_active), percent(gpu.tensor_active), percent(gpu.dram_active)];
    });
  }

  /* A ratio 0-1 as %, null where not reported. */
  function percent(ratio) {
    const v = num(ratio);
    return v === null ? null : v * 100;
  }

  function rowValues(rows) {
    return rows.map(function (row) {
      if (row[FIELD.flags] & Frames.FLAG.LOST) return NO_VALUES;
      const mem = num(row[FIELD.mem_used]);
      // A point an ingest from before sm_active wrote is shorter: its flags sit where sm_active is now.
      const sm = row.length === Frames.FIELDS.length ? num(row[FIELD.sm_active]) : null;
      return [num(row[FIELD.util]), mem === null ? null : mem / MIB_PER_GIB, num(row[FIELD.temp]), num(row[FIELD.power]),
        sm, null, null];
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

  /* ---- the legends: one per section, for its charts ----------------------------------- */

  // The GPUs whose lines a press on the section's legend hid. One HTML legend for all the charts
  // of a section, not one on each: when the charts were Plotly's, it drew its legends anew with
  // every redraw, a fifth of the node page's drawing time at 2,000 GPUs (issue 18).
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
        x.push(previous + live.interval);
        at.push(-1);
      }
      x.push(ts);
      at.push(p);
      previous = ts;
    }
    LIVE.forEach(function (chart, k) { inTurn(chart.id, function () {
      liveCharts[k].update({
        x: x,
        lines: gpus.map(function (gpu, g) {
          const y = at.map(function (p) {
            const values = p < 0 ? null : points[p].values[g];
            return values ? values[k] : null;
          });
          return { label: "GPU " + gpu, colour: COLOURS[g % COLOURS.length], show: shown("live", gpu), y: y };
        }),
        xrange: zoom.live || [start, end],
        yrange: limits[k],
        thresholds: thresholds(chart.key),
      });
    }); });
  }

  /* Draw the chart ``id`` (``job``) in an animation frame of its own, one chart a frame for the
   * whole page, so that the live, history and probe charts asking at once (as the page loads)
   * never share a task (issue 18). A newer drawing of a chart replaces its waiting one, in its
   * place. Only charts near the screen are drawn, as Grafana draws only the panels in view: a
   * chart further than a screen's height away keeps its latest drawing waiting until it is
   * scrolled near (when the charts were Plotly's, the history charts below the tables cost
   * 13–61 ms a drawing as the page loaded, docs/PERFORMANCE.md). */
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
    requestAnimationFrame(nextTurn);
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
      [0, 105],
      [0, 105],
      [0, 105],
    ];
  }

  /* The thresholds of the rules that apply to the chart of metric ``key``: [{value, label}]. */
  function thresholds(key) {
    return rules.thresholds.filter(function (rule) { return rule.chart === key; }).map(function (rule) {
      return { value: rule.value, label: rule.label + (rule.gpu === null ? "" : ", GPU " + rule.gpu) };
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
    live.twin = message.twin_collectors || null;
    smIdleGpus = idleGpus(message.sm_idle_gpus);
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
    if (L.isNum(live.twin)) {
      banner += (banner ? " " : "") + "Warning: two collectors report as this node (since " + L.dateTime(live.twin) +
        "). Only one collector's samples count for usage; stop the other, or give it its own node name and credential.";
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

  /* The GPU indexes of a message's sm_idle_gpus; a hostile or older server's anything else is none. */
  function idleGpus(indexes) {
    return new Set(Array.isArray(indexes) ? indexes.filter(Number.isInteger) : []);
  }

  function gpuRow(gpu) {
    const alerting = firingGpus.has(gpu.index);
    const mark = (alerting ? ' <b class="tag tag-alert" title="An alert is firing on this GPU: see Alerts above">ALERT</b>' : "") +
      (smIdleGpus.has(gpu.index) ? ' <b class="tag tag-sm-idle" title="Kernels run, SMs idle: utilization ≥ 90 % while ' +
        'SM activity < 20 % for a minute (a stalled data loader, a job spinning)">SM IDLE</b>' : "");
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
    window.GpulseNodeMig.render(els.migPanel, els.migBody, sample, processJob);
    if (!sample) {
      const why = live.ts ? "No current data: the node has sent nothing since " + L.dateTime(live.ts) + "." : "No data from this node.";
      els.gpuBody.innerHTML = '<tr><td colspan="13" class="empty">' + why + "</td></tr>";
      els.procBody.innerHTML = '<tr><td colspan="' + PROC_COLUMNS + '" class="empty">' + why + "</td></tr>";
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
      els.procBody.innerHTML = '<tr><td colspan="' + PROC_COLUMNS + '" class="empty">' + text + "</td></tr>";
      return;
    }
    procs.sort(function (a, b) { return a[0] - b[0] || (b[1].mem_used || 0) - (a[1].mem_used || 0); });
    els.procBody.innerHTML = procs.map(function (entry) {
      const p = entry[1];
      const cmd = nodeText(p.cmd);
      return '<tr><td class="num">' + L.escapeHtml(entry[0]) + '</td><td class="num">' + L.escapeHtml(p.pid) + "</td><td>" +
        L.escapeHtml(nodeText(p.user) || "—") + '</td><td class="proc-job">' + L.escapeHtml(processJob(p) || "—") + "</td><td>" +
        L.escapeHtml(nodeText(p.name) || "—") + '</td><td class="proc-cmd" title="' + L.escapeHtml(cmd) + '">' +
        L.escapeHtml(cut(cmd, CMD_SHOWN) || "—") + '</td><td class="num">' +
        (num(p.mem_used) === null ? na() : gib(p.mem_used)) + '</td><td class="num proc-sm">' + share(p.sm_util) +
        '</td><td class="num proc-mem">' + share(p.mem_util) + "</td></tr>";
    }).join("");
  }

  /* A process's share of its GPU (%): "—" where the driver has no sample for it (idle, or not offered). */
  function share(v) {
    return num(v) === null ? "—" : L.escapeHtml(Math.round(v));
  }

  /* A string the node sent, else "" (a hostile node may send anything: it is escaped where shown). */
  function nodeText(value) {
    return typeof value === "string" ? value : "";
  }

  /* ``value`` at most ``length`` characters, an ellipsis saying where it was cut. */
  function cut(value, length) {
    return value.length > length ? value.slice(0, length - 1) + "…" : value;
  }

  /* Whose work the process is: the Slurm job and step ("41002.0"), else the Kubernetes container and pod. */
  function processJob(p) {
    const job = nodeText(p.job), step = nodeText(p.step);
    if (job) return step ? job + "." + step : job;
    const container = nodeText(p.container), pod = nodeText(p.pod_uid);
    if (container || pod) return (container || "container") + (pod ? " (pod " + cut(pod, 9) + ")" : "");
    return "";
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

  /* The history's times: every minute (or hour: the step) any GPU has, oldest first, and a gap's time
   * after each one followed by none for longer than HISTORY_GAP_STEPS steps; the charts draw a gap there. */
  function historyTimes(gpus, step) {
    const minutes = new Set();
    gpus.forEach(function (series) { series.ts.forEach(function (ts) { minutes.add(ts); }); });
    const sorted = Array.from(minutes).sort(function (a, b) { return a - b; });
    const x = [];
    sorted.forEach(function (ts, i) {
      if (i && ts - sorted[i - 1] > HISTORY_GAP_STEPS * step) x.push(sorted[i - 1] + step);
      x.push(ts);
    });
    return x;
  }

  function renderHistory(history) {
    const gpus = history.gpus || [];
    const step = history.resolution;
    const rollups = history.rollups + " rollups";
    els.historyResolution.textContent = (BUCKET_NAMES[step] ? BUCKET_NAMES[step] + " buckets of " + rollups : rollups) +
      // Where the store's part ends (the database's retention), so a person can tell which points are whose.
      (history.source === "store+database" ? ", those before " + L.dateTime(history.store.until) + " from the long-term store" : "");
    const store = history.store;
    if (store && store.error) {
      els.historyNote.hidden = false;
      els.historyNote.textContent = store.error[0].toUpperCase() + store.error.slice(1) + ".";
    } else if (!gpus.length) {
      els.historyNote.hidden = false;
      els.historyNote.textContent = history.rollups === "minute" ?
        "No minute rollups in this range yet: ingest writes one per GPU and minute, about two minutes after the minute ends." :
        "No hourly rollups in this range yet: a control worker computes each hour from its minutes a few minutes after it ends.";
    }
    const xrange = zoom.history || [history.since, history.until];
    showLegend("history", gpus.map(function (series) { return [String(series.gpu), COLOURS[series.gpu % COLOURS.length]]; }));
    const x = historyTimes(gpus, step);
    const at = new Map(x.map(function (ts, i) { return [ts, i]; }));
    HISTORY.forEach(function (chart, k) { inTurn(chart.id, function () {
      const lines = gpus.map(function (series) {
        // [low, mean, high] per point: null where this GPU has no rollup, as at a gap's time.
        const low = x.map(function () { return null; }), mean = low.slice(), high = low.slice();
        // A metric the answer lacks (an API from before the activity rollups) charts as no data.
        const triples = series[chart.key] || [];
        series.ts.forEach(function (ts, i) {
          const triple = triples[i] || [null, null, null];
          const p = at.get(ts);
          low[p] = triple[0] === null ? null : triple[0] * chart.scale;
          mean[p] = triple[1] === null ? null : triple[1] * chart.scale;
          high[p] = triple[2] === null ? null : triple[2] * chart.scale;
        });
        return {
          label: "GPU " + series.gpu, colour: COLOURS[series.gpu % COLOURS.length], show: shown("history", series.gpu),
          y: mean, low: low, high: high,
        };
      });
      historyCharts[k].update({ x: x, lines: lines, xrange: xrange, yrange: PERCENT_KEYS.has(chart.key) ? [0, 105] : null, thresholds: thresholds(chart.key) });
    }); });
  }

  /* ---- the custom range (?since=&until= in unix seconds) --------------------------------- */

  /* A unix time as a datetime-local input's value, in the browser's zone. */
  function localInput(ts) {
    return L.localDateTime(ts).slice(0, 16).replace(" ", "T");
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

  const probeChart = new window.GpulseTimeChart(els.probeChart, { title: "Bus bandwidth (GB/s)", unit: "GB/s", digits: 1, emptyText: "" });

  function renderProbes(probes) {
    lastProbe = probes.length ? probes[probes.length - 1] : null;
    renderLastProbe();
    if (!probes.length) {
      els.probeChart.hidden = true;
      return;
    }
    // One point a probe: its bus bandwidth on the line, or a failure's marker on the axis (it has none).
    const x = [], busbw = [], failed = [], said = [];
    probes.forEach(function (probe) {
      const where = probe.backend + ", " + (probe.world_size ? probe.world_size + " ranks" : "ranks unknown");
      const succeeded = probe.status === "succeeded" && num(probe.busbw) !== null;
      x.push(probe.ts);
      busbw.push(succeeded ? probe.busbw : null);
      failed.push(succeeded ? null : 0);
      said.push(succeeded ? probe.busbw.toFixed(1) + " GB/s · " + where : probe.status + (probe.reason ? ": " + probe.reason : "") + " (" + where + ")");
    });
    function describe(i) { return said[i]; }
    const lines = [{ label: "busbw", colour: COLOURS[0], show: true, y: busbw, markers: true, describe: describe }];
    if (failed.some(function (v) { return v !== null; })) {
      lines.push({ label: "failed", colour: FAILED_COLOUR, show: true, y: failed, markers: true, joined: false, describe: describe });
    }
    els.probeChart.hidden = false;
    inTurn(els.probeChart.id, function () { probeChart.update({ x: x, lines: lines, xrange: null, yrange: null, thresholds: [] }); });
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
  els.zone.title = "This browser's time zone; each time's tooltip gives it in UTC";
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
