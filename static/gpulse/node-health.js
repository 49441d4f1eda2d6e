/* The node page's Health panel: every check of GET /api/v1/nodes/<name>/health
 * (status, GPU, reason, action, since) and the history of the node's verdict
 * changes. Reloaded when the findings in the node's live sample change (node.js
 * passes each socket message to nodeMessage), and every 10 s for what only the
 * control host decides (version skew, since-times, history).
 * Reasons are the node's words: text only, never markup.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  const V = window.GpulseVerdict;
  const RELOAD_EVERY_MS = 10 * 1000;
  // Ingest writes the verdict on its tick, maybe just after the socket showed the new
  // sample: a change is read at once and once more a little later.
  const RECHECK_AFTER_MS = 1500;
  // A check's status as the verdict badge of the same weight, and its order in the table.
  const STATUS_STYLE = { fail: "failing", warn: "degraded", pass: "healthy", unknown: "unknown" };
  const STATUS_ORDER = { fail: 0, warn: 1, unknown: 2, pass: 3 };

  const name = JSON.parse(document.getElementById("node-data").textContent).node;
  // The catalogue's checks (gpulse/health.py), id -> title, in the catalogue's order.
  const titles = JSON.parse(document.getElementById("check-titles").textContent);
  const CHECK_ORDER = {};
  Object.keys(titles).forEach(function (id, k) { CHECK_ORDER[id] = k; });
  const url = "/api/v1/nodes/" + encodeURIComponent(name) + "/health";

  const els = {
    verdict: document.getElementById("health-verdict"),
    since: document.getElementById("health-since"),
    note: document.getElementById("health-note"),
    checks: document.querySelector("#health-checks tbody"),
    history: document.querySelector("#health-history tbody"),
  };

  let fingerprint = null;
  let recheck = null;


  /* Unix seconds from a number or an ISO 8601 text; NaN if neither. */
  function seconds(value) {
    if (F.isNum(value)) return value;
    if (typeof value === "string") return Date.parse(value) / 1000;
    return NaN;
  }

  function text(value) {
    return value === undefined || value === null ? "" : String(value);
  }

  function sinceCell(value) {
    const ts = seconds(value);
    const td = F.element("td", "", F.isNum(ts) ? F.age(Date.now() / 1000 - ts) + " ago" : "—");
    if (F.isNum(ts)) td.title = F.utcTime(ts);
    return td;
  }

  function badgeCell(status) {
    const td = F.element("td");
    const known = STATUS_STYLE[status] !== undefined;
    td.append(F.element("span", "verdict verdict-" + (known ? STATUS_STYLE[status] : "unknown"), known ? status : "unknown"));
    return td;
  }

  function checkRow(check) {
    const id = text(check.id);
    const tr = F.element("tr", "check-" + (STATUS_STYLE[check.status] ? check.status : "unknown"));
    tr.dataset.check = id;
    const title = F.element("td", "", titles[id] || id);
    title.title = id;
    tr.append(
      title,
      F.element("td", "num", check.gpu === null || check.gpu === undefined ? "" : text(check.gpu)),
      badgeCell(check.status),
      F.element("td", "health-reason", text(check.reason)),
      F.element("td", "health-action", text(check.action)),
      sinceCell(check.since)
    );
    return tr;
  }

  function historyRow(change) {
    const at = seconds(change.at);
    const when = F.element("td", "", F.dateTime(at));
    if (F.isNum(at)) when.title = F.utcTime(at);
    const from = F.element("td");
    from.append(V.badge(V.read({ verdict: change.from })));
    const to = F.element("td");
    to.append(V.badge(V.read({ verdict: change.to })));
    const tr = F.element("tr");
    tr.append(when, from, to, F.element("td", "health-reason", text(change.reason)));
    return tr;
  }

  function emptyRow(columns, message) {
    const td = F.element("td", "empty", message);
    td.colSpan = columns;
    const tr = F.element("tr");
    tr.append(td);
    return tr;
  }

  function statusOrder(status) {
    return STATUS_ORDER[status] === undefined ? STATUS_ORDER.unknown : STATUS_ORDER[status];
  }

  // A check this page does not know (a newer ingest) after the known ones.
  function checkOrder(id) {
    return CHECK_ORDER[id] === undefined ? Object.keys(CHECK_ORDER).length : CHECK_ORDER[id];
  }

  // Node checks (no GPU) before GPU 0.
  function gpuOrder(gpu) {
    return F.isNum(gpu) ? gpu : -1;
  }

  function render(body) {
    const health = V.read({ verdict: body.verdict });
    els.verdict.textContent = health.verdict;
    els.verdict.className = "verdict verdict-" + health.verdict;
    const since = seconds(body.since);
    els.since.textContent = F.isNum(since) ? "since " + F.dateTime(since) : "";
    els.since.title = F.isNum(since) ? F.utcTime(since) : "";
    const checks = Array.isArray(body.checks) ? body.checks.slice() : [];
    checks.sort(function (a, b) {
      return statusOrder(a.status) - statusOrder(b.status) || checkOrder(a.id) - checkOrder(b.id) || gpuOrder(a.gpu) - gpuOrder(b.gpu);
    });
    els.checks.replaceChildren.apply(els.checks, checks.length
      ? checks.map(checkRow)
      : [emptyRow(6, "No checks: this node's source runs none, or it has sent no health data.")]);
    const history = Array.isArray(body.history) ? body.history : [];
    els.history.replaceChildren.apply(els.history, history.length
      ? history.map(historyRow)
      : [emptyRow(4, "No verdict changes recorded.")]);
    els.note.hidden = true;
  }

  function load() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error(body.error || "HTTP " + response.status);
          return body;
        });
      })
      .then(render)
      .catch(function (error) {
        els.note.hidden = false;
        els.note.className = "error-text";
        els.note.textContent = "Health unavailable: " + error.message;
      });
  }

  /* A message of /ws/nodes/<name>/: reload when the node's findings or status changed. */
  function nodeMessage(message) {
    const sample = message.sample;
    // A finding is its (check, GPU, status): rate reasons change every sample without a new finding.
    const findings = sample && sample.health && Array.isArray(sample.health.findings) ? sample.health.findings : null;
    const next = JSON.stringify([message.status, findings && findings.map(function (f) { return [f.check, f.gpu, f.status]; })]);
    if (fingerprint !== null && next !== fingerprint) {
      load();
      clearTimeout(recheck);
      recheck = setTimeout(load, RECHECK_AFTER_MS);
    }
    fingerprint = next;
  }

  load();
  setInterval(load, RELOAD_EVERY_MS);
  window.GpulseNodeHealth = { nodeMessage: nodeMessage };
})();
