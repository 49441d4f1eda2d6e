/* Shared by gpulse's live pages: a reconnecting websocket and number formatting. */
(function () {
  "use strict";

  const FIRST_RETRY_MS = 500;
  const MAX_RETRY_MS = 10000;

  /* Open ws(s)://<this host><path> and keep it open.
   *
   * handlers.onMessage(text) gets every message; handlers.onState(state, detail)
   * gets "connecting", "open", "reconnecting" (detail: ms until the next try)
   * and "logged-out". Retries back off from 0.5 s to 10 s so a restarted web
   * server is found quickly and a long outage is not flooded with attempts.
   */
  function connect(path, handlers) {
    let socket = null;
    let delay = FIRST_RETRY_MS;
    let timer = null;
    let stopped = false;

    function open() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      let opened = false;
      socket = new WebSocket(scheme + "//" + location.host + path);
      handlers.onState("connecting");
      socket.onopen = function () {
        opened = true;
        delay = FIRST_RETRY_MS;
        handlers.onState("open");
      };
      socket.onmessage = function (event) {
        handlers.onMessage(event.data);
      };
      socket.onclose = function () {
        if (stopped) return;
        if (opened) {
          retry();
          return;
        }
        // A refused handshake looks the same as a dead server (code 1006), so
        // ask the page itself: a redirect to the login page means logged out.
        sessionEnded().then(function (ended) {
          if (ended) handlers.onState("logged-out");
          else retry();
        });
      };
    }

    function retry() {
      handlers.onState("reconnecting", delay);
      timer = setTimeout(open, delay);
      delay = Math.min(delay * 2, MAX_RETRY_MS);
    }

    open();
    return {
      // Closing makes onclose schedule a fresh connection, which starts with a snapshot.
      reconnect: function () { if (socket) socket.close(); },
      close: function () { stopped = true; clearTimeout(timer); if (socket) socket.close(); },
    };
  }

  function sessionEnded() {
    return fetch(location.pathname, { method: "HEAD", redirect: "manual", cache: "no-store" })
      .then(function (response) { return response.type === "opaqueredirect"; })
      .catch(function () { return false; });
  }

  /* Describe a connection state in a few words for the page header. */
  function describeState(state, detail) {
    switch (state) {
      case "open": return "live";
      case "connecting": return "connecting…";
      case "reconnecting": return "disconnected, retrying in " + (detail / 1000).toFixed(1) + " s";
      case "logged-out": return "logged out: reload to log in again";
      default: return state;
    }
  }

  function isNum(value) {
    return typeof value === "number" && isFinite(value);
  }

  function fixed(value, digits) {
    return isNum(value) ? value.toFixed(digits) : "—";
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

  function clockTime(ts) {
    return isNum(ts) ? new Date(ts * 1000).toLocaleTimeString() : "—";
  }

  function dateTime(ts) {
    return isNum(ts) ? new Date(ts * 1000).toLocaleString() : "—";
  }

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) { return ESCAPES[c]; });
  }

  // Node names sort like people read them: sim-2 before sim-10.
  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

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

  window.GpulseLive = {
    connect: connect,
    describeState: describeState,
    isNum: isNum,
    fixed: fixed,
    age: age,
    gib: gib,
    GIB: GIB,
    rate: rate,
    clockTime: clockTime,
    dateTime: dateTime,
    escapeHtml: escapeHtml,
    compareNames: collator.compare,
    serverClock: serverClock,
  };
})();
