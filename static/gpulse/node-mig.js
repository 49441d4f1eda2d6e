/* The node page's MIG instances table: each instance of each GPU in MIG mode, from the live
 * sample's "mig" lists (gpulse/schema.py). Profiles, UUIDs and owners are the node's words:
 * written as text nodes only, never markup, and at most MAX_MIG_INSTANCES a GPU. */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const MAX_INSTANCES = window.GpulseFrames.MAX_MIG_INSTANCES;
  const SHOWN_OWNERS = 3; // more are counted, not listed: the cell stays one line on a phone
  const COLUMNS = 9; // the table's, as node.html heads it

  /* A string the node sent, else "". */
  function text(value) {
    return typeof value === "string" ? value : "";
  }

  function row(cells) {
    const tr = document.createElement("tr");
    cells.forEach(function (cell) { tr.appendChild(cell); });
    return tr;
  }

  function numberCell(value) {
    return F.element("td", "num", value);
  }

  /* Who holds the instance: its processes' users with their jobs (jobOf, node.js), and its Kubernetes pod. */
  function owners(inst, jobOf) {
    const seen = [];
    (Array.isArray(inst.processes) ? inst.processes : []).forEach(function (p) {
      if (!p || typeof p !== "object") return;
      const job = jobOf(p);
      const who = text(p.user) + (job ? " (" + job + ")" : "");
      if (who && seen.indexOf(who) < 0) seen.push(who);
    });
    const k8s = inst.k8s && typeof inst.k8s === "object" ? inst.k8s : null;
    if (k8s && text(k8s.pod)) seen.push("pod " + (text(k8s.namespace) ? text(k8s.namespace) + "/" : "") + text(k8s.pod));
    if (!seen.length) return "—";
    const more = seen.length - SHOWN_OWNERS;
    return seen.slice(0, SHOWN_OWNERS).join(", ") + (more > 0 ? " and " + more + " more" : "");
  }

  function instanceRow(gpu, inst, jobOf) {
    const sm = F.numberOrNaN(inst.sm_active);
    const processes = Array.isArray(inst.processes) ? String(inst.processes.length) : "not reported";
    return row([
      numberCell(F.fixed(gpu.index, 0)),
      numberCell(F.fixed(inst.gpu_instance, 0)),
      numberCell(F.fixed(inst.compute_instance, 0)),
      F.element("td", "", text(inst.profile) || "—"),
      F.element("td", "", text(inst.uuid) || "—"),
      numberCell(F.gib(inst.mem_used) + " / " + F.gib(inst.mem_total)),
      numberCell(sm === sm ? (100 * sm).toFixed(0) : "not reported"),
      numberCell(processes),
      F.element("td", "", owners(inst, jobOf)),
    ]);
  }

  /* Fill ``body`` with the instances of ``sample``'s MIG GPUs; show ``panel`` only where there are MIG GPUs. */
  function render(panel, body, sample, jobOf) {
    const rows = [];
    (sample && Array.isArray(sample.gpus) ? sample.gpus : []).forEach(function (gpu) {
      if (!Array.isArray(gpu.mig)) return;
      if (!gpu.mig.length) {
        const empty = F.element("td", "empty", "MIG is on, no instance made");
        empty.colSpan = COLUMNS - 1;
        rows.push(row([numberCell(F.fixed(gpu.index, 0)), empty]));
        return;
      }
      gpu.mig.slice(0, MAX_INSTANCES).forEach(function (inst) {
        if (inst && typeof inst === "object") rows.push(instanceRow(gpu, inst, jobOf));
      });
    });
    panel.hidden = !rows.length;
    body.replaceChildren.apply(body, rows);
  }

  window.GpulseNodeMig = { render: render };
})();
