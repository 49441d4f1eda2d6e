/* Shared by gpulse's live pages: number formatting, and escaping of the values
 * nodes send (every string in a sample is the node's to choose), node links. */
(function () {
  "use strict";

  function isNum(value) {
    return typeof value === "number" && isFinite(value);
  }

  /* The value where it is a number, else NaN (typed arrays and arithmetic take it). */
  function numberOrNaN(value) {
    return typeof value === "number" ? value : NaN;
  }

  /* The value where it is a number, else null (Plotly draws a gap; tables say "not supported"). */
  function numberOrNull(value) {
    return typeof value === "number" ? value : null;
  }

  function fixed(value, digits) {
    return isNum(value) ? value.toFixed(digits) : "—";
  }

  /* "1234567.891" as "1,234,567.891". Written out, not by toLocaleString or an Intl.NumberFormat:
   * the first of those a page makes loads ICU's data, 15-74 ms in Chromium, a long task now and
   * then as a page loads (issue 18, docs/PERFORMANCE.md). */
  function withThousands(digits) {
    const parts = digits.split(".");
    return parts[0].replace(/\B(?=(\d{3})+$)/g, ",") + (parts.length > 1 ? "." + parts[1] : "");
  }

  /* Dollars as $1,234.56. */
  function usd(value) {
    if (!isNum(value)) return "—";
    return (value < 0 ? "-$" : "$") + withThousands(Math.abs(value).toFixed(2));
  }

  /* A chart's axis number, as uPlot's own labels read: thousands separated, up to 3 decimals. */
  function axisNumber(value) {
    if (!isNum(value)) return "";
    const digits = String(Math.abs(Number(value.toFixed(3))));
    return (value < 0 && digits !== "0" ? "-" : "") + withThousands(digits);
  }

  function age(seconds) {
    if (!isNum(seconds)) return "—";
    if (seconds < 0) seconds = 0;
    if (seconds < 10) return seconds.toFixed(1) + " s";
    if (seconds < 120) return Math.round(seconds) + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    if (seconds < 172800) return Math.round(seconds / 3600) + " h";
    return Math.round(seconds / 86400) + " d";
  }

  const GIB = 1024 * 1024 * 1024;

  function gib(bytes, digits) {
    return isNum(bytes) ? (bytes / GIB).toFixed(digits === undefined ? 1 : digits) : "—";
  }

  /* Bytes per second as B/s, kB/s, MB/s or GB/s (decimal, like link speeds). */
  function rate(bytesPerSecond) {
    if (!isNum(bytesPerSecond)) return "—";
    const units = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    let value = bytesPerSecond;
    let unit = 0;
    while (value >= 1000 && unit < units.length - 1) {
      value /= 1000;
      unit += 1;
    }
    return value.toFixed(value < 10 && unit > 0 ? 1 : 0) + " " + units[unit];
  }

  // Times read in the browser's own zone, its offset shown with them ("21:22:13 UTC−08:00"), written
  // out as the charts' ticks are (localDateTime): toLocaleString's first call loads ICU (withThousands).
  function clockTime(ts) {
    return isNum(ts) ? localDateTime(ts).slice(11, 19) + " " + utcOffset(new Date(ts * 1000)) : "—";
  }

  function dateTime(ts) {
    return isNum(ts) ? localDateTime(ts).slice(0, 19) + " " + utcOffset(new Date(ts * 1000)) : "—";
  }

  /* "2026-11-23 18:09:54 UTC", for titles beside a local time. */
  function utcTime(ts) {
    return isNum(ts) ? new Date(ts * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "—";
  }

  function pad(n, width) {
    return String(n).padStart(width, "0");
  }

  /* A unix time as "2026-11-23 10:09:54.123" in the browser's zone: the time charts' ticks and
   * tooltips, and the node page's range inputs, cut from it, so they read as the page's text does. */
  function localDateTime(ts) {
    const d = new Date(ts * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1, 2) + "-" + pad(d.getDate(), 2) + " " +
      pad(d.getHours(), 2) + ":" + pad(d.getMinutes(), 2) + ":" + pad(d.getSeconds(), 2) + "." + pad(d.getMilliseconds(), 3);
  }

  /* The browser's zone: "Pacific Standard Time (UTC−08:00)". Its name from Date's own text, not from
   * an Intl.DateTimeFormat: the first of those a page makes loads ICU's data, 15-60 ms in Chromium,
   * which made /health/'s load hold a long task now and then (issue 18, docs/PERFORMANCE.md). */
  function zoneName() {
    const now = new Date();
    const offset = utcOffset(now);
    const named = /\(([^()]+)\)$/.exec(now.toString()); // "... GMT-0800 (Pacific Standard Time)"
    return named ? named[1] + " (" + offset + ")" : offset;
  }

  /* The browser's zone's offset at ``date``: "UTC−08:00" (summer time included). */
  function utcOffset(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes < 0 ? "−" : "+";
    return "UTC" + sign + pad(Math.floor(Math.abs(minutes) / 60), 2) + ":" + pad(Math.abs(minutes) % 60, 2);
  }

  /* A clock skew in seconds (node minus server) as "+1 h" or "−42 s". */
  function skew(seconds) {
    return (seconds < 0 ? "−" : "+") + age(Math.abs(seconds));
  }

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) { return ESCAPES[c]; });
  }

  /* Text for Plotly labels, names, titles and hover text: Plotly renders a
   * pseudo-HTML there (<a href>, <b>, <br>) and decodes &lt; &gt; &amp; only. */
  function plotlyText(text) {
    return String(text).replace(/[&<>]/g, function (c) { return ESCAPES[c]; });
  }

  /* The node page of ``name`` (names are the node's to choose: encoded). */
  function nodeUrl(name) {
    return "/nodes/" + encodeURIComponent(name) + "/";
  }

  function isDigit(code) {
    return code >= 48 && code <= 57; // NaN past a string's end: false
  }

  /* A character code with A-Z as a-z. */
  function folded(code) {
    return code >= 65 && code <= 90 ? code + 32 : code;
  }

  /* Node names in the order people read them: runs of digits by their number (sim-2 before
   * sim-10), letters case aside. By hand, not an Intl.Collator: creating one loads ICU, 13-16 ms
   * in the first task of every page that sorts names (issue 18). */
  function compareNames(a, b) {
    let i = 0, j = 0;
    while (i < a.length && j < b.length) {
      if (isDigit(a.charCodeAt(i)) && isDigit(b.charCodeAt(j))) {
        while (a.charCodeAt(i) === 48 && isDigit(a.charCodeAt(i + 1))) i++; // leading zeros
        while (b.charCodeAt(j) === 48 && isDigit(b.charCodeAt(j + 1))) j++;
        let endA = i, endB = j;
        while (isDigit(a.charCodeAt(endA))) endA++;
        while (isDigit(b.charCodeAt(endB))) endB++;
        // The longer number is the larger; of two as long, the first digit that differs says.
        if (endA - i !== endB - j) return endA - i - (endB - j);
        for (; i < endA; i++, j++) if (a.charCodeAt(i) !== b.charCodeAt(j)) return a.charCodeAt(i) - b.charCodeAt(j);
        continue;
      }
      const x = folded(a.charCodeAt(i)), y = folded(b.charCodeAt(j));
      if (x !== y) return x - y;
      i++;
      j++;
    }
    return a.length - i - (b.length - j);
  }

  /* The server's clock, estimated from the send time of the latest frame, so a
   * browser with a wrong clock still shows the right age of the data. */
  const serverClock = {
    offset: 0,
    observe: function (sentTs) {
      if (isNum(sentTs)) this.offset = Date.now() / 1000 - sentTs;
    },
    now: function () {
      return Date.now() / 1000 - this.offset;
    },
  };

  /* "#rrggbb" as [r, g, b]. */
  function rgb(hex) {
    return [1, 3, 5].map(function (k) { return parseInt(hex.slice(k, k + 2), 16); });
  }

  /* A new element with a class and text (textContent: a node's strings are never parsed as HTML). */
  function element(tag, className, text) {
    const el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  window.GpulseFormat = {
    isNum: isNum,
    element: element,
    rgb: rgb,
    numberOrNaN: numberOrNaN,
    numberOrNull: numberOrNull,
    fixed: fixed,
    usd: usd,
    axisNumber: axisNumber,
    age: age,
    gib: gib,
    GIB: GIB,
    rate: rate,
    clockTime: clockTime,
    dateTime: dateTime,
    utcTime: utcTime,
    localDateTime: localDateTime,
    zoneName: zoneName,
    utcOffset: utcOffset,
    skew: skew,
    escapeHtml: escapeHtml,
    plotlyText: plotlyText,
    compareNames: compareNames,
    nodeUrl: nodeUrl,
    serverClock: serverClock,
  };
})();
