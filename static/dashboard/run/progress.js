/* Live progress of running tasks (not events: orchestrator/engine/live.py).
 *
 * A live frame carries #live-progress with data-tasks="pk:percent,...". Each task row still
 * shown as running takes the new percentage (its <progress> bar and its data-progress, which the
 * DAG reads); a row that has moved on (an event frame said it ended) is left as it is, so a late
 * live frame never turns a finished task back.
 */

export function applyProgress() {
  var marker = document.getElementById("live-progress");
  if (!marker || !marker.dataset.tasks) {
    return;
  }
  marker.dataset.tasks.split(",").forEach(function (pair) {
    var parts = pair.split(":");
    var row = document.getElementById("task-" + parts[0]);
    var percent = Number(parts[1]);
    if (!row || row.dataset.state !== "running" || !(percent >= 0)) {
      return;
    }
    row.dataset.progress = String(percent);
    var bar = row.querySelector("progress");
    if (bar) {
      bar.value = percent;
      bar.setAttribute("aria-label", percent + "%");
    }
  });
  marker.dataset.tasks = "";
}
