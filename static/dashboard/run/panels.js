/* The task panel (#task-panel): opened from the graph, the lanes, the table or the Gantt;
 * the task shown is "watched" over the websocket so its output streams in, and the output
 * follows its end unless the reader scrolled up.
 */

import { selectTask } from "./graph.js";
import { send } from "./live.js";

var FOLLOW_SLACK_PX = 24;
var EMPTY_HINT = "Click a task in the graph, the lanes or the table to see its details.";

var watched = null;
var followOutput = true;

export function watch(taskId) {
  watched = taskId ? Number(taskId) : null;
  followOutput = true;
  send({ type: "watch", task: watched });
  selectTask(watched);
}

/** On every (re)connect: the server forgets what a closed socket watched. */
export function rewatch() {
  if (watched) {
    send({ type: "watch", task: watched });
  }
}

export function openTask(taskId) {
  var row = document.getElementById("task-" + taskId);
  var link = row ? row.querySelector("a.task-link") : null;
  if (!link) {
    return;
  }
  window.htmx.ajax("GET", link.getAttribute("href"), { target: "#task-panel", swap: "outerHTML" }).then(function () {
    watch(taskId);
    var panel = document.getElementById("task-panel");
    if (panel) {
      var box = panel.getBoundingClientRect();
      if (box.top < 0 || box.top > window.innerHeight - 80) {
        panel.scrollIntoView({ behavior: "smooth", block: "start" });
      }
    }
  });
}

export function closePanel() {
  var panel = document.getElementById("task-panel");
  if (panel) {
    panel.className = "task-panel is-empty";
    panel.removeAttribute("data-task");
    panel.textContent = "";
    var hint = document.createElement("p");
    hint.className = "muted";
    hint.textContent = EMPTY_HINT;
    panel.appendChild(hint);
  }
  watch(null);
}

/** Before a new chunk of #task-output-<pk> is swapped in: was the reader at the end? */
export function noteOutputScroll(outputId) {
  var output = document.getElementById(outputId);
  var pre = output ? output.querySelector("pre.output-stream") : null;
  followOutput = !pre || pre.scrollHeight - pre.scrollTop - pre.clientHeight < FOLLOW_SLACK_PX;
}

/** After a swap: watch the task the panel now shows; keep the output at its end if following. */
export function syncPanel() {
  var panel = document.getElementById("task-panel");
  var shown = panel && panel.dataset.task ? Number(panel.dataset.task) : null;
  if (shown !== watched) {
    watch(shown);
  }
  if (followOutput && panel) {
    var pre = panel.querySelector(".task-output pre.output-stream");
    if (pre) {
      pre.scrollTop = pre.scrollHeight;
    }
  }
}

/** At start: the panel the page was served with (a task's URL) is watched once connected. */
export function startPanel() {
  var panel = document.getElementById("task-panel");
  watched = panel && panel.dataset.task ? Number(panel.dataset.task) : null;
  selectTask(watched);
}
