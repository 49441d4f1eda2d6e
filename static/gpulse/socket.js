/* The one websocket client of every live page (overview, node, benchmark job):
 * it reconnects by itself, with exponential backoff and jitter.
 *
 * Every gpulse consumer sends the whole current state when a socket opens
 * (the cluster snapshot, the node's latest sample, the job's rows from its
 * first), so a page that reconnects is current again with its first messages.
 */
(function () {
  "use strict";

  const FIRST_RETRY_MS = 500;
  const MAX_RETRY_MS = 10000;

  /* Open ws(s)://<this host><path> and keep it open.
   *
   * handlers.onMessage(text) gets every message; handlers.onState(state, detail)
   * gets "connecting", "open", "reconnecting" (detail: ms until the next try)
   * and "logged-out". Retries back off from 0.5 s to 10 s so a restarted web
   * server is found quickly and a long outage is not flooded with attempts;
   * each wait is drawn between half and all of its step, so the browsers of a
   * restarted server do not all come back in the same instant.
   */
  function connect(path, handlers) {
    let socket = null;
    let step = FIRST_RETRY_MS;
    let timer = null;
    let stopped = false;

    function open() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      let opened = false;
      socket = new WebSocket(scheme + "//" + location.host + path);
      handlers.onState("connecting");
      socket.onopen = function () {
        opened = true;
        step = FIRST_RETRY_MS;
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
      const wait = Math.round(step / 2 + Math.random() * (step / 2));
      handlers.onState("reconnecting", wait);
      timer = setTimeout(open, wait);
      step = Math.min(step * 2, MAX_RETRY_MS);
    }

    open();
    return {
      // Closing makes onclose schedule a fresh connection, which starts with the whole state.
      reconnect: function () { if (socket) socket.close(); },
      // For good: the page needs nothing more from this socket.
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

  /* The sentence a screen reader hears: the kind of state only, without a retry's countdown. */
  function spokenState(state) {
    switch (state) {
      case "open": return "Connected: the page is live.";
      case "logged-out": return "Logged out: reload the page to log in again.";
      default: return "Connection to the server lost: reconnecting.";
    }
  }

  const sayState = window.GpulseAnnounce.announcer("said-connection");

  /* Show the state in element ``el`` (class conn-<state> colours it), and announce a change
   * of it in the layout's live region (templates/base.html). "connecting" comes before the
   * first connection and between every two retries: the state before it tells it all. */
  function showState(el, state, detail) {
    el.textContent = describeState(state, detail);
    el.className = "conn conn-" + state;
    if (state !== "connecting") sayState(spokenState(state));
  }

  window.GpulseSocket = { connect: connect, describeState: describeState, showState: showState };
})();
