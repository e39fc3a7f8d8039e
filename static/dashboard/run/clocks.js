/* The run page's clocks: the server's time (skew), the elapsed time and the ETA, ticking. */

import { formatDuration } from "./format.js";

var skew = 0;
var nowSeen = null;

/** Now in the server's clock (milliseconds), from #run-totals' data-now. */
export function now() {
  return Date.now() + skew;
}

export function readSkew() {
  var totals = document.getElementById("run-totals");
  if (totals && totals.dataset.now && totals.dataset.now !== nowSeen) {
    nowSeen = totals.dataset.now;
    skew = Number(totals.dataset.now) - Date.now();
  }
}

export function tickClocks() {
  var elapsed = document.querySelector(".js-elapsed");
  if (elapsed && elapsed.dataset.started && !elapsed.dataset.finished) {
    elapsed.textContent = formatDuration((now() - Number(elapsed.dataset.started)) / 1000);
  }
  var eta = document.querySelector(".js-eta");
  // The server sets data-eta-at only while the run's work moves (readmodels/totals.py counts_down),
  // says in data-run-out-s how little left is run out (eta.py ETA_RUN_OUT_S), and in
  // data-overdue what the card reads then.
  if (eta && eta.dataset.etaAt) {
    var left = (Number(eta.dataset.etaAt) - now()) / 1000;
    eta.textContent = left > Number(eta.dataset.runOutS) ? formatDuration(left) : eta.dataset.overdue;
  }
}
