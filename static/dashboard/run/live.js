/* The run page's websocket (protocol: LIVE_PROTOCOL in dashboard/consumers.py).
 *
 * htmx-ext-ws keeps the socket open and swaps the server's out-of-band fragments; this module
 *   - sends {"type": "resume", "last_seq": N} on every (re)connect and when a frame's first
 *     sequence number is not N + 1 (a gap), so no event is ever lost (parts are idempotent,
 *     and log rows already shown are dropped by the glassbox-live extension, oob.js);
 *   - keeps the number of the last event applied (#run-live's data-seq);
 *   - shows the connection's state in #live-status.
 */

var root = null;
var socket = null;
var seq = 0;

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

/** Follows the socket of #run-live; `onOpen` runs after each (re)connect's resume, `onFrame`
 * after each frame is applied. */
export function startLive(liveRoot, hooks) {
  root = liveRoot;
  seq = Number(root.dataset.seq) || 0;
  document.body.addEventListener("htmx:wsOpen", function (event) {
    socket = event.detail.socketWrapper;
    setStatus("live", "live");
    send({ type: "resume", last_seq: seq });
    hooks.onOpen();
  });
  document.body.addEventListener("htmx:wsClose", function () {
    setStatus("offline", "reconnecting…");
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    applyFrameRange();
    hooks.onFrame();
  });
}
