/* Live progress of running tasks (not events: orchestrator/engine/live.py).
 *
 * A live frame carries #live-progress with data-tasks="pk:percent,...". Each task row, and the
 * head of the task's open panel, still shown as running takes the new percentage (its <progress>
 * bar, the row's data-progress, which the DAG reads, and the head's [data-progress-text]); one
 * that has moved on (an event frame said it ended) is left as it is, so a late live frame never
 * turns a finished task back.
 *
 * The agent lanes' bars of running tasks show what their rows show: the lanes are redrawn from
 * the saved progress (by event frames, saves, other runs' slots), which is behind the live
 * percentages the rows took, so after every frame each lane bar takes its row's percentage (the
 * rows never step back within an attempt: dashboard/live_outputs.py LiveOutputs).
 */

function showProgress(part, percent) {
  if (!part || part.dataset.state !== "running") {
    return;
  }
  var bar = part.querySelector("progress");
  if (bar) {
    bar.value = percent;
    bar.setAttribute("aria-label", (bar.getAttribute("aria-label") || "").replace(/\d*%$/, percent + "%"));
  }
  var text = part.querySelector("[data-progress-text]");
  if (text) {
    text.textContent = percent + "%";
  }
}

function followRows() {
  document.querySelectorAll("#agent-lanes [data-lane-task]").forEach(function (item) {
    var row = document.getElementById("task-" + item.dataset.laneTask);
    var bar = row && row.dataset.state === "running" ? row.querySelector("progress") : null;
    if (bar) {
      showProgress(item, bar.value);
    }
  });
}

export function applyProgress() {
  var marker = document.getElementById("live-progress");
  if (marker && marker.dataset.tasks) {
    applyLive(marker);
  }
  followRows();
}

function applyLive(marker) {
  marker.dataset.tasks.split(",").forEach(function (pair) {
    var parts = pair.split(":");
    var percent = Number(parts[1]);
    if (!(percent >= 0)) {
      return;
    }
    var row = document.getElementById("task-" + parts[0]);
    if (row && row.dataset.state === "running") {
      row.dataset.progress = String(percent);
    }
    showProgress(row, percent);
    showProgress(document.getElementById("task-head-" + parts[0]), percent);
  });
  marker.dataset.tasks = "";
}
