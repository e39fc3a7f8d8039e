/* The `glassbox-live` htmx extension: out-of-band fragments (websocket frames and the answers
 * to actions) are filtered before htmx swaps them.
 *
 *   - A part whose target is not on the page is dropped (e.g. the panel of a task closed a
 *     moment ago), unless it carries data-upsert: then it is appended to that container
 *     (a new attempt's Gantt bar).
 *   - Log rows already shown are dropped (a resume after a gap resends them).
 *   - Before a task's output is replaced, the panel notes whether the reader was at its end.
 *   - A disclosure the reader opened or closed (a tool call's Arguments) keeps that state when
 *     the fragment holding it is sent again (the call's row, when its approval or result arrives).
 */

import { noteOutputScroll } from "./panels.js";

var OUTPUT_PREFIX = "task-output-";

function targetSelector(child, oob) {
  var colon = oob.indexOf(":");
  return colon > 0 ? oob.slice(colon + 1) : "#" + CSS.escape(child.id);
}

// Wraps `child` so htmx appends it to its data-upsert container; drops it if there is none.
function upsert(child) {
  var container = document.querySelector(child.dataset.upsert);
  if (!container) {
    child.remove();
    return;
  }
  var wrapper = document.createElement("div");
  wrapper.setAttribute("hx-swap-oob", "beforeend:" + child.dataset.upsert);
  child.removeAttribute("hx-swap-oob");
  child.parentNode.insertBefore(wrapper, child);
  wrapper.appendChild(child);
}

function dropRowsShown(rows) {
  Array.prototype.slice.call(rows.children).forEach(function (row) {
    if (row.id && document.getElementById(row.id)) {
      row.remove();
    }
  });
}

// Marks the disclosures the reader toggles (a click on the summary, or Enter/Space on it).
export function rememberReaderDisclosures() {
  document.addEventListener("click", function (event) {
    var summary = event.target.closest("summary");
    if (summary && summary.parentElement && summary.parentElement.tagName === "DETAILS") {
      summary.parentElement.setAttribute("data-reader-set", "");
    }
  });
}

// Gives the incoming fragment's disclosures the state the reader chose for them on the page:
// each is found by the nearest element with an id around it and its position there.
function keepReaderDisclosures(child) {
  var shown = child.id && document.getElementById(child.id);
  if (!shown) {
    return;
  }
  shown.querySelectorAll("details[data-reader-set]").forEach(function (before) {
    var holder = before.parentElement.closest("[id]");
    if (!holder || !shown.contains(holder)) {
      return;
    }
    var incoming = holder === shown ? child : child.querySelector("#" + CSS.escape(holder.id));
    if (!incoming) {
      return;
    }
    var index = Array.prototype.indexOf.call(holder.querySelectorAll("details"), before);
    var after = incoming.querySelectorAll("details")[index];
    if (after) {
      after.open = before.open;
      after.setAttribute("data-reader-set", "");
    }
  });
}

function filterPart(child) {
  var oob = child.getAttribute("hx-swap-oob");
  if (oob === null) {
    return;
  }
  if (child.dataset.upsert && !document.getElementById(child.id)) {
    upsert(child);
    return;
  }
  if (!document.querySelector(targetSelector(child, oob))) {
    child.remove();
    return;
  }
  if (child.id === "event-log-rows" && child.dataset.mode === "prepend") {
    dropRowsShown(child);
  }
  if (child.id && child.id.indexOf(OUTPUT_PREFIX) === 0) {
    noteOutputScroll(child.id);
  }
  keepReaderDisclosures(child);
}

export function defineLiveExtension(htmx) {
  htmx.defineExtension("glassbox-live", {
    transformResponse: function (text) {
      if (typeof text !== "string" || text.indexOf("hx-swap-oob") < 0) {
        return text;
      }
      var template = document.createElement("template");
      template.innerHTML = text;
      Array.prototype.slice.call(template.content.children).forEach(filterPart);
      return template.innerHTML;
    },
  });
}
