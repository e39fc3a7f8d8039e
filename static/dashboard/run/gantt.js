/* The Gantt chart: attempt bars placed on a shared time axis, one lane per agent.
 *
 * The bars carry their times (data-start / data-end, epoch milliseconds); an open attempt
 * grows with the server's clock. Overlapping attempts of one agent go on separate tracks.
 */

import { now } from "./clocks.js";
import { formatDuration } from "./format.js";

var ROW_PX = 23;
var TICKS = 5;
var NICE_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

function niceStep(raw) {
  for (var i = 0; i < NICE_STEPS_S.length; i++) {
    if (NICE_STEPS_S[i] >= raw) {
      return NICE_STEPS_S[i];
    }
  }
  return 7200;
}

function timeSpan(gantt, bars) {
  var t0 = Number(gantt.dataset.start) || Infinity;
  var t1 = Number(gantt.dataset.end) || 0;
  var open = false;
  bars.forEach(function (bar) {
    t0 = Math.min(t0, Number(bar.dataset.start));
    if (bar.dataset.end) {
      t1 = Math.max(t1, Number(bar.dataset.end));
    } else {
      open = true;
    }
  });
  if (!gantt.dataset.end || open) {
    t1 = Math.max(t1, now());
  }
  return { t0: t0, span: Math.max(1000, t1 - t0) };
}

function placeBars(bars, t0, span) {
  bars.forEach(function (bar) {
    var start = Number(bar.dataset.start);
    var end = bar.dataset.end ? Number(bar.dataset.end) : Math.max(start, now());
    var left = (100 * (start - t0)) / span;
    var width = Math.max(0.6, (100 * (end - start)) / span);
    bar.style.left = left.toFixed(3) + "%";
    bar.style.width = Math.min(width, 100 - left).toFixed(3) + "%";
    bar.classList.toggle("is-open", !bar.dataset.end);
    bar.classList.toggle("is-narrow", width < 4);
  });
}

// Greedy, by start time: a bar takes the first track free when it starts.
function stackTracks(gantt) {
  gantt.querySelectorAll(".gantt-bars").forEach(function (lane) {
    var laneBars = Array.prototype.slice.call(lane.querySelectorAll(".gantt-bar"));
    laneBars.sort(function (a, b) {
      return Number(a.dataset.start) - Number(b.dataset.start);
    });
    var trackEnds = [];
    laneBars.forEach(function (bar) {
      var start = Number(bar.dataset.start);
      var end = bar.dataset.end ? Number(bar.dataset.end) : Infinity;
      var track = trackEnds.findIndex(function (busyUntil) {
        return busyUntil <= start;
      });
      if (track < 0) {
        track = trackEnds.length;
        trackEnds.push(end);
      } else {
        trackEnds[track] = end;
      }
      bar.style.top = track * ROW_PX + "px";
    });
    lane.style.height = Math.max(1, trackEnds.length) * ROW_PX - 3 + "px";
  });
}

function drawTicks(gantt, span) {
  var ticks = gantt.querySelector(".gantt-ticks");
  if (!ticks) {
    return;
  }
  var spanS = span / 1000;
  var step = niceStep(spanS / TICKS);
  ticks.textContent = "";
  for (var s = 0; s <= spanS + 0.001; s += step) {
    var tick = document.createElement("span");
    tick.className = "gantt-tick";
    tick.textContent = formatDuration(s).replace(".0 s", " s");
    tick.style.left = ((100 * s) / spanS).toFixed(3) + "%";
    ticks.appendChild(tick);
  }
  keepLabelsInside(ticks);
}

// A tick at or near the end of the axis (the run's length is often a whole number of steps) would
// write its label past the right edge of the panel: that label goes on the left of its line.
function keepLabelsInside(ticks) {
  var width = ticks.clientWidth;
  var all = Array.prototype.slice.call(ticks.children);
  var past = all.map(function (tick) {
    return tick.offsetLeft + tick.offsetWidth > width;
  });
  all.forEach(function (tick, i) {
    tick.classList.toggle("is-end", past[i]);
  });
}

export function layoutGantt() {
  var gantt = document.getElementById("run-gantt");
  var bars = gantt ? gantt.querySelectorAll(".gantt-bar") : [];
  if (!bars.length) {
    return;
  }
  var axis = timeSpan(gantt, bars);
  placeBars(bars, axis.t0, axis.span);
  stackTracks(gantt);
  drawTicks(gantt, axis.span);
}
