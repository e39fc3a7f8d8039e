/* The run page's message line (#run-flash): refused actions, HTTP errors, fading successes (an
 * action's answer, and a message the page came with: "Run #7 launched."). A success is news for
 * SUCCESS_SHOWN_MS; it said "will run again" beside a task that had run again and finished. */

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

/** A refused action answers 200 with the engine's reason as an error message; a missing
 * permission answers 403 with a sentence, any other error status a generic one: show them. */
export function showActionErrors(body) {
  body.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (status < 400) {
      return;
    }
    event.detail.shouldSwap = false;
    event.detail.isError = false;
    if (status === 403) {
      showFlash(event.detail.xhr.responseText || "You do not have permission to do this.", "error");
    } else {
      showFlash("The server could not do this (HTTP " + status + "). Reload the page and try again.", "error");
    }
  });
  body.addEventListener("htmx:sendError", function () {
    showFlash("The server did not answer. Check the connection and try again.", "error");
  });
}
