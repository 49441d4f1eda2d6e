/* The overview's picture of the cluster, kept from the frames of /ws/cluster/.
 *
 * The handler only writes numbers into typed arrays laid out per snapshot
 * (row = node in name order, column = GPU index), so an 8,000-GPU cluster costs
 * one array walk per frame. The heatmap, KPIs, table and health page read these
 * arrays (rows.health: each node's verdict, verdict.js; rows.problems: the "problems
 * first" order, from its verdict or being down, then how many of its GPUs have a fault,
 * all of them while it is down: verdict.js problemScore). cells.mig holds a MIG GPU's instances
 * (readInstances), null for every other cell; rows.mig how many of a node's GPUs are in MIG mode.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const Frames = window.GpulseFrames;
  const FLAG = Frames.FLAG;
  const FAULT = Frames.FAULT;
  const META = Frames.META;
  const MIG = Frames.MIG;
  // Most compute slices one profile names ("7g.80gb"); a larger number is not a profile's.
  const MAX_SLICES = 8;
  // A seq this far below the last one means ingest restarted and counts from 1 again.
  const SEQ_RESTART_GAP = 10;

  /* A cluster model. hooks.laidOut() runs after the arrays are laid out anew,
   * hooks.rowWritten(r) after node row r changed, hooks.resync() when the model
   * needs a fresh snapshot (a reconnect). */
  function create(hooks) {
    const model = {
      fieldIndex: Frames.indexFields(Frames.FIELDS),
      entries: new Map(), // node -> its latest frame entry, meta carried over
      summary: {},
      haveSnapshot: false,
      pending: [],
      lastSeq: -1,
      // Laid out by layout(): rows = nodes in name order, columns = GPU index.
      names: [],
      rowOf: new Map(),
      cols: 0,
      cells: {}, // typed arrays, one slot per (row, column)
      rows: {}, // typed arrays and lists, one slot per node
      tableChanged: true, // a node's status or probe changed: the table shows it at once
    };
    const cells = model.cells;
    const rows = model.rows;

    /* Apply one frame; false if it was not a frame. */
    model.apply = function (frame) {
      if (frame.type === "snapshot") applySnapshot(frame);
      else if (frame.type === "delta") applyDelta(frame);
      else return false;
      return true;
    };

    /* A new connection: it starts with a snapshot, so hold its deltas until that arrives. */
    model.expectSnapshot = function () {
      model.haveSnapshot = false;
      model.pending = [];
    };

    function applySnapshot(frame) {
      if (frame.fields) model.fieldIndex = Frames.indexFields(frame.fields);
      model.entries = new Map(Object.entries(frame.nodes || {}));
      model.lastSeq = frame.seq;
      model.haveSnapshot = true;
      applySummary(frame.summary);
      layout();
      // Deltas that overtook the snapshot: keep only those newer than it.
      const pending = model.pending;
      model.pending = [];
      pending.forEach(applyDelta);
    }

    function applyDelta(frame) {
      if (!model.haveSnapshot) {
        model.pending.push(frame);
        return;
      }
      if (frame.seq <= model.lastSeq) {
        if (model.lastSeq - frame.seq > SEQ_RESTART_GAP) hooks.resync();
        return;
      }
      model.lastSeq = frame.seq;
      if (frame.fields) model.fieldIndex = Frames.indexFields(frame.fields);
      applySummary(frame.summary);
      let relayout = false;
      // Nodes ingest pruned (down for GPULSE_NODE_FORGET_AFTER) leave the page.
      (frame.forgotten || []).forEach(function (name) {
        if (model.entries.delete(name)) relayout = true;
      });
      const nodes = frame.nodes || {};
      for (const name in nodes) {
        const entry = nodes[name];
        const known = model.entries.get(name);
        if (!entry.meta) {
          if (known && known.meta) entry.meta = known.meta;
          else hooks.resync(); // a node we never had meta for: models and sizes come with a snapshot
        }
        model.entries.set(name, entry);
        const row = model.rowOf.get(name);
        if (row === undefined || entry.gpus.length > model.cols) relayout = true;
        else writeRow(row, entry);
      }
      if (relayout) layout();
    }

    function applySummary(summary) {
      if (summary && Object.keys(summary).length) model.summary = summary;
    }

    /* Lay the cells out again: on a snapshot, a new node, or a node with more GPUs. */
    function layout() {
      const names = Array.from(model.entries.keys()).sort(F.compareNames);
      let cols = 1;
      model.entries.forEach(function (entry) {
        cols = Math.max(cols, entry.gpus.length, entry.meta ? entry.meta.length : 0);
      });
      const n = names.length;
      model.names = names;
      model.cols = cols;
      model.rowOf = new Map(names.map(function (name, i) { return [name, i]; }));
      ["util", "memUsed", "temp", "power", "smActive", "memTotal", "powerLimit"].forEach(function (key) {
        cells[key] = new Float32Array(n * cols);
      });
      cells.flags = new Uint8Array(n * cols);
      cells.present = new Uint8Array(n * cols);
      cells.model = new Array(n * cols).fill("");
      cells.mig = new Array(n * cols).fill(null);
      rows.mig = new Uint8Array(n);
      rows.status = new Array(n).fill("down");
      rows.probe = new Array(n).fill(null);
      rows.health = new Array(n).fill(window.GpulseVerdict.read(null));
      rows.ts = new Float64Array(n);
      rows.skew = new Float64Array(n).fill(NaN); // seconds the node's clock is off, NaN while within bounds
      ["gpus", "reporting", "lost", "problems", "utilSum", "utilN", "maxTemp", "power", "powerLimit", "memUsed", "memTotal"].forEach(
        function (key) { rows[key] = new Float64Array(n); }
      );
      hooks.laidOut();
      for (let r = 0; r < n; r++) writeRow(r, model.entries.get(names[r]));
    }

    /* Copy one node's entry into the cell arrays and its aggregates. */
    function writeRow(r, entry) {
      const f = model.fieldIndex;
      const cols = model.cols;
      const gpus = entry.gpus;
      const meta = entry.meta || [];
      const notDown = entry.status !== "down";
      // Only a node with a GPU in MIG mode has the part (an object keyed by the GPU's position).
      const mig = notDown && entry.mig && typeof entry.mig === "object" ? entry.mig : null;
      let migGpus = 0;
      let reporting = 0, lost = 0, faults = 0, utilSum = 0, utilN = 0, maxTemp = NaN;
      let power = 0, powerLimit = 0, memUsed = 0, memTotal = 0;
      for (let g = 0; g < cols; g++) {
        const i = r * cols + g;
        const row = gpus[g];
        const info = meta[g];
        cells.model[i] = info ? String(info[META.model]) : "";
        cells.memTotal[i] = info ? F.numberOrNaN(info[META.mem_total]) : NaN;
        cells.powerLimit[i] = info ? F.numberOrNaN(info[META.power_limit]) : NaN;
        const instances = (cells.mig[i] = mig && row ? readInstances(mig[g]) : null);
        if (instances) migGpus += 1;
        if (!row) {
          cells.present[i] = 0;
          cells.flags[i] = 0;
          cells.util[i] = cells.memUsed[i] = cells.temp[i] = cells.power[i] = cells.smActive[i] = NaN;
          continue;
        }
        cells.present[i] = 1;
        const flags = F.numberOrNaN(row[f.flags]) || 0;
        const u = (cells.util[i] = F.numberOrNaN(row[f.util]));
        const m = (cells.memUsed[i] = F.numberOrNaN(row[f.mem_used]));
        const t = (cells.temp[i] = F.numberOrNaN(row[f.temp]));
        const p = (cells.power[i] = F.numberOrNaN(row[f.power]));
        // NaN where not reported, and where a frame has no such field (an ingest from before it).
        cells.smActive[i] = f.sm_active === undefined ? NaN : F.numberOrNaN(row[f.sm_active]);
        cells.flags[i] = flags;
        if (flags & FAULT) faults += 1;
        if (flags & FLAG.LOST) {
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
      if (rows.status[r] !== entry.status) model.tableChanged = true; // a node going down shows at once
      const probe = entry.probe || null;
      const before = rows.probe[r];
      // Probes come every few minutes: redraw only when this node's verdict or reading changes.
      if (!before !== !probe || (probe && (probe.low !== before.low || probe.ts !== before.ts))) model.tableChanged = true;
      rows.probe[r] = probe;
      // A verdict or its reason changing shows at once, like a node going down.
      const health = window.GpulseVerdict.read(entry.health);
      if (!window.GpulseVerdict.same(health, rows.health[r])) model.tableChanged = true;
      rows.health[r] = health;
      const skew = F.numberOrNaN(entry.skew);
      if (skew !== rows.skew[r] && (skew === skew || rows.skew[r] === rows.skew[r])) model.tableChanged = true;
      rows.skew[r] = skew;
      const problems = window.GpulseVerdict.problemScore(!notDown, health, notDown ? faults : Math.max(1, gpus.length));
      if (problems !== rows.problems[r]) model.tableChanged = true; // the "problems first" order moves at once
      rows.problems[r] = problems;
      rows.status[r] = String(entry.status);
      rows.ts[r] = F.numberOrNaN(entry.ts);
      rows.gpus[r] = gpus.length;
      rows.mig[r] = migGpus;
      rows.reporting[r] = reporting;
      rows.lost[r] = lost;
      rows.utilSum[r] = utilSum;
      rows.utilN[r] = utilN;
      rows.maxTemp[r] = maxTemp;
      rows.power[r] = power;
      rows.powerLimit[r] = powerLimit;
      rows.memUsed[r] = memUsed;
      rows.memTotal[r] = memTotal;
      hooks.rowWritten(r);
    }

    return model;
  }

  /* A MIG GPU's instance rows (frames.py MIG_FIELDS), read as untrusted: at most MAX_MIG_INSTANCES,
   * numbers or NaN, the profile as text (shown with textContent only); null if not a list. */
  function readInstances(list) {
    if (!Array.isArray(list)) return null;
    return list.slice(0, Frames.MAX_MIG_INSTANCES).map(function (row) {
      if (!Array.isArray(row)) row = [];
      const slices = F.numberOrNaN(row[MIG.slices]);
      return {
        gi: F.numberOrNaN(row[MIG.gpu_instance]),
        ci: F.numberOrNaN(row[MIG.compute_instance]),
        profile: typeof row[MIG.profile] === "string" ? row[MIG.profile].slice(0, 32) : "",
        slices: slices >= 1 && slices <= MAX_SLICES ? Math.floor(slices) : NaN,
        smActive: F.numberOrNaN(row[MIG.sm_active]),
        memUsed: F.numberOrNaN(row[MIG.mem_used]),
        memTotal: F.numberOrNaN(row[MIG.mem_total]),
        flags: F.numberOrNaN(row[MIG.flags]) || 0,
      };
    });
  }

  /* "182.4 GB/s vs median 190.1 GB/s", or why a frame's probe has no bandwidth. */
  function describeProbe(probe) {
    if (probe.status !== "succeeded") return "probe " + probe.status + " at " + F.clockTime(probe.ts);
    const median = F.isNum(probe.median) ? " vs median " + probe.median.toFixed(1) + " GB/s" : " (too few earlier probes for a median)";
    return F.fixed(F.numberOrNaN(probe.busbw), 1) + " GB/s" + median;
  }

  window.GpulseCluster = { create: create, describeProbe: describeProbe };
})();
