/* The run page's message line (#run-flash): refused actions, HTTP errors, fading successes (an
 * action's answer, and a message the page came with: "Run #7 launched."). A success is news for
 * SUCCESS_SHOWN_MS; it said "will run again" beside a task that had run again and finished. */

import { isLive } from "./live.js";

var SUCCESS_SHOWN_MS = 6000;
var successTimer = null;

export function clearFlash(flash) {
  flash.className = "run-flash";
  flash.textContent = "";
  delete flash.dataset.timed;
}

export function showFlash(message, level) {
  var flash = document.getElementById("run-flash");
  if (!flash) {
    return;
  }
  flash.className = "run-flash run-flash-" + (level || "error");
  flash.textContent = "";
  var text = document.createElement("span");
  text.className = "run-flash-text";
  text.textContent = message;
  var close = document.createElement("button");
  close.type = "button";
  close.className = "run-flash-close";
  close.setAttribute("data-dismiss", "run-flash");
  close.setAttribute("aria-label", "Dismiss");
  close.textContent = "×";
  flash.appendChild(text);
  flash.appendChild(close);
}

/** A success message goes away by itself after a while; an error stays until dismissed. */
export function fadeSuccess() {
  var flash = document.getElementById("run-flash");
  if (!flash || !flash.classList.contains("run-flash-success") || flash.dataset.timed === "1") {
    return;
  }
  flash.dataset.timed = "1";
  window.clearTimeout(successTimer);
  successTimer = window.setTimeout(function () {
    if (document.getElementById("run-flash") === flash) {
      clearFlash(flash);
    }
  }, SUCCESS_SHOWN_MS);
}

/** A request the page makes by itself, on a timer (hx-trigger "every 5s": the header's approvals
 * count), not a person's action. */
function isPoll(elt) {
  return !!elt && /(^|[\s,])every\s/.test(elt.getAttribute("hx-trigger") || "");
}

/** A refused action answers 200 with the engine's reason as an error message; a missing
 * permission answers 403 with a sentence, any other error status a generic one: show them.
 *
 * A poll's failure to reach the server is no answer to anything a person did, and says nothing
 * the live badge (#live-status, live.js) does not: a server that does not answer is a connection
 * that is down, which the badge says ("reconnecting…") as soon as it knows. It toasted "The server
 * did not answer" at every poll beside that badge, and the error stayed after the server came
 * back. Nor does a poll's error status while the badge says the page is not live (a proxy's 502
 * while the server restarts). The poll keeps what it showed and tries again at its next turn. */
export function showActionErrors(body) {
  body.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (status < 400) {
      return;
    }
    event.detail.shouldSwap = false;
    event.detail.isError = false;
    if (isPoll(event.detail.elt) && !isLive()) {
      return;
    }
    if (status === 403) {
      showFlash(event.detail.xhr.responseText || "You do not have permission to do this.", "error");
    } else {
      showFlash("The server could not do this (HTTP " + status + "). Reload the page and try again.", "error");
    }
  });
  body.addEventListener("htmx:sendError", function (event) {
    if (isPoll(event.detail.elt)) {
      return;
    }
    showFlash("The server did not answer. Check the connection and try again.", "error");
  });
}
