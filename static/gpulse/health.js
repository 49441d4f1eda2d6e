/* The /health/ page: every node that is not healthy, worst first (down, failing,
 * degraded, unknown), from the same frames as the overview (/ws/cluster/, kept by
 * cluster.js), so a verdict change or a node going down shows with the next frame.
 * Built from DOM nodes and text only: reasons are the node's words.
 * window.gpulseHealth holds the render times (as window.gpulse does on the overview).
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const V = window.GpulseVerdict;
  const AGES_EVERY_MS = 1000;
  // The order of the list. A down node has no verdict ("unknown": nothing current is known of
  // it), yet it is the first thing on-call must see, so it is listed, and counted, as down.
  const LISTED = { down: 0, failing: 1, degraded: 2, unknown: 3 };
  const DOWN_ACTION = "Check that the node is up and its collector runs: nothing is known of its GPUs meanwhile";

  const els = {
    counts: document.getElementById("health-counts"),
    empty: document.getElementById("health-empty"),
    table: document.getElementById("health-table"),
    tbody: document.querySelector("#health-table tbody"),
    conn: document.getElementById("conn-state"),
    zone: document.getElementById("time-zone"),
  };

  let socket = null;
  let renderQueued = false;
  let haveFrame = false;
  // What the rows show, but their ages: rows are rebuilt only when it changes, so a
  // reason being selected or a link in focus survives the page's every-second update.
  let listSignature = "";
  const timings = (window.gpulseHealth = { renders: 0, lastRenderMs: 0, maxRenderMs: 0 });

  const model = window.GpulseCluster.create({
    laidOut: function () {},
    rowWritten: function () {},
    resync: function () { if (socket) socket.reconnect(); },
  });


  /* A down node's row: since its latest sample, which says when it stopped reporting. */
  function downHealth(ts) {
    const since = F.numberOrNaN(ts);
    return { verdict: "down", reason: F.isNum(since) ? "no sample since " + F.dateTime(since) : "no sample yet",
             action: DOWN_ACTION, since: since, findings: 0 };
  }

  /* The nodes to list and the count of each: down, else its verdict. */
  function collect() {
    const counts = { down: 0, failing: 0, degraded: 0, healthy: 0, unknown: 0 };
    const listed = [];
    for (let r = 0; r < model.names.length; r++) {
      const down = model.rows.status[r] === "down";
      const health = down ? downHealth(model.rows.ts[r]) : model.rows.health[r];
      counts[health.verdict] += 1;
      if (health.verdict !== "healthy") listed.push({ name: model.names[r], health: health });
    }
    // Down, failing, degraded, unknown; within each the longest-standing first (no since-time last).
    listed.sort(function (a, b) {
      const rank = LISTED[a.health.verdict] - LISTED[b.health.verdict];
      if (rank) return rank;
      const x = a.health.since, y = b.health.since;
      if (x !== x || y !== y) return (x !== x) - (y !== y) || F.compareNames(a.name, b.name);
      return x - y || F.compareNames(a.name, b.name);
    });
    return { counts: counts, listed: listed };
  }

  function sinceText(since) {
    return F.isNum(since) ? F.age(F.serverClock.now() - since) + " ago" : "—";
  }

  function sinceCell(since) {
    const td = F.element("td", "num since", sinceText(since));
    if (F.isNum(since)) td.title = F.utcTime(since);
    return td;
  }

  function signature(listed) {
    return JSON.stringify(listed.map(function (item) {
      const h = item.health;
      return [item.name, h.verdict, h.reason, h.action, h.findings, h.since];
    }));
  }

  function row(item) {
    const health = item.health;
    const tr = F.element("tr", "health-" + health.verdict);
    tr.dataset.node = item.name;
    const link = F.element("a", "", item.name);
    link.href = F.nodeUrl(item.name);
    const nameCell = F.element("td");
    nameCell.append(link);
    const verdictCell = F.element("td");
    verdictCell.append(health.verdict === "down" ? F.element("span", "status status-down", "down") : V.badge(health));
    tr.append(
      nameCell,
      verdictCell,
      F.element("td", "health-reason", health.reason || "—"),
      F.element("td", "health-action", health.action || "—"),
      F.element("td", "num", String(health.findings)),
      sinceCell(health.since)
    );
    return tr;
  }

  function render() {
    renderQueued = false;
    if (!haveFrame) return;
    const started = performance.now();
    const found = collect();
    const c = found.counts;
    const total = model.names.length;
    els.counts.textContent = c.down + " down, " + c.failing + " failing, " + c.degraded + " degraded, " + c.healthy + " healthy, " + c.unknown + " unknown";
    const listed = signature(found.listed);
    if (listed !== listSignature) {
      listSignature = listed;
      els.tbody.replaceChildren.apply(els.tbody, found.listed.map(row));
    } else {
      els.tbody.querySelectorAll("td.since").forEach(function (td, k) {
        const text = sinceText(found.listed[k].health.since);
        if (td.textContent !== text) td.textContent = text;
      });
    }
    els.table.hidden = found.listed.length === 0;
    els.empty.hidden = found.listed.length > 0;
    if (!found.listed.length) els.empty.textContent = "All " + total + " nodes healthy";
    timings.renders += 1;
    timings.lastRenderMs = performance.now() - started;
    timings.maxRenderMs = Math.max(timings.maxRenderMs, timings.lastRenderMs);
  }

  function queueRender() {
    if (!renderQueued) {
      renderQueued = true;
      requestAnimationFrame(render);
    }
  }

  function onMessage(text) {
    const frame = JSON.parse(text);
    if (!model.apply(frame)) return;
    F.serverClock.observe(frame.sent);
    haveFrame = model.haveSnapshot;
    queueRender();
  }

  els.zone.textContent = "times in " + F.zoneName();
  setInterval(queueRender, AGES_EVERY_MS); // the since-ages keep counting between changes
  socket = window.GpulseSocket.connect("/ws/cluster/", {
    onMessage: onMessage,
    onState: function (state, detail) {
      if (state === "open") model.expectSnapshot();
      window.GpulseSocket.showState(els.conn, state, detail);
    },
  });
})();
