// Benchmark detail (live rows over /ws/benchmarks/<id>/, busbw/algbw vs size)
// and the compare view (busbw vs size of several jobs, overlaid, named by the backend that ran).
"use strict";

// Plotly's toolbar (mode bar) sits in the chart's top right corner, 26 px high. A centred title
// there was covered by it on a phone's narrow chart (issue 32): the title goes on its own line
// below the toolbar's, at the left, at any width.
const TOOLBAR_PX = 26;
const chartLayout = (title) => ({
  title: {text: title, x: 0, xref: "paper", xanchor: "left", y: 1, yref: "container", yanchor: "top",
          pad: {t: TOOLBAR_PX + 4}},
  xaxis: {title: {text: "message size (bytes)"}, type: "log"},
  yaxis: {title: {text: "GB/s"}, rangemode: "tozero"},
  margin: {t: TOOLBAR_PX + 40, r: 20, b: 50, l: 60},
  legend: {orientation: "h"},
});

function fmt(value, digits) {
  return value === null || value === undefined ? "N/A" : Number(value).toFixed(digits);
}

// nccl-tests prints one line per size: out-of-place, then in-place.
function pairRows(rows) {
  const bySize = new Map();
  for (const row of rows) {
    const pair = bySize.get(row.size) || {};
    pair[row.inplace ? "inplace" : "outofplace"] = row;
    bySize.set(row.size, pair);
  }
  return [...bySize.entries()].sort((a, b) => a[0] - b[0]);
}

function renderTable(rows) {
  const body = document.querySelector("#rows tbody");
  body.replaceChildren();
  for (const [size, pair] of pairRows(rows)) {
    const first = pair.outofplace || pair.inplace;
    const cells = [size, first.count, first.type, first.redop];
    for (const row of [pair.outofplace, pair.inplace]) {
      cells.push(row ? fmt(row.time_us, 1) : "", row ? fmt(row.algbw, 3) : "", row ? fmt(row.busbw, 3) : "",
                 row ? (row.wrong === null ? "N/A" : row.wrong) : "");
    }
    const tr = document.createElement("tr");
    cells.forEach((value, i) => {
      const td = document.createElement("td");
      td.textContent = value;
      if (i !== 2 && i !== 3) td.className = "num";
      if ((i === 7 || i === 11) && Number(value) > 0) td.classList.add("bad");
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

function renderChart(rows) {
  const traces = [];
  for (const [inplace, label] of [[false, "out-of-place"], [true, "in-place"]]) {
    const mine = rows.filter((r) => r.inplace === inplace).sort((a, b) => a.size - b.size);
    if (inplace && !mine.length) continue;  // alltoall and sendrecv have no in-place form
    traces.push({x: mine.map((r) => r.size), y: mine.map((r) => r.busbw), name: `busbw ${label}`, mode: "lines+markers"});
    traces.push({x: mine.map((r) => r.size), y: mine.map((r) => r.algbw), name: `algbw ${label}`,
                 mode: "lines+markers", line: {dash: "dot"}});
  }
  // Plotly loads in stages, a task each (vendor/plotly/index.js).
  GpulsePlotly.then((Plotly) => Plotly.react("bandwidth-chart", traces, chartLayout("Bandwidth vs message size"),
                                              {displaylogo: false, responsive: true}));
}

// A size is done once its last row has come: in-place, measured after the out-of-place one, where the
// operation has an in-place form.
function showProgress(rows, hasInPlace) {
  const progress = document.getElementById("job-progress");
  if (!progress) return;
  progress.value = rows.filter((r) => r.inplace === hasInPlace).length;
  document.getElementById("job-progress-text").textContent = `${progress.value} of ${progress.max}`;
}

// Follow a queued or running job over /ws/benchmarks/<id>/. Each connection
// replays the job's rows from the first and ends with its final event, so after
// a reconnect (a web restart) the page catches up by itself; it also asks the
// API, for a job whose events are gone, whether the job ended meanwhile.
function followJob(job) {
  const rows = (job.result && job.result.rows) || [];
  const draw = () => { renderTable(rows); renderChart(rows); showProgress(rows, job.has_in_place); };
  draw();
  if (job.status !== "queued" && job.status !== "running") return;
  let connections = 0;
  const socket = GpulseSocket.connect(`/ws/benchmarks/${job.id}/`, {
    onMessage: (text) => {
      const event = JSON.parse(text);
      if (event.kind === "row" && !rows.some((r) => r.size === event.row.size && r.inplace === event.row.inplace)) {
        rows.push(event.row);
        draw();
        const status = document.getElementById("job-status");
        status.textContent = "running";
        status.className = "status status-running";  // the colour follows the word
      } else if (event.kind === "final") {
        socket.close();
        // The recorded job holds the average, duration and versions: reload it.
        setTimeout(() => location.reload(), 300);
      }
    },
    onState: (state, detail) => {
      GpulseSocket.showState(document.getElementById("conn-state"), state, detail);
      if (state === "open" && ++connections > 1) reloadIfEnded(job.id);
    },
  });
}

async function reloadIfEnded(id) {
  const response = await fetch(`/api/v1/benchmarks/${id}`, {credentials: "same-origin"});
  if (!response.ok) return;
  const status = (await response.json()).status;
  if (status !== "queued" && status !== "running") location.reload();
}

function compareJobs(jobs) {
  const traces = jobs.map((job) => {
    const rows = job.result.rows.filter((r) => !r.inplace).sort((a, b) => a.size - b.size);
    // Plotly renders pseudo-HTML in trace names; node names are the nodes' to choose.
    return {x: rows.map((r) => r.size), y: rows.map((r) => r.busbw), mode: "lines+markers",
            name: GpulseFormat.plotlyText(`#${job.id} ${job.op} ${job.nodes.join(",")} ×${job.ranks_per_node} ${job.result.backend}`)};
  });
  GpulsePlotly.then((Plotly) => Plotly.react("compare-chart", traces, chartLayout("busbw (out-of-place) vs message size"),
                                              {displaylogo: false, responsive: true}));
}

const jobData = document.getElementById("job-data");
if (jobData) followJob(JSON.parse(jobData.textContent));
const compareData = document.getElementById("compare-data");
if (compareData) compareJobs(JSON.parse(compareData.textContent));
