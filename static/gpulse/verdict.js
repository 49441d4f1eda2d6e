/* Node health verdicts (docs/ARCHITECTURE.md, "Node health") as the pages show
 * them: read from a frame entry's "health", ranked worst first, drawn as a badge
 * whose word says the verdict (its colour is never the only sign). Reasons are
 * the node's words: they only ever go into textContent and title.
 */
(function () {
  "use strict";

  const F = window.GpulseFormat;
  // Sort order, worst first; unknown (down, or no checks) after the checked nodes.
  const RANK = { failing: 0, degraded: 1, healthy: 2, unknown: 3 };
  // The heatmap's value of each verdict (the rule metric node.health); unknown has none.
  const LEVEL = { healthy: 0, degraded: 1, failing: 2 };
  const UNKNOWN = { verdict: "unknown", reason: "", action: "", since: NaN, findings: 0 };

  /* A frame entry's health, every field checked: an entry without one is "unknown". */
  function read(health) {
    if (!health || typeof health !== "object" || RANK[health.verdict] === undefined) return UNKNOWN;
    return {
      verdict: health.verdict,
      reason: health.reason === undefined || health.reason === null ? "" : String(health.reason),
      action: health.action === undefined || health.action === null ? "" : String(health.action),
      since: F.numberOrNaN(health.since),
      findings: F.isNum(health.findings) ? health.findings : 0,
    };
  }

  // "Problems first" (the overview's order): down, failing, degraded, then the rest; within each the
  // node with the most GPUs at fault first. A failing node with no alert yet still outranks a
  // degraded one with an alert: the verdict says what is broken, an alert only what a rule watches.
  const PROBLEM_LEVEL = { failing: 2, degraded: 1 };
  const DOWN_LEVEL = 3;
  const PER_LEVEL = 1e6; // more GPUs than a node has, so the fault count never reaches the next level

  /* One number to sort by, highest first: the level, then the count of GPUs at fault. */
  function problemScore(down, health, faults) {
    return (down ? DOWN_LEVEL : PROBLEM_LEVEL[health.verdict] || 0) * PER_LEVEL + faults;
  }

  /* Whether two read healths would show differently (the since-time moves only with the verdict). */
  function same(a, b) {
    return a.verdict === b.verdict && a.reason === b.reason && a.action === b.action && a.findings === b.findings;
  }

  /* "GPU 3 NVLink links: link 2 down, 17 up → Drain the node…", for a title. */
  function describe(health) {
    if (health.verdict === "healthy") return "healthy: every check passed";
    if (health.verdict === "unknown") return "unknown: " + (health.reason || "no health data (node down, or its source runs no checks)");
    let text = health.verdict + ": " + (health.reason || "no reason given");
    if (health.action) text += "\n→ " + health.action;
    if (F.isNum(health.since)) text += "\nsince " + F.dateTime(health.since) + " (" + F.utcTime(health.since) + ")";
    return text;
  }

  /* <span class="verdict verdict-failing">failing</span>, its title the reason and action. */
  function badge(health) {
    const el = document.createElement("span");
    el.className = "verdict verdict-" + health.verdict;
    el.textContent = health.verdict;
    el.title = describe(health);
    return el;
  }

  window.GpulseVerdict = {
    RANK: RANK, LEVEL: LEVEL, read: read, same: same, describe: describe, badge: badge, problemScore: problemScore,
  };
})();
