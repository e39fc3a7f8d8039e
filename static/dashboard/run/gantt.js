/* The Gantt chart: attempt bars placed on a shared time axis, one lane per agent.
 *
 * The bars carry their times (data-start / data-end, epoch milliseconds); an open attempt
 * grows with the server's clock. Overlapping attempts of one agent go on separate tracks.
 */

import { now } from "./clocks.js";
import { formatDuration } from "./format.js";

var ROW_PX = 23;
var TICKS = 5;
// A bar is never drawn thinner than this; below NARROW_PX it shows no text and has no padding, so
// that its box is no wider than its time (padding made a bar at the end of the axis stick out).
var MIN_BAR_PX = 3;
var NARROW_PX = 20;
// The room between a pause's label and the edge of its band.
var PAUSE_LABEL_PAD_PX = 3;
// The least room between two axis labels.
var TICK_GAP_PX = 6;
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

// Each bar from its start to its end, in % of its lane; a bar that ends at the end of the axis
// (an attempt cancelled with its run) keeps its least width by starting that much earlier.
function placeBars(bars, t0, span) {
  bars.forEach(function (bar) {
    var lanePx = bar.parentElement.clientWidth || 1;
    var start = Number(bar.dataset.start);
    var end = bar.dataset.end ? Number(bar.dataset.end) : Math.max(start, now());
    var width = Math.min(100, Math.max((100 * MIN_BAR_PX) / lanePx, (100 * (end - start)) / span));
    var left = Math.max(0, Math.min((100 * (start - t0)) / span, 100 - width));
    bar.style.left = left.toFixed(3) + "%";
    bar.style.width = width.toFixed(3) + "%";
    bar.classList.toggle("is-open", !bar.dataset.end);
    bar.classList.toggle("is-narrow", (width * lanePx) / 100 < NARROW_PX);
  });
}

// The spans the run was paused: a band across every lane (and, labelled, on the "paused" row),
// from the pause to the resume, or growing with the clock while the run is still paused.
function placePauses(gantt, t0, span) {
  gantt.querySelectorAll(".gantt-pause").forEach(function (band) {
    var start = Number(band.dataset.start);
    var end = band.dataset.end ? Number(band.dataset.end) : Math.max(start, now());
    var left = Math.max(0, Math.min((100 * (start - t0)) / span, 100));
    var width = Math.max(0, Math.min((100 * (end - start)) / span, 100 - left));
    band.style.left = left.toFixed(3) + "%";
    band.style.width = width.toFixed(3) + "%";
  });
}

// Where each band on the "paused" row writes "paused": inside it when it fits; else beside it, on
// the right or the left, where no other band or label is; else nowhere (a short pause drew "pa").
// The band's title says how long the run was paused either way.
function labelPauses(gantt) {
  var row = gantt.querySelector(".gantt-pauses");
  if (!row) {
    return;
  }
  var rowBox = row.getBoundingClientRect();
  var bands = Array.prototype.slice.call(row.querySelectorAll(".gantt-pause.is-labelled"));
  bands.forEach(function (band) {
    band.classList.remove("label-after", "label-before", "label-hidden");
  });
  var boxes = bands.map(function (band) {
    return band.getBoundingClientRect();
  });
  var taken = rowBox.left; // the right end of the bands and labels placed so far
  bands.forEach(function (band, i) {
    var label = band.querySelector(".gantt-pause-label");
    var need = label.offsetWidth + PAUSE_LABEL_PAD_PX;
    var box = boxes[i];
    var next = i + 1 < boxes.length ? boxes[i + 1].left : rowBox.right;
    var place = "";
    if (box.width < need) {
      place = box.right + need <= next ? "label-after" : box.left - need >= taken ? "label-before" : "label-hidden";
      band.classList.add(place);
    }
    taken = place === "label-after" ? box.right + need : box.right;
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

// TICKS labels along the axis, fewer (a longer step) when their text would not fit side by side:
// on a phone "2 min 00 s" and "3 min 00 s" were written over each other.
function drawTicks(gantt, span) {
  var ticks = gantt.querySelector(".gantt-ticks");
  if (!ticks) {
    return;
  }
  var spanS = span / 1000;
  var step = niceStep(spanS / TICKS);
  for (;;) {
    writeTicks(ticks, spanS, step);
    keepLabelsInside(ticks);
    var longer = niceStep(step + 0.001);
    if (!labelsOverlap(ticks) || longer <= step || step > spanS) {
      return;
    }
    step = longer;
  }
}

function writeTicks(ticks, spanS, step) {
  ticks.textContent = "";
  for (var s = 0; s <= spanS + 0.001; s += step) {
    var tick = document.createElement("span");
    tick.className = "gantt-tick";
    tick.textContent = formatDuration(s).replace(".0 s", " s");
    tick.style.left = ((100 * s) / spanS).toFixed(3) + "%";
    ticks.appendChild(tick);
  }
}

function labelsOverlap(ticks) {
  var boxes = Array.prototype.map.call(ticks.children, function (tick) {
    return tick.getBoundingClientRect();
  });
  return boxes.some(function (box, i) {
    return i > 0 && box.left < boxes[i - 1].right + TICK_GAP_PX;
  });
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
  // With no bar yet, a pause still has an axis: from the run's start to now.
  var paused = gantt && gantt.dataset.start && gantt.querySelector(".gantt-pause");
  if (!bars.length && !paused) {
    return;
  }
  var axis = timeSpan(gantt, bars);
  placeBars(bars, axis.t0, axis.span);
  placePauses(gantt, axis.t0, axis.span);
  labelPauses(gantt);
  stackTracks(gantt);
  drawTicks(gantt, axis.span);
}
