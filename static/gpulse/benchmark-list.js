// The benchmarks page: jobs are launched, run and finish while it is open, so every 2 s
// the job table is rebuilt from the API: new jobs appear, finished ones get their busbw,
// start, duration and Compare box. Rows are reused, so a ticked box stays ticked.
// Every value goes in as text (textContent), never as markup.
"use strict";

(() => {
  const POLL_MS = 2000;
  const tbody = document.querySelector("#jobs tbody");

  function cell(className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    return td;
  }

  function newRow(job) {
    const row = document.createElement("tr");
    row.dataset.job = String(job.id);
    const box = document.createElement("input");
    box.type = "checkbox";
    box.name = "id";
    box.value = String(job.id);
    box.setAttribute("aria-label", `Compare job #${Number(job.id)}`);
    const link = document.createElement("a");
    link.href = `/benchmarks/${Number(job.id)}/`;
    link.textContent = `#${Number(job.id)}`;
    const status = document.createElement("span");
    status.className = "status";
    const cells = [cell(), cell(), cell(), cell("nodes"), cell("num ranks"), cell("backend"),
                   cell("num busbw"), cell("num inplace"), cell("started"), cell("num duration"), cell("launched-by"),
                   cell("reason")];
    cells[0].append(box);
    cells[1].append(link);
    cells[2].append(status);
    row.append(...cells);
    return row;
  }

  function fill(row, job) {
    const status = row.querySelector(".status");
    status.textContent = job.status;
    status.className = `status status-${job.status}`;
    row.querySelector("input[type=checkbox]").disabled = !job.result;
    row.querySelector(".nodes").textContent = (job.nodes || []).join(", ");
    row.querySelector(".ranks").textContent = String(job.ranks_per_node);
    // As the page writes them: the backend that ran (and what was asked where it differs), the
    // out-of-place and in-place busbw at the largest size, the start in the browser's zone.
    const asked = job.backend_ran ? (job.backend_ran === job.backend ? "" : ` (asked ${job.backend})`) : "";
    row.querySelector(".backend").textContent = job.backend_ran ? job.backend_ran + asked : `asked ${job.backend}`;
    const largest = job.busbw_largest || {};
    const gbps = (value) => (value == null ? "" : GpulseFormat.fixed(value, 2));
    row.querySelector(".busbw").textContent = gbps(largest.out_of_place);
    row.querySelector(".inplace").textContent = gbps(largest.in_place);
    const started = job.started ? Date.parse(job.started) / 1000 : null;
    const startedCell = row.querySelector(".started");
    startedCell.textContent = started === null ? "" : GpulseFormat.dateTime(started);
    startedCell.title = started === null ? "" : GpulseFormat.utcTime(started);
    row.querySelector(".duration").textContent = job.duration_s ? `${GpulseFormat.fixed(job.duration_s, 1)} s` : "";
    row.querySelector(".launched-by").textContent = job.created_by || "";
    row.querySelector(".reason").textContent = job.reason;
  }

  async function refresh() {
    const response = await fetch("/api/v1/benchmarks", {credentials: "same-origin"});
    if (!response.ok) return;
    const jobs = (await response.json()).jobs;
    if (!jobs.length) return;  // keep the "no benchmark yet" row
    const rows = jobs.map((job) => {
      const row = tbody.querySelector(`tr[data-job="${Number(job.id)}"]`) || newRow(job);
      fill(row, job);
      return row;
    });
    tbody.replaceChildren(...rows);
  }

  setInterval(refresh, POLL_MS);
})();
