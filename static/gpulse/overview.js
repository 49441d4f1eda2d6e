/* Cluster overview: wires the frames of /ws/cluster/ (dashboard/live/frames.py)
 * into the cluster model (cluster.js), and draws the heatmap (heatmap.js), the
 * KPIs (kpis.js) and the node table (table.js) at most once per animation frame.
 * window.gpulse holds the handling and rendering times (the load test reads them).
 * The view's choices (colour, power scale, node order, filter) are kept in the
 * URL's query as they change, so a reload or a shared link shows the same view.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const FRAME_LATE_S = 3;
  const TABLE_EVERY_MS = 1000;
  const TABLE_EVERY_FRAME_UP_TO = 100; // nodes
  const TIMINGS_KEPT = 300;
  const RESYNC_EVERY_MS = 5000;

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
    tooltipText: document.getElementById("heat-tooltip-text"),
    tooltipOpen: document.getElementById("heat-tooltip-open"),
    focusBox: document.getElementById("heat-focus"),
    said: document.getElementById("heat-said"),
    metric: document.getElementById("heat-metric"),
    powerScale: document.getElementById("power-scale"),
    powerScaleLabel: document.getElementById("power-scale-label"),
    activityLegend: document.getElementById("activity-legend"),
    frameAge: document.getElementById("frame-age"),
    conn: document.getElementById("conn-state"),
    table: document.getElementById("node-table"),
    tbody: document.querySelector("#node-table tbody"),
    filter: document.getElementById("node-filter"),
    nodeCount: document.getElementById("node-count"),
    order: document.getElementById("node-order"),
    scaleBar: document.getElementById("scale-bar"),
    scaleMin: document.getElementById("scale-min"),
    scaleMax: document.getElementById("scale-max"),
  };

  // The URL's choice first, then this browser's last one (localStorage), for a plain "/".
  const query = new URLSearchParams(location.search);
  const view = {
    metric: query.get("colour") || localStorage.getItem("gpulse.heatmap.metric") || "util",
    powerScale: query.get("power") || localStorage.getItem("gpulse.heatmap.power") || "pct",
    order: query.get("order") === "problems" ? "problems" : "name",
    sortKey: "name",
    sortDir: 1,
    filter: "",
  };
  // Compared, never put in a selector: the URL is anyone's to write.
  if (!hasOption(els.metric, view.metric)) view.metric = "util";
  if (!hasOption(els.powerScale, view.powerScale)) view.powerScale = "pct";
  els.filter.value = query.get("filter") || "";
  view.filter = els.filter.value.trim().toLowerCase();

  function hasOption(select, value) {
    return Array.from(select.options).some(function (option) { return option.value === value; });
  }

  const sayFrames = window.GpulseAnnounce.announcer("said-frames");
  let socket = null;
  let lastResync = 0;
  let lastFrameAt = null;
  let renderQueued = false;
  let lastTableAt = 0;
  let tableOrder = null; // [key, dir] the order switch asked of the table, applied when it is next drawn
  // The first snapshot lays the model out (its cells' arrays): nothing can be drawn before. A view
  // chosen in the URL (?order=problems) asks for a drawing as the page starts, which the KPIs once
  // met with no cells and threw on.
  let laidOut = false;

  const model = window.GpulseCluster.create({
    laidOut: function () {
      laidOut = true;
      heatmap.laidOut();
    },
    rowWritten: function (r) { heatmap.rowChanged(r); },
    resync: resync,
  });
  const heatmap = window.GpulseHeatmap.create(model, view, els, function (name) {
    location.href = F.nodeUrl(name);
  });
  window.GpulseHeatmapInput.attach(heatmap, els);
  const table = window.GpulseNodeTable.create(model, view, els);

  function onMessage(text) {
    const started = performance.now();
    const frame = JSON.parse(text);
    if (!model.apply(frame)) return;
    lastFrameAt = performance.now();
    F.serverClock.observe(frame.sent);
    timings.frames += 1;
    timings.lastSeq = frame.seq;
    record("handle", performance.now() - started);
    queueRender(frame.type === "snapshot");
  }

  function record(kind, ms) {
    const name = kind[0].toUpperCase() + kind.slice(1);
    const list = timings[kind + "Ms"];
    list.push(ms);
    if (list.length > TIMINGS_KEPT) list.shift();
    timings["last" + name + "Ms"] = ms;
    if (ms > timings["max" + name + "Ms"]) timings["max" + name + "Ms"] = ms;
  }

  /* Reconnect for a fresh snapshot, at most every RESYNC_EVERY_MS. */
  function resync() {
    const now = Date.now();
    if (socket && now - lastResync > RESYNC_EVERY_MS) {
      lastResync = now;
      socket.reconnect();
    }
  }

  /* The drawing in the next animation frame, or with ``frameBetween`` in the one after: a snapshot's
   * handling (its parse and model, 11-25 ms at 2,000 GPUs on a 2-core machine) and the first drawing
   * (heatmap and KPIs, 12-35 ms) with the browser's layout and paint made frames over 50 ms in one
   * frame as the page loaded (issue 18). */
  function queueRender(frameBetween) {
    if (renderQueued) return;
    renderQueued = true;
    if (frameBetween) requestAnimationFrame(function () { requestAnimationFrame(render); });
    else requestAnimationFrame(render);
  }

  function render() {
    renderQueued = false;
    if (!laidOut) return;
    const started = performance.now();
    if (heatmap.render()) model.tableChanged = true;
    const heatmapDone = performance.now();
    window.GpulseKpis.render(model);
    const kpisDone = performance.now();
    // Small clusters get the table every frame, in step with the heatmap; big ones once a second.
    const tableEvery = model.names.length > TABLE_EVERY_FRAME_UP_TO ? TABLE_EVERY_MS : 0;
    // The heatmap's first drawing paints in the next frame; the table comes in the frame after.
    if (heatmap.waitsForPaint()) queueRender();
    else if (model.tableChanged || performance.now() - lastTableAt >= tableEvery) {
      // In the next animation frame: heatmap and table together made tasks over 50 ms
      // at 2,000 GPUs (issue 18), each alone stays under.
      requestAnimationFrame(renderTable);
      lastTableAt = performance.now();
    }
    timings.lastParts = { heatmap: heatmapDone - started, kpis: kpisDone - heatmapDone };
    timings.renders += 1;
    record("render", performance.now() - started);
  }

  function renderTable() {
    lastTableAt = performance.now();
    model.tableChanged = false;
    if (tableOrder) table.sortBy(tableOrder[0], tableOrder[1]);
    else table.render();
    tableOrder = null;
  }

  function showFrameAge() {
    if (lastFrameAt === null) {
      els.frameAge.classList.add("late");
      return;
    }
    const seconds = (performance.now() - lastFrameAt) / 1000;
    const late = seconds > FRAME_LATE_S;
    els.frameAge.classList.toggle("late", late);
    sayFrames(late ? "No live frame for over " + FRAME_LATE_S + " s: the data shown is not current."
                   : "Live frames arrive again: the data shown is current.");
    els.frameAge.textContent = late
      ? "no live frame for " + F.age(seconds) + ": data is not current (ingest, Redis or the connection is down)"
      : "last frame " + seconds.toFixed(1) + " s ago";
    // Ages in the table keep counting even while no frame arrives.
    if (late && performance.now() - lastTableAt >= TABLE_EVERY_MS) renderTable();
  }

  function recolour() {
    heatmap.recolour();
    saveView();
    queueRender();
  }

  /* Write the view's choices that differ from the defaults into the URL, in place. */
  function saveView() {
    const choices = new URLSearchParams();
    if (view.metric !== "util") choices.set("colour", view.metric);
    if (view.metric === "power" && view.powerScale !== "pct") choices.set("power", view.powerScale);
    if (view.order !== "name") choices.set("order", view.order);
    const filter = els.filter.value.trim();
    if (filter) choices.set("filter", filter);
    const search = choices.toString();
    history.replaceState(null, "", search ? "?" + search : location.pathname);
  }

  /* Heatmap rows and table in name order, or the nodes with the most faults first: the
   * heatmap in the next animation frame, the table in the one after (render() puts it there).
   * The table sorted in the change event, with the heatmap drawn in the frame after it, made
   * tasks of 57–127 ms at 2,000 GPUs (issue 18). */
  function orderNodes() {
    tableOrder = view.order === "problems" ? ["problems", -1] : ["name", 1];
    model.tableChanged = true;
    queueRender();
  }

  els.metric.value = view.metric;
  els.order.value = view.order;
  if (view.order !== "name") orderNodes();
  els.order.addEventListener("change", function () {
    view.order = els.order.value;
    orderNodes();
    saveView();
  });
  els.filter.addEventListener("input", saveView);
  els.powerScale.value = view.powerScale;
  els.powerScaleLabel.hidden = view.metric !== "power";
  els.activityLegend.hidden = view.metric !== "activity";
  els.metric.addEventListener("change", function () {
    view.metric = els.metric.value;
    localStorage.setItem("gpulse.heatmap.metric", view.metric);
    els.powerScaleLabel.hidden = view.metric !== "power";
    els.activityLegend.hidden = view.metric !== "activity";
    recolour();
  });
  els.powerScale.addEventListener("change", function () {
    view.powerScale = els.powerScale.value;
    localStorage.setItem("gpulse.heatmap.power", view.powerScale);
    recolour();
  });

  // In a task of its own: making the socket took 3-12 ms of the script's first run, which held the
  // page for up to 74 ms as it loaded at 2,000 GPUs on a 2-core machine (issue 18).
  setTimeout(function () {
    setInterval(showFrameAge, 250);
    socket = window.GpulseSocket.connect("/ws/cluster/", {
      onMessage: onMessage,
      onState: function (state, detail) {
        if (state === "open") model.expectSnapshot();
        window.GpulseSocket.showState(els.conn, state, detail);
      },
    });
  });
})();
