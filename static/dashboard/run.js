/* Glassbox run page: the DAG (Cytoscape.js + dagre), the live websocket and small clocks.
 *
 * No inline script anywhere (Content-Security-Policy): the page passes data through data-*
 * attributes (#dag-graph's data-graph holds the DAG's structure as JSON).
 *
 * Live updates (protocol in dashboard/consumers.py): htmx-ext-ws swaps the server's
 * out-of-band fragments; this file then
 *   - sends {"type": "resume", "last_seq": N} on every (re)connect and when a frame's first
 *     sequence number is not N + 1 (a gap), so no event is ever lost;
 *   - reads every task row (#task-<pk>, data-state / data-progress / data-tokens) and
 *     recolours the DAG's nodes: the rows are the single source of node state;
 *   - rebuilds the graph when #dag-graph's data-graph changes (a subtask removed from the plan);
 *   - sends {"type": "watch", "task": pk} when a task panel opens, so its output streams.
 * The `glassbox-live` htmx extension drops out-of-band fragments whose target is not on the
 * page (e.g. the panel of a task closed a moment ago) and log rows already shown.
 */
(function () {
  "use strict";

  var root = document.getElementById("run-live");
  if (!root || !window.htmx) {
    return;
  }

  // htmx "settles" a swapped element by copying the old element's class and style onto the new
  // one first; copying a style attribute is inline style, which the CSP forbids. Positions set
  // through the CSSOM (Gantt bars) are recomputed after each swap anyway.
  htmx.config.attributesToSettle = ["class", "width", "height"];

  var MAX_LOG_ROWS = 500;
  var GANTT_ROW = 23;
  var TITLE_CHARS = 30;
  var state = {
    lastSeq: Number(root.dataset.seq) || 0,
    socket: null,
    watched: null,
    cy: null,
    graphText: null,
    collapsed: {},
    skew: 0,
    followOutput: true,
  };

  // --- Small helpers ----------------------------------------------------------------------------

  function now() {
    return Date.now() + state.skew;
  }

  function formatDuration(seconds) {
    if (seconds === null || isNaN(seconds)) {
      return "—";
    }
    seconds = Math.max(0, seconds);
    if (seconds < 10) {
      return seconds.toFixed(1) + " s";
    }
    var whole = Math.round(seconds);
    if (whole < 60) {
      return whole + " s";
    }
    var minutes = Math.floor(whole / 60);
    var secs = whole % 60;
    if (minutes < 60) {
      return minutes + " min " + (secs < 10 ? "0" : "") + secs + " s";
    }
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    return hours + " h " + (minutes < 10 ? "0" : "") + minutes + " min";
  }

  function formatTokens(n) {
    if (n < 10000) {
      return n.toLocaleString("en-US");
    }
    if (n < 1000000) {
      return (n / 1000).toFixed(1) + "k";
    }
    return (n / 1000000).toFixed(2) + "M";
  }

  function shorten(text, max) {
    return text.length > max ? text.slice(0, max - 1) + "…" : text;
  }

  var colourCache = {};
  function colour(name) {
    if (!(name in colourCache)) {
      var value = getComputedStyle(document.documentElement).getPropertyValue("--state-" + name).trim();
      colourCache[name] = value || "#8a94a3";
    }
    return colourCache[name];
  }
  function tint(name) {
    if (!(("tint-" + name) in colourCache)) {
      var value = getComputedStyle(document.documentElement).getPropertyValue("--tint-" + name).trim();
      colourCache["tint-" + name] = value || "#eef0f3";
    }
    return colourCache["tint-" + name];
  }

  function showFlash(message, level) {
    var flash = document.getElementById("run-flash");
    if (!flash) {
      return;
    }
    flash.className = "run-flash run-flash-" + (level || "error");
    flash.textContent = "";
    var text = document.createElement("span");
    text.className = "run-flash-text";
    text.textContent = message;
    var close = document.createElement("button");
    close.type = "button";
    close.className = "run-flash-close";
    close.setAttribute("data-dismiss", "run-flash");
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "×";
    flash.appendChild(text);
    flash.appendChild(close);
  }

  // --- The websocket --------------------------------------------------------------------------

  function send(message) {
    if (state.socket) {
      state.socket.send(JSON.stringify(message));
    }
  }

  function setLive(status, text) {
    var el = document.getElementById("live-status");
    if (el) {
      el.dataset.state = status;
      el.querySelector(".live-text").textContent = text;
    }
  }

  htmx.defineExtension("glassbox-live", {
    transformResponse: function (text) {
      if (typeof text !== "string" || text.indexOf("hx-swap-oob") < 0) {
        return text;
      }
      var template = document.createElement("template");
      template.innerHTML = text;
      Array.prototype.slice.call(template.content.children).forEach(function (child) {
        var oob = child.getAttribute("hx-swap-oob");
        if (oob === null) {
          return;
        }
        var colon = oob.indexOf(":");
        var selector = colon > 0 ? oob.slice(colon + 1) : "#" + CSS.escape(child.id);
        if (child.dataset.upsert && !document.getElementById(child.id)) {
          // A part that may not be shown yet (a new attempt's bar): append it to its container.
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
          return;
        }
        if (!document.querySelector(selector)) {
          child.remove();
          return;
        }
        if (child.id === "event-log-rows" && child.dataset.mode === "prepend") {
          Array.prototype.slice.call(child.children).forEach(function (row) {
            if (row.id && document.getElementById(row.id)) {
              row.remove();
            }
          });
        }
        if (child.id && child.id.indexOf("task-output-") === 0) {
          var pre = document.getElementById(child.id).querySelector("pre.output-stream");
          state.followOutput = !pre || pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
        }
      });
      return template.innerHTML;
    },
  });

  document.body.addEventListener("htmx:wsOpen", function (event) {
    state.socket = event.detail.socketWrapper;
    setLive("live", "live");
    send({ type: "resume", last_seq: state.lastSeq });
    if (state.watched) {
      send({ type: "watch", task: state.watched });
    }
  });
  document.body.addEventListener("htmx:wsClose", function () {
    setLive("offline", "reconnecting…");
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    var marker = document.getElementById("live-seq");
    if (marker) {
      var from = Number(marker.dataset.from);
      var to = Number(marker.dataset.to);
      if (from > state.lastSeq + 1) {
        // A gap: ask again from the last event applied. Parts are idempotent, and rows already
        // shown are dropped by the extension above.
        send({ type: "resume", last_seq: state.lastSeq });
      }
      if (to > state.lastSeq) {
        state.lastSeq = to;
        root.dataset.seq = String(to);
      }
    }
    sync();
  });

  // A refused action answers 200 with the engine's reason as an error message; a missing
  // permission answers 403 with a sentence: show it.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (status === 403) {
      event.detail.shouldSwap = false;
      event.detail.isError = false;
      showFlash(event.detail.xhr.responseText || "You do not have permission to do this.", "error");
    } else if (status >= 400) {
      event.detail.shouldSwap = false;
      event.detail.isError = false;
      showFlash("The server could not do this (HTTP " + status + "). Reload the page and try again.", "error");
    }
  });
  document.body.addEventListener("htmx:sendError", function () {
    showFlash("The server did not answer. Check the connection and try again.", "error");
  });
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
  document.body.addEventListener("htmx:oobAfterSwap", syncSoon);
  document.body.addEventListener("htmx:afterSettle", syncSoon);

  // --- The DAG ----------------------------------------------------------------------------------

  // The page's compact graph (dashboard/fragments.py compact_graph) in Cytoscape's terms.
  function readGraph() {
    var el = document.getElementById("dag-graph");
    var text = el ? el.dataset.graph || "" : "";
    var raw = text ? JSON.parse(text) : { nodes: [], edges: [], groups: [] };
    return {
      text: text,
      data: {
        nodes: raw.nodes.map(function (n) {
          var row = document.getElementById("task-" + n[0]);
          return {
            id: "t" + n[0],
            task: n[0],
            group: n[1],
            title: row ? row.dataset.title : "task " + n[0],
            agent: row ? row.dataset.agent : "",
          };
        }),
        edges: raw.edges.map(function (e) {
          return { id: "e" + e[0] + "-" + e[1], source: "t" + e[0], target: "t" + e[1] };
        }),
        groups: raw.groups.map(function (g) {
          return {
            id: g.id,
            label: g.label,
            collapsed: g.collapsed,
            members: g.members.map(function (pk) {
              return "t" + pk;
            }),
          };
        }),
      },
    };
  }

  function rowData(taskId) {
    var row = document.getElementById("task-" + taskId);
    if (!row) {
      return null;
    }
    return {
      state: row.dataset.state || "pending",
      stateLabel: row.dataset.stateLabel || row.dataset.state || "",
      progress: Number(row.dataset.progress) || 0,
      tokens: Number(row.dataset.tokens) || 0,
      wait: row.dataset.wait || "",
    };
  }

  function nodeLabel(d) {
    var second = d.agent + " · " + d.stateLabel;
    if (d.tokens) {
      second += " · " + formatTokens(d.tokens) + " tok";
    }
    return shorten(d.title, TITLE_CHARS) + "\n" + second;
  }

  // The aggregate state of a group: the most urgent state among its members.
  var GROUP_PRIORITY = ["failed", "running", "throttled", "waiting", "queued", "ready", "awaiting_review",
    "waiting_gate", "pending", "cancelled", "skipped", "succeeded"];

  // A state's name as the legend shows it (the legend is rendered from the engine's labels).
  function stateName(s) {
    var item = document.querySelector(".legend li[data-state='" + s + "']");
    return item ? item.textContent.trim() : s;
  }

  function groupLabel(group, counts) {
    var parts = [];
    ["running", "failed", "queued", "throttled", "waiting", "ready", "waiting_gate", "awaiting_review", "succeeded",
      "pending", "skipped", "cancelled"].forEach(function (s) {
      if (counts[s]) {
        parts.push(counts[s] + " " + stateName(s));
      }
    });
    return group.label + "\n" + parts.slice(0, 3).join(" · ");
  }

  function refreshNodes() {
    var cy = state.cy;
    if (!cy) {
      return;
    }
    cy.batch(function () {
      cy.nodes(".task").forEach(function (node) {
        var d = rowData(node.data("task"));
        if (!d) {
          return;
        }
        var label = nodeLabel({ title: node.data("title"), agent: node.data("agent"), stateLabel: d.stateLabel, tokens: d.tokens });
        if (node.data("state") !== d.state || node.data("progress") !== d.progress || node.data("label") !== label) {
          node.data({ state: d.state, progress: d.progress, tokens: d.tokens, label: label, wait: d.wait });
        }
      });
      cy.nodes(".group").forEach(function (groupNode) {
        var group = groupNode.data("group");
        var counts = {};
        var done = 0;
        group.members.forEach(function (id) {
          var member = cy.getElementById(id);
          var s = member.data("state") || "pending";
          counts[s] = (counts[s] || 0) + 1;
          if (s === "succeeded" || s === "skipped" || s === "cancelled" || s === "failed") {
            done += 1;
          }
        });
        var aggregate = "pending";
        for (var i = 0; i < GROUP_PRIORITY.length; i++) {
          if (counts[GROUP_PRIORITY[i]]) {
            aggregate = GROUP_PRIORITY[i];
            break;
          }
        }
        groupNode.data({
          state: aggregate,
          progress: Math.round((100 * done) / Math.max(1, group.members.length)),
          label: groupLabel(group, counts),
        });
      });
    });
  }

  function stylesheet() {
    return [
      {
        selector: "node",
        style: {
          shape: "round-rectangle",
          width: 200,
          height: 50,
          "background-fill": "linear-gradient",
          "background-gradient-direction": "to-right",
          "background-gradient-stop-colors": function (ele) {
            var t = tint(ele.data("state") || "pending");
            return t + " " + t + " #ffffff #ffffff";
          },
          "background-gradient-stop-positions": function (ele) {
            var p = Math.max(0, Math.min(100, ele.data("progress") || 0));
            return "0% " + p + "% " + p + "% 100%";
          },
          "border-width": 2,
          "border-color": function (ele) {
            return colour(ele.data("state") || "pending");
          },
          label: "data(label)",
          "text-wrap": "wrap",
          "text-max-width": 190,
          "text-valign": "center",
          "text-halign": "center",
          "font-size": 11,
          "font-family": "DejaVu Sans, Arial, sans-serif",
          color: "#1b2430",
          "line-height": 1.35,
        },
      },
      { selector: "node[state = 'skipped'], node[state = 'cancelled']", style: { "border-style": "dashed", color: "#4a5565" } },
      { selector: "node[state = 'waiting']", style: { "border-style": "double", "border-width": 4 } },
      { selector: "node[state = 'throttled']", style: { "border-style": "dashed", "border-width": 3 } },
      { selector: "node[state = 'running']", style: { "border-width": 3 } },
      {
        selector: "node.group",
        style: { width: 230, height: 64, "text-max-width": 216, "border-style": "solid", "border-width": 3, "font-weight": "bold" },
      },
      {
        selector: "node.is-selected",
        style: { "underlay-color": "#2563a8", "underlay-padding": 6, "underlay-opacity": 0.22, "underlay-shape": "round-rectangle" },
      },
      { selector: ".is-hidden", style: { display: "none" } },
      {
        selector: "edge",
        style: {
          width: 1.5,
          "curve-style": "taxi",
          "taxi-direction": "rightward",
          "taxi-turn": 28,
          "taxi-turn-min-distance": 8,
          "line-color": "#a9b3bf",
          "target-arrow-color": "#a9b3bf",
          "target-arrow-shape": "triangle",
          "arrow-scale": 0.9,
        },
      },
      { selector: "edge.group-edge", style: { width: 2.5, "line-style": "solid", "line-color": "#8e99a8", "target-arrow-color": "#8e99a8" } },
    ];
  }

  function groupEdges(graph) {
    // Edges drawn to and from collapsed groups (each member's edges, redirected, deduplicated).
    var owner = {};
    graph.groups.forEach(function (group) {
      if (state.collapsed[group.id]) {
        group.members.forEach(function (id) {
          owner[id] = group.id;
        });
      }
    });
    var seen = {};
    var result = [];
    graph.edges.forEach(function (edge) {
      var source = owner[edge.source] || edge.source;
      var target = owner[edge.target] || edge.target;
      if (source === edge.source && target === edge.target) {
        return;
      }
      if (source === target) {
        return;
      }
      var id = "ge:" + source + ">" + target;
      if (!seen[id]) {
        seen[id] = true;
        result.push({ group: "edges", data: { id: id, source: source, target: target }, classes: "group-edge" });
      }
    });
    return result;
  }

  function applyCollapse(graph) {
    var cy = state.cy;
    cy.batch(function () {
      cy.edges(".group-edge").remove();
      graph.groups.forEach(function (group) {
        var collapsed = !!state.collapsed[group.id];
        cy.getElementById(group.id).toggleClass("is-hidden", !collapsed);
        group.members.forEach(function (id) {
          cy.getElementById(id).toggleClass("is-hidden", collapsed);
        });
      });
      cy.add(groupEdges(graph));
    });
    var anyGroups = graph.groups.length > 0;
    var anyCollapsed = graph.groups.some(function (g) {
      return state.collapsed[g.id];
    });
    var expand = document.querySelector("[data-dag='expand']");
    var collapse = document.querySelector("[data-dag='collapse']");
    if (expand) {
      expand.hidden = !anyGroups || !anyCollapsed;
    }
    if (collapse) {
      collapse.hidden = !anyGroups || anyCollapsed;
    }
  }

  function visibleElements() {
    var nodes = state.cy.nodes().not(".is-hidden");
    return nodes.union(nodes.edgesWith(nodes));
  }

  function layout() {
    var cy = state.cy;
    visibleElements().layout({
      name: "dagre",
      rankDir: "LR",
      nodeSep: 14,
      rankSep: 70,
      edgeSep: 8,
      fit: true,
      padding: 18,
      animate: false,
    }).run();
    if (cy.zoom() > 1.25) {
      cy.zoom(1.25);
      cy.center();
    }
  }

  function buildGraph() {
    var container = document.getElementById("dag");
    if (!container || !window.cytoscape) {
      return;
    }
    var graph = readGraph();
    state.graphText = graph.text;
    state.graph = graph.data;
    var elements = [];
    graph.data.nodes.forEach(function (n) {
      elements.push({
        group: "nodes",
        data: { id: n.id, task: n.task, title: n.title, agent: n.agent, state: "pending", progress: 0, label: n.title },
        classes: "task",
      });
    });
    graph.data.groups.forEach(function (g) {
      if (!(g.id in state.collapsed)) {
        state.collapsed[g.id] = !!g.collapsed;
      }
      elements.push({ group: "nodes", data: { id: g.id, group: g, label: g.label, state: "pending", progress: 0 }, classes: "group" });
    });
    graph.data.edges.forEach(function (e) {
      elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target }, classes: "dep" });
    });
    if (state.cy) {
      state.cy.destroy();
    }
    state.cy = window.cytoscape({
      container: container,
      elements: elements,
      style: stylesheet(),
      minZoom: 0.08,
      maxZoom: 3,
      boxSelectionEnabled: false,
      autoungrabify: true,
    });
    state.cy.on("tap", "node.task", function (event) {
      openTask(event.target.data("task"));
    });
    state.cy.on("tap", "node.group", function (event) {
      var id = event.target.id();
      state.collapsed[id] = false;
      applyCollapse(state.graph);
      refreshNodes();
      layout();
    });
    applyCollapse(graph.data);
    refreshNodes();
    layout();
    markSelected();
    window.glassboxRun = { cy: state.cy, graph: state.graph, expandAll: expandAll, collapseAll: collapseAll, lastSeq: lastSeq };
  }

  function lastSeq() {
    return state.lastSeq;
  }

  function expandAll() {
    state.graph.groups.forEach(function (g) {
      state.collapsed[g.id] = false;
    });
    applyCollapse(state.graph);
    refreshNodes();
    layout();
  }

  function collapseAll() {
    state.graph.groups.forEach(function (g) {
      state.collapsed[g.id] = true;
    });
    applyCollapse(state.graph);
    refreshNodes();
    layout();
  }

  function markSelected() {
    if (!state.cy) {
      return;
    }
    state.cy.nodes(".is-selected").removeClass("is-selected");
    if (state.watched) {
      state.cy.getElementById("t" + state.watched).addClass("is-selected");
    }
  }

  // --- The task panel ---------------------------------------------------------------------------

  function openTask(taskId) {
    var row = document.getElementById("task-" + taskId);
    if (!row || !row.dataset.panelUrl) {
      return;
    }
    htmx.ajax("GET", row.dataset.panelUrl, { target: "#task-panel", swap: "outerHTML" }).then(function () {
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

  function watch(taskId) {
    state.watched = taskId ? Number(taskId) : null;
    state.followOutput = true;
    send({ type: "watch", task: state.watched });
    markSelected();
  }

  function closePanel() {
    var panel = document.getElementById("task-panel");
    if (panel) {
      panel.className = "task-panel is-empty";
      panel.removeAttribute("data-task");
      panel.textContent = "";
      var hint = document.createElement("p");
      hint.className = "muted";
      hint.textContent = "Click a task in the graph, the lanes or the table to see its details.";
      panel.appendChild(hint);
    }
    watch(null);
  }

  // --- Gantt, clocks, bars ----------------------------------------------------------------------

  function layoutGantt() {
    var gantt = document.getElementById("run-gantt");
    if (!gantt) {
      return;
    }
    var bars = gantt.querySelectorAll(".gantt-bar");
    if (!bars.length) {
      return;
    }
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
    var span = Math.max(1000, t1 - t0);
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
    // Overlapping attempts of one agent go on separate tracks (greedy, by start time).
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
        bar.style.top = track * GANTT_ROW + "px";
      });
      lane.style.height = Math.max(1, trackEnds.length) * GANTT_ROW - 3 + "px";
    });
    var ticks = gantt.querySelector(".gantt-ticks");
    if (ticks) {
      var step = niceStep(span / 1000 / 5);
      var labels = [];
      for (var s = 0; s <= span / 1000 + 0.001; s += step) {
        labels.push(s);
      }
      ticks.textContent = "";
      labels.forEach(function (s) {
        var tick = document.createElement("span");
        tick.className = "gantt-tick";
        tick.textContent = formatDuration(s).replace(".0 s", " s");
        tick.style.left = ((100 * s * 1000) / span).toFixed(3) + "%";
        ticks.appendChild(tick);
      });
    }
  }

  function niceStep(raw) {
    var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] >= raw) {
        return steps[i];
      }
    }
    return 7200;
  }

  function tickClocks() {
    var elapsed = document.querySelector(".js-elapsed");
    if (elapsed && elapsed.dataset.started && !elapsed.dataset.finished) {
      elapsed.textContent = formatDuration((now() - Number(elapsed.dataset.started)) / 1000);
    }
    var eta = document.querySelector(".js-eta");
    if (eta && eta.dataset.etaAt && !eta.dataset.paused) {
      var left = (Number(eta.dataset.etaAt) - now()) / 1000;
      eta.textContent = left > 0.5 ? formatDuration(left) : "any moment";
    }
    layoutGantt();
  }

  function applyGrow() {
    document.querySelectorAll("[data-grow]").forEach(function (el) {
      el.style.flexGrow = el.dataset.grow;
    });
  }

  function readSkew() {
    var totals = document.getElementById("run-totals");
    if (totals && totals.dataset.now && totals.dataset.now !== state.nowSeen) {
      state.nowSeen = totals.dataset.now;
      state.skew = Number(totals.dataset.now) - Date.now();
    }
  }

  // --- Event log filter -------------------------------------------------------------------------

  function matchesType(type, filter) {
    if (filter === "all") {
      return true;
    }
    if (!filter) {
      return type !== "task.progress";
    }
    if (filter.indexOf(".") >= 0) {
      return type === filter;
    }
    return type.indexOf(filter + ".") === 0;
  }

  function filterLog() {
    var rows = document.getElementById("event-log-rows");
    if (!rows) {
      return;
    }
    var form = document.getElementById("event-filter");
    var task = form ? form.elements.task.value : "";
    var type = form ? form.elements.type.value : "";
    var all = rows.querySelectorAll(".event-row");
    all.forEach(function (row) {
      var show = (!task || row.dataset.task === task) && matchesType(row.dataset.type, type);
      row.classList.toggle("is-filtered", !show);
    });
    for (var i = all.length - 1; i >= MAX_LOG_ROWS; i--) {
      all[i].remove();
    }
  }

  // --- Everything after a swap ------------------------------------------------------------------

  // A success message goes away by itself after a while; an error stays until dismissed.
  var flashTimer = null;
  function fadeSuccess() {
    var flash = document.getElementById("run-flash");
    if (!flash || !flash.classList.contains("run-flash-success") || flash.dataset.timed === "1") {
      return;
    }
    flash.dataset.timed = "1";
    window.clearTimeout(flashTimer);
    flashTimer = window.setTimeout(function () {
      var current = document.getElementById("run-flash");
      if (current === flash) {
        flash.className = "run-flash";
        flash.textContent = "";
      }
    }, 6000);
  }

  function sync() {
    fadeSuccess();
    readSkew();
    var graph = document.getElementById("dag-graph");
    if (graph && graph.dataset.graph !== state.graphText) {
      buildGraph();
    } else {
      refreshNodes();
    }
    applyGrow();
    filterLog();
    layoutGantt();
    var panel = document.getElementById("task-panel");
    var shown = panel && panel.dataset.task ? Number(panel.dataset.task) : null;
    if (shown !== state.watched) {
      watch(shown);
    }
    if (state.followOutput && panel) {
      var pre = panel.querySelector(".task-output pre.output-stream");
      if (pre) {
        pre.scrollTop = pre.scrollHeight;
      }
    }
  }

  // --- Clicks -----------------------------------------------------------------------------------

  document.addEventListener("click", function (event) {
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
        target.className = "run-flash";
        target.textContent = "";
      }
      return;
    }
    var tool = event.target.closest("[data-dag]");
    if (tool && state.cy) {
      if (tool.dataset.dag === "zoom-in" || tool.dataset.dag === "zoom-out") {
        var factor = tool.dataset.dag === "zoom-in" ? 1.25 : 0.8;
        var box = state.cy.extent();
        state.cy.zoom({
          level: state.cy.zoom() * factor,
          position: { x: (box.x1 + box.x2) / 2, y: (box.y1 + box.y2) / 2 },
        });
      } else if (tool.dataset.dag === "fit") {
        state.cy.fit(visibleElements(), 18);
      } else if (tool.dataset.dag === "expand") {
        expandAll();
      } else if (tool.dataset.dag === "collapse") {
        collapseAll();
      }
    }
  });

  window.addEventListener("resize", function () {
    if (state.cy) {
      state.cy.resize();
    }
  });

  // --- Start ------------------------------------------------------------------------------------

  var initialPanel = document.getElementById("task-panel");
  state.watched = initialPanel && initialPanel.dataset.task ? Number(initialPanel.dataset.task) : null;
  buildGraph();
  applyGrow();
  layoutGantt();
  filterLog();
  readSkew();
  tickClocks();
  window.setInterval(tickClocks, 1000);
})();
