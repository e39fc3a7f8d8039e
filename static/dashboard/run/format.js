/* Durations for the clocks that tick in the browser (elapsed, ETA, the Gantt's time axis).
 *
 * Everything else on the pages is formatted once, on the server (dashboard/formatting.py).
 * formatDuration mirrors format_duration there rule for rule, Python's rounding included
 * (half to even: 12.5 s is "12 s", 0.25 s is "0.2 s"); tests/browser/test_formatting.py
 * compares the two on the same values.
 */

// Python's round(): to the nearest integer, ties to the even one.
function roundHalfEven(x) {
  return Math.abs(x - Math.trunc(x)) === 0.5 ? 2 * Math.round(x / 2) : Math.round(x);
}

// Python's f"{x:.1f}" for 0 <= x: Number.toFixed rounds exact ties (x = n/4, n odd) up,
// Python to the even tenth.
function oneDecimal(x) {
  var quarters = x * 4;
  if (Number.isInteger(quarters) && quarters % 2 === 1) {
    return (roundHalfEven(x * 10) / 10).toFixed(1);
  }
  return x.toFixed(1);
}

function twoDigits(n) {
  return (n < 10 ? "0" : "") + n;
}

/** 0.8 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h; an em dash when unknown. */
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) {
    return "—";
  }
  if (seconds < 10) {
    return oneDecimal(Math.max(0, seconds)) + " s";
  }
  var whole = roundHalfEven(seconds);
  if (whole < 60) {
    return whole + " s";
  }
  var minutes = Math.floor(whole / 60);
  var secs = whole % 60;
  if (minutes < 60) {
    return minutes + " min " + twoDigits(secs) + " s";
  }
  var hours = Math.floor(minutes / 60);
  minutes = minutes % 60;
  if (hours < 48) {
    return hours + " h " + twoDigits(minutes) + " min";
  }
  return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
}
