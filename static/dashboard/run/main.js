/* The run page's entry point (an ES module, loaded after the vendored classic scripts, which
 * set the `htmx` and `cytoscape` globals).
 *
 * No inline script anywhere (Content-Security-Policy): the page passes data through data-*
 * attributes, and the text it shows (durations, token counts, money) comes formatted from the
 * server (dashboard/formatting.py); only the ticking clocks format in the browser (format.js).
 *
 * The modules: live.js (the websocket), oob.js (the htmx extension filtering its fragments),
 * progress.js (running tasks' live progress), graph.js (the DAG), panels.js (the task panel),
 * gantt.js, clocks.js, log.js, flash.js.
 * After every swap, sync() brings each of them up to date with the page.
 */

import { readSkew, tickClocks } from "./clocks.js";
import { clearFlash, fadeSuccess, showActionErrors } from "./flash.js";
import { layoutGantt } from "./gantt.js";
import {
  collapseAll,
  currentGraph,
  dagTool,
  expandAll,
  goToFirstMatch,
  searchTasks,
  setMode,
  startGraph,
  syncGraph,
} from "./graph.js";
import { lastSeq, startLive } from "./live.js";
import { filterLog } from "./log.js";
import { defineLiveExtension, rememberReaderDisclosures } from "./oob.js";
import { closePanel, openTask, rewatch, startPanel, syncPanel } from "./panels.js";
import { applyProgress } from "./progress.js";

var CLOCK_TICK_MS = 1000;

// Separation of duties: the plan's launcher may edit or reject it, not approve it. The checkpoint
// card is the same HTML for every viewer (it is rendered once for the live view), so the launcher's
// own page hides the Approve button here; the server refuses it anyway, saying who may approve.
function hideOwnApprove() {
  var me = document.body.dataset.user;
  document.querySelectorAll("button[data-launcher]").forEach(function (button) {
    button.hidden = !!me && button.dataset.launcher === me;
  });
}

// The header's badge as a live frame brings it (the same HTML for every viewer who may decide)
// counts every checkpoint waiting; data-own ("user:count …") names the plans each launcher may not
// approve, which wait for another approver: the launcher's own page takes them off, so that the
// badge counts what their inbox lists for them to decide (engine/approvers.py), as its poll does.
function countOwnPlansOut() {
  var badge = document.getElementById("approvals-count");
  var me = document.body.dataset.user;
  if (!badge || !badge.dataset.own || !me) {
    return;
  }
  var own = 0;
  badge.dataset.own.split(" ").forEach(function (pair) {
    var parts = pair.split(":");
    if (parts[0] === me) {
      own = Number(parts[1]);
    }
  });
  badge.removeAttribute("data-own");
  var left = Number(badge.textContent || "0") - own;
  badge.textContent = left > 0 ? String(left) : "";
  badge.classList.toggle("count-pending", left > 0);
  if (left <= 0) {
    badge.removeAttribute("title");
  }
}

function sync() {
  fadeSuccess();
  hideOwnApprove();
  countOwnPlansOut();
  readSkew();
  applyProgress();
  syncGraph();
  filterLog();
  layoutGantt();
  syncPanel();
}

// Out-of-band parts also arrive in the answers to actions (hx-swap="none"): sync once after them.
var syncQueued = false;
function syncSoon() {
  if (!syncQueued) {
    syncQueued = true;
    window.setTimeout(function () {
      syncQueued = false;
      sync();
    }, 0);
  }
}

function onClick(event) {
  var link = event.target.closest(".task-link[data-task], .gantt-bar[data-task]");
  if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
    event.preventDefault();
    openTask(link.dataset.task);
    return;
  }
  if (event.target.closest("[data-close-panel]")) {
    closePanel();
    return;
  }
  var dismiss = event.target.closest("[data-dismiss]");
  if (dismiss) {
    var target = document.getElementById(dismiss.dataset.dismiss);
    if (target) {
      clearFlash(target);
    }
    return;
  }
  var tool = event.target.closest("[data-dag]");
  if (tool) {
    dagTool(tool.dataset.dag);
  }
}

function tick() {
  tickClocks();
  layoutGantt();
}

function start(root, htmx) {
  // htmx "settles" a swapped element by copying the old element's class and style onto the new
  // one first; copying a style attribute is inline style, which the CSP forbids. Positions set
  // through the CSSOM (Gantt bars) are recomputed after each swap anyway.
  htmx.config.attributesToSettle = ["class", "width", "height"];
  defineLiveExtension(htmx);
  rememberReaderDisclosures();
  startLive(root, { onOpen: rewatch, onFrame: sync });
  showActionErrors(document.body);
  document.body.addEventListener("htmx:oobAfterSwap", syncSoon);
  document.body.addEventListener("htmx:afterSettle", syncSoon);
  document.addEventListener("click", onClick);

  startGraph(openTask);
  startPanel();
  // For tests and the console: window.glassboxRun.cy is the DAG's Cytoscape instance.
  window.glassboxRun = {
    get cy() {
      return currentGraph().cy;
    },
    get graph() {
      return currentGraph().graph;
    },
    get minimap() {
      return currentGraph().mini;
    },
    get mode() {
      return currentGraph().mode;
    },
    get focused() {
      return currentGraph().focused;
    },
    expandAll: expandAll,
    collapseAll: collapseAll,
    setMode: setMode,
    searchTasks: searchTasks,
    goToFirstMatch: goToFirstMatch,
    lastSeq: lastSeq,
  };
  hideOwnApprove();
  fadeSuccess(); // a message the page came with ("Run #7 launched.") fades as an action's answer does
  filterLog();
  readSkew();
  tick();
  window.setInterval(tick, CLOCK_TICK_MS);
}

var liveRoot = document.getElementById("run-live");
if (liveRoot && window.htmx) {
  start(liveRoot, window.htmx);
}
