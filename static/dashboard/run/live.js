/* The run page's websocket (protocol: LIVE_PROTOCOL in dashboard/consumers.py).
 *
 * htmx-ext-ws keeps the socket open and swaps the server's out-of-band fragments; this module
 *   - sends {"type": "resume", "last_seq": N} on every (re)connect and when a frame's first
 *     sequence number is not N + 1 (a gap), so no event is ever lost (parts are idempotent,
 *     and log rows already shown are dropped by the glassbox-live extension, oob.js);
 *   - keeps the number of the last event applied (#run-live's data-seq);
 *   - shows the connection's state in #live-status;
 *   - pings the server every PING_MS ({"type": "ping"}, answered "pong"): a socket can stay open
 *     while nothing comes through it (the network went away, a proxy holds it), and an idle run
 *     sends nothing of its own, so a page that has heard nothing for STALE_MS after a ping says
 *     "reconnecting…" and opens a new socket, whose resume brings what it missed. (Counted from
 *     the ping, not from the last word heard: a background tab's timers may run once a minute.)
 */

var PING_MS = 3000;
var STALE_MS = 8000;
var PONG = "pong";

var root = null;
var socket = null; // htmx-ext-ws's wrapper: it keeps working across reconnects
var current = null; // the browser's WebSocket last opened
var seq = 0;
var unansweredSince = null; // when the oldest ping nothing has answered yet was sent

export function send(message) {
  if (socket) {
    socket.send(JSON.stringify(message));
  }
}

/** The sequence number of the last event the page has applied. */
export function lastSeq() {
  return seq;
}

function setStatus(status, text) {
  var el = document.getElementById("live-status");
  if (el) {
    el.dataset.state = status;
    el.querySelector(".live-text").textContent = text;
  }
}

// A frame starts with #live-seq (data-from, data-to): the events it brings.
function applyFrameRange() {
  var marker = document.getElementById("live-seq");
  if (!marker) {
    return;
  }
  var from = Number(marker.dataset.from);
  var to = Number(marker.dataset.to);
  if (from > seq + 1) {
    send({ type: "resume", last_seq: seq });
  }
  if (to > seq) {
    seq = to;
    root.dataset.seq = String(to);
  }
}

/** The badge says the page is live (not "connecting…", not "reconnecting…"). */
export function isLive() {
  var el = document.getElementById("live-status");
  return !!el && el.dataset.state === "live";
}

// Every PING_MS: ask the server for a word; when nothing came STALE_MS after a ping, the page is
// not live, whatever the socket says: reconnect (htmx-ext-ws retries, with a backoff, until the
// server answers).
function checkHeard() {
  if (!isLive() || !socket) {
    return;
  }
  var now = Date.now();
  if (unansweredSince !== null && now - unansweredSince > STALE_MS) {
    setStatus("offline", "reconnecting…");
    current = null;
    unansweredSince = null;
    socket.reconnect();
    return;
  }
  if (unansweredSince === null) {
    unansweredSince = now;
  }
  send({ type: "ping" });
}

/** Follows the socket of #run-live; `onOpen` runs after each (re)connect's resume, `onFrame`
 * after each frame is applied. */
export function startLive(liveRoot, hooks) {
  root = liveRoot;
  seq = Number(root.dataset.seq) || 0;
  document.body.addEventListener("htmx:wsOpen", function (event) {
    socket = event.detail.socketWrapper;
    current = event.detail.event.target;
    unansweredSince = null;
    setStatus("live", "live");
    send({ type: "resume", last_seq: seq });
    hooks.onOpen();
  });
  document.body.addEventListener("htmx:wsClose", function (event) {
    // A socket given up for a new one closes late: only the one in use says the page is offline.
    if (current === null || event.detail.event.target === current) {
      current = null;
      setStatus("offline", "reconnecting…");
    }
  });
  document.body.addEventListener("htmx:wsBeforeMessage", function (event) {
    unansweredSince = null;
    if (event.detail.message === PONG) {
      event.preventDefault();
    }
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    applyFrameRange();
    hooks.onFrame();
  });
  window.setInterval(checkHeard, PING_MS);
}
