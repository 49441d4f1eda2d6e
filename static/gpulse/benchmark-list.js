// The benchmarks page: job statuses change while it is open, so refresh them every 2 s.
"use strict";

setInterval(async () => {
  const response = await fetch("/api/v1/benchmarks", {credentials: "same-origin"});
  if (!response.ok) return;
  for (const job of (await response.json()).jobs) {
    const row = document.querySelector(`tr[data-job="${Number(job.id)}"]`);
    if (!row) continue;
    const status = row.querySelector(".status");
    status.textContent = job.status;
    status.className = `status status-${job.status}`;
    row.querySelector(".reason").textContent = job.reason;
  }
}, 2000);
