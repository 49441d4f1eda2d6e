/* The overview's KPI cards: nodes, GPUs, utilization, power, memory from the
 * cluster model (GpulseCluster); alerts, benchmark jobs and the GPUs allocated but idle
 * from the frames' summary. A change in the number of alerts firing is also announced
 * to screen readers (announce.js). */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const sayFiring = window.GpulseAnnounce.announcer("said-firing");

  function setText(id, text) {
    const el = document.getElementById(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function watts(w) {
    return w >= 10000 ? (w / 1000).toFixed(1) + " kW" : Math.round(w) + " W";
  }

  // "3/h · 42 s mean · busbw 12.30 GB/s out-of-place ↑ sim-01,sim-02": the newest job's out-of-place busbw at
  // its largest size (as every benchmark page quotes it) against the run before on those nodes.
  function throughputText(s) {
    if (!F.isNum(s.jobs_last_hour)) return "";
    const parts = [s.jobs_last_hour + "/h"];
    if (F.isNum(s.job_mean_s)) parts.push(Math.round(s.job_mean_s) + " s mean");
    const b = s.latest_busbw;
    if (b && F.isNum(b.busbw)) {
      const trend = F.isNum(b.previous) ? (b.busbw > b.previous * 1.02 ? " ↑" : b.busbw < b.previous * 0.98 ? " ↓" : " =") : "";
      parts.push(b.op + " busbw " + b.busbw.toFixed(2) + " GB/s out-of-place" + trend + " " + b.nodes);
    }
    return parts.join(" · ");
  }

  // A message size as the benchmark pages write it (Django's filesizeformat: "16.0 MB" for 16 × 1024² bytes).
  function sizeText(bytes) {
    const units = ["bytes", "KB", "MB", "GB", "TB"];
    let value = bytes, unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
    return unit ? value.toFixed(1) + " " + units[unit] : bytes + " bytes";
  }

  // The card's title (the page's words for the figure) with the figure's size and the in-place one beside it.
  let throughputAbout = null;
  function throughputTitle(el, s) {
    if (throughputAbout === null) throughputAbout = el.title;
    const about = throughputAbout;
    const b = s.latest_busbw;
    if (!b || !F.isNum(b.busbw) || !F.isNum(b.size)) return about;
    return about + " (" + sizeText(b.size) + "): out-of-place " + b.busbw.toFixed(2) + " GB/s, in-place " +
      (F.isNum(b.inplace_busbw) ? b.inplace_busbw.toFixed(2) + " GB/s" : "not measured");
  }

  function firingWords(n) {
    return n === 0 ? "No alerts firing." : n === 1 ? "1 alert firing." : n + " alerts firing.";
  }

  function render(model) {
    const rows = model.rows;
    const cells = model.cells;
    const n = model.names.length;
    let up = 0, stale = 0, down = 0, gpus = 0, lost = 0, unavailable = 0, utilSum = 0, utilN = 0, busy = 0;
    let power = 0, powerLimit = 0, memUsed = 0, memTotal = 0;
    for (let r = 0; r < n; r++) {
      const status = rows.status[r];
      // A down node's GPUs still count: they are there, only unavailable (frames keep their number).
      gpus += rows.gpus[r];
      if (status === "up") up++;
      else if (status === "stale") stale++;
      else {
        down++;
        unavailable += rows.gpus[r];
        continue;
      }
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
    setText("kpi-lost", lost + " lost" + (unavailable ? " · " + unavailable + " on down nodes" : ""));
    document.getElementById("kpi-lost").classList.toggle("status-down", lost + unavailable > 0);
    setText("kpi-util", utilN ? (utilSum / utilN).toFixed(1) + " %" : "—");
    setText("kpi-busy", busy + " GPUs ≥ 50 %");
    setText("kpi-power", watts(power));
    setText("kpi-power-limit", "of " + watts(powerLimit) + " limit");
    const memUnit = memTotal >= 1024 * 1024 * 10 ? ["TiB", 1024 * 1024] : ["GiB", 1024];
    setText("kpi-mem", (memUsed / memUnit[1]).toFixed(1) + " " + memUnit[0]);
    setText("kpi-mem-total", "of " + (memTotal / memUnit[1]).toFixed(1) + " " + memUnit[0] +
      (memTotal ? " (" + ((100 * memUsed) / memTotal).toFixed(0) + " %)" : ""));
    const s = model.summary;
    setText("kpi-alerts", F.isNum(s.alerts_firing) ? String(s.alerts_firing) : "—");
    document.getElementById("kpi-alerts").classList.toggle("status-down", s.alerts_firing > 0);
    if (F.isNum(s.alerts_firing)) sayFiring(firingWords(s.alerts_firing));
    setText("kpi-jobs", F.isNum(s.jobs_running) ? s.jobs_running + " running" : "—");
    setText("kpi-queued", (F.isNum(s.jobs_queued) ? s.jobs_queued : "—") + " queued");
    setText("kpi-throughput", throughputText(s));
    const throughput = document.getElementById("kpi-throughput");
    const title = throughputTitle(throughput, s);
    if (throughput.title !== title) throughput.title = title;
    const idle = s.idle_allocated;
    const idleGpus = idle && F.isNum(idle.gpus) ? idle.gpus : null;
    setText("kpi-idle", idleGpus === null ? "—" : idleGpus + (idleGpus === 1 ? " GPU" : " GPUs"));
    document.getElementById("kpi-idle").classList.toggle("status-stale", idleGpus > 0);
    setText("kpi-idle-cost", (idle && F.isNum(idle.usd_per_hour) ? F.usd(idle.usd_per_hour) : "—") + "/h");
    const nav = document.getElementById("nav-firing");
    if (nav && F.isNum(s.alerts_firing)) nav.textContent = s.alerts_firing ? String(s.alerts_firing) : "";
  }

  window.GpulseKpis = { render: render };
})();
