/* The Gantt chart: attempt bars placed on a shared time axis, one lane per agent.
 *
 * The bars carry their times (data-start / data-end, epoch milliseconds); an open attempt
 * grows with the server's clock. Overlapping attempts of one agent go on separate tracks.
 * A long span the run lay ended before a person reopened it is folded (makeAxis): drawn to
 * scale, minutes of nothing left the seconds of work around them a sliver each.
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
// A span the run lay ended is folded when it would take more than this share of the time drawn
// (and more room than a fold): drawn FOLD_PX wide, whatever it lasted, the axis going on after it.
var FOLD_SHARE = 0.25;
var FOLD_PX = 48;
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

// The time axis from t0 to t0 + span as % of a lane lanePx wide: in proportion to time, but for
// the long spans the run lay ended (the "ended" row's bands), each folded to FOLD_PX, the longest
// first while one takes more than FOLD_SHARE of the time still drawn to scale. `x(t)` places a
// moment; `pieces` are the stretches drawn to scale, between the folds, where the ticks go.
function makeAxis(gantt, t0, span, lanePx) {
  var t1 = t0 + span;
  var foldPct = (100 * FOLD_PX) / lanePx;
  var ended = Array.prototype.map.call(gantt.querySelectorAll(".gantt-ended.is-labelled"), function (band) {
    return { from: Math.max(t0, Number(band.dataset.start)), to: Math.min(t1, Number(band.dataset.end)) };
  });
  ended.sort(function (a, b) {
    return b.to - b.from - (a.to - a.from);
  });
  var folds = [];
  var scaled = span; // the time drawn to scale
  ended.forEach(function (spell) {
    var length = spell.to - spell.from;
    var atScalePct = ((100 - folds.length * foldPct) * length) / scaled; // were it not folded
    var room = 100 - (folds.length + 1) * foldPct; // what the lane would keep for the time to scale
    if (length > FOLD_SHARE * scaled && atScalePct > foldPct && room >= 50) {
      folds.push(spell);
      scaled -= length;
    }
  });
  folds.sort(function (a, b) {
    return a.from - b.from;
  });
  scaled = Math.max(1, scaled);
  var scaledPct = 100 - folds.length * foldPct;
  function x(t) {
    var pct = 0;
    var cursor = t0;
    for (var i = 0; i < folds.length && t > folds[i].from; i++) {
      pct += ((folds[i].from - cursor) * scaledPct) / scaled;
      if (t < folds[i].to) {
        return pct + ((t - folds[i].from) * foldPct) / (folds[i].to - folds[i].from);
      }
      pct += foldPct;
      cursor = folds[i].to;
    }
    return pct + ((t - cursor) * scaledPct) / scaled;
  }
  var pieces = [];
  var from = t0;
  folds.forEach(function (fold) {
    pieces.push({ from: from, to: fold.from });
    from = fold.to;
  });
  pieces.push({ from: from, to: t1 });
  return { t0: t0, scaled: scaled, x: x, pieces: pieces, folds: folds };
}

// Each bar from its start to its end, in % of its lane; a bar that ends at the end of the axis
// (an attempt cancelled with its run) keeps its least width by starting that much earlier.
function placeBars(bars, axis) {
  bars.forEach(function (bar) {
    var lanePx = bar.parentElement.clientWidth || 1;
    var start = Number(bar.dataset.start);
    var end = bar.dataset.end ? Number(bar.dataset.end) : Math.max(start, now());
    var width = Math.min(100, Math.max((100 * MIN_BAR_PX) / lanePx, axis.x(end) - axis.x(start)));
    var left = Math.max(0, Math.min(axis.x(start), 100 - width));
    bar.style.left = left.toFixed(3) + "%";
    bar.style.width = width.toFixed(3) + "%";
    bar.classList.toggle("is-open", !bar.dataset.end);
    bar.classList.toggle("is-narrow", (width * lanePx) / 100 < NARROW_PX);
  });
}

// The spans the run was paused: a band across every lane (and, labelled, on the "paused" row),
// from the pause to the resume, or growing with the clock while the run is still paused. The
// spans it lay ended likewise (".gantt-ended", on the "ended" row), a folded one marked so.
function placeBands(gantt, axis) {
  var folded = axis.folds.map(function (fold) {
    return fold.from;
  });
  gantt.querySelectorAll(".gantt-pause, .gantt-ended").forEach(function (band) {
    var start = Number(band.dataset.start);
    var end = band.dataset.end ? Number(band.dataset.end) : Math.max(start, now());
    var left = Math.max(0, Math.min(axis.x(start), 100));
    var width = Math.max(0, Math.min(axis.x(end) - axis.x(start), 100 - left));
    band.style.left = left.toFixed(3) + "%";
    band.style.width = width.toFixed(3) + "%";
    band.classList.toggle("is-folded", folded.indexOf(Math.max(axis.t0, start)) >= 0);
  });
}

// Where each band on the "paused" row writes "paused" (on the "ended" row, "ended"): inside it
// when it fits; else beside it, on the right or the left, where no other band or label is; else
// nowhere (a short pause drew "pa"). The band's title says how long the span was either way.
function labelPauses(gantt) {
  gantt.querySelectorAll(".gantt-pauses").forEach(labelRow);
}

function labelRow(row) {
  var rowBox = row.getBoundingClientRect();
  var bands = Array.prototype.slice.call(row.querySelectorAll(".is-labelled"));
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
    if (band.clientWidth < need) {
      // Its room inside its borders, not its box: a fold's borders are thick.
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
// on a phone "2 min 00 s" and "3 min 00 s" were written over each other. They count the time
// since the run started, folds included: after a fold they go on from where the run was reopened.
function drawTicks(gantt, axis) {
  var ticks = gantt.querySelector(".gantt-ticks");
  if (!ticks) {
    return;
  }
  var scaledS = axis.scaled / 1000;
  var step = niceStep(scaledS / TICKS);
  for (;;) {
    writeTicks(ticks, axis, step);
    keepLabelsInside(ticks);
    dropCrowded(ticks, ".past-fold");
    var longer = niceStep(step + 0.001);
    if (!labelsOverlap(ticks)) {
      return;
    }
    if (longer <= step || step > scaledS) {
      dropCrowded(ticks, ".gantt-tick"); // the longest step still crowds them: fewer labels
      return;
    }
    step = longer;
  }
}

// A tick every `step` seconds of the run's time, on each piece drawn to scale.
function writeTicks(ticks, axis, step) {
  ticks.textContent = "";
  axis.pieces.forEach(function (piece, i) {
    var last = (piece.to - axis.t0) / 1000 + 0.001;
    for (var s = Math.ceil((piece.from - axis.t0) / 1000 / step - 1e-9) * step; s <= last; s += step) {
      var tick = document.createElement("span");
      tick.className = "gantt-tick";
      tick.textContent = formatDuration(s).replace(".0 s", " s");
      tick.style.left = axis.x(axis.t0 + s * 1000).toFixed(3) + "%";
      tick.classList.toggle("past-fold", i > 0);
      ticks.appendChild(tick);
    }
  });
}

// The ticks matching `which` are left out where the label before them still writes: those after a
// fold (the fold is narrow, their labels long: "10 min 24 s"; the step stays the one the time
// before the first fold needs), or any, when even the longest step leaves labels over each other.
function dropCrowded(ticks, which) {
  var right = -Infinity;
  Array.prototype.slice.call(ticks.children).forEach(function (tick) {
    var box = tick.getBoundingClientRect();
    if (tick.matches(which) && box.left < right + TICK_GAP_PX) {
      tick.remove();
      return;
    }
    right = box.right;
  });
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
  var banded = gantt && gantt.dataset.start && gantt.querySelector(".gantt-pause, .gantt-ended");
  if (!bars.length && !banded) {
    return;
  }
  var time = timeSpan(gantt, bars);
  var lane = gantt.querySelector(".gantt-ticks");
  var axis = makeAxis(gantt, time.t0, time.span, (lane && lane.clientWidth) || 1);
  placeBars(bars, axis);
  placeBands(gantt, axis);
  labelPauses(gantt);
  stackTracks(gantt);
  drawTicks(gantt, axis);
}
