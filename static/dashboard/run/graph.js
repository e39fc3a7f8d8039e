/* The DAG: Cytoscape.js (the `cytoscape` global, with the dagre layout registered) drawing
 * #dag-graph's data-graph (dashboard/fragments.py compact_graph).
 *
 * The task rows (#task-<pk>: data-state, data-state-label, data-progress, data-tokens-text)
 * are the single source of node state: refreshNodes recolours the nodes from them. Fan-out
 * groups are drawn as one node while collapsed; tapping a group expands it.
 */

var TITLE_CHARS = 30;
var ZOOM_STEP = 1.25;
var MAX_FIT_ZOOM = 1.25;
var FIT_PADDING = 18;

// The aggregate state of a group: the most urgent state among its members.
var GROUP_PRIORITY = ["failed", "running", "throttled", "waiting", "queued", "ready", "awaiting_review",
  "waiting_gate", "pending", "cancelled", "skipped", "succeeded"];
// The order of the counts in a group's label (the first three shown).
var GROUP_LABEL_ORDER = ["running", "failed", "queued", "throttled", "waiting", "ready", "waiting_gate",
  "awaiting_review", "succeeded", "pending", "skipped", "cancelled"];
var FINISHED = ["succeeded", "skipped", "cancelled", "failed"];

var cy = null;
var graph = null;
var graphText = null;
var collapsed = {};
var selectedTask = null;
var onOpenTask = function () {};

// --- Reading the page ---------------------------------------------------------------------------

function taskRow(taskId) {
  return document.getElementById("task-" + taskId);
}

// The page's compact graph in Cytoscape's terms.
function readGraph() {
  var el = document.getElementById("dag-graph");
  var text = el ? el.dataset.graph || "" : "";
  var raw = text ? JSON.parse(text) : { nodes: [], edges: [], groups: [] };
  return {
    text: text,
    data: {
      nodes: raw.nodes.map(function (n) {
        var row = taskRow(n[0]);
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
  var row = taskRow(taskId);
  if (!row) {
    return null;
  }
  return {
    state: row.dataset.state || "pending",
    stateLabel: row.dataset.stateLabel || row.dataset.state || "",
    progress: Number(row.dataset.progress) || 0,
    tokens: Number(row.dataset.tokens) || 0,
    tokensText: row.dataset.tokensText || "",
    wait: row.dataset.wait || "",
  };
}

// A state's name as the legend shows it (the legend is rendered from the engine's labels).
function stateName(s) {
  var item = document.querySelector(".legend li[data-state='" + s + "']");
  return item ? item.textContent.trim() : s;
}

var colourCache = {};
// A CSS custom property of the page (run.css: --state-<name>, --tint-<name>).
function cssColour(property, fallback) {
  if (!(property in colourCache)) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(property).trim();
    colourCache[property] = value || fallback;
  }
  return colourCache[property];
}

// --- Labels and states ----------------------------------------------------------------------------

function shorten(text, max) {
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

function nodeLabel(title, agent, d) {
  var second = agent + " · " + d.stateLabel;
  if (d.tokens) {
    second += " · " + d.tokensText + " tok";
  }
  return shorten(title, TITLE_CHARS) + "\n" + second;
}

function groupLabel(group, counts) {
  var parts = [];
  GROUP_LABEL_ORDER.forEach(function (s) {
    if (counts[s]) {
      parts.push(counts[s] + " " + stateName(s));
    }
  });
  return group.label + "\n" + parts.slice(0, 3).join(" · ");
}

function refreshGroup(groupNode) {
  var group = groupNode.data("group");
  var counts = {};
  var done = 0;
  group.members.forEach(function (id) {
    var s = cy.getElementById(id).data("state") || "pending";
    counts[s] = (counts[s] || 0) + 1;
    if (FINISHED.indexOf(s) >= 0) {
      done += 1;
    }
  });
  var aggregate = GROUP_PRIORITY.find(function (s) {
    return counts[s];
  }) || "pending";
  groupNode.data({
    state: aggregate,
    progress: Math.round((100 * done) / Math.max(1, group.members.length)),
    label: groupLabel(group, counts),
  });
}

function refreshNodes() {
  if (!cy) {
    return;
  }
  cy.batch(function () {
    cy.nodes(".task").forEach(function (node) {
      var d = rowData(node.data("task"));
      if (!d) {
        return;
      }
      var label = nodeLabel(node.data("title"), node.data("agent"), d);
      if (node.data("state") !== d.state || node.data("progress") !== d.progress || node.data("label") !== label) {
        node.data({ state: d.state, progress: d.progress, tokens: d.tokens, label: label, wait: d.wait });
      }
    });
    cy.nodes(".group").forEach(refreshGroup);
  });
}

// --- Drawing --------------------------------------------------------------------------------------

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
          var t = cssColour("--tint-" + (ele.data("state") || "pending"), "#eef0f3");
          return t + " " + t + " #ffffff #ffffff";
        },
        "background-gradient-stop-positions": function (ele) {
          var p = Math.max(0, Math.min(100, ele.data("progress") || 0));
          return "0% " + p + "% " + p + "% 100%";
        },
        "border-width": 2,
        "border-color": function (ele) {
          return cssColour("--state-" + (ele.data("state") || "pending"), "#8a94a3");
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

// Edges drawn to and from collapsed groups (each member's edges, redirected, deduplicated).
function groupEdges() {
  var owner = {};
  graph.groups.forEach(function (group) {
    if (collapsed[group.id]) {
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
    var redirected = source !== edge.source || target !== edge.target;
    var id = "ge:" + source + ">" + target;
    if (redirected && source !== target && !seen[id]) {
      seen[id] = true;
      result.push({ group: "edges", data: { id: id, source: source, target: target }, classes: "group-edge" });
    }
  });
  return result;
}

function applyCollapse() {
  cy.batch(function () {
    cy.edges(".group-edge").remove();
    graph.groups.forEach(function (group) {
      var isCollapsed = !!collapsed[group.id];
      cy.getElementById(group.id).toggleClass("is-hidden", !isCollapsed);
      group.members.forEach(function (id) {
        cy.getElementById(id).toggleClass("is-hidden", isCollapsed);
      });
    });
    cy.add(groupEdges());
  });
  var anyGroups = graph.groups.length > 0;
  var anyCollapsed = graph.groups.some(function (g) {
    return collapsed[g.id];
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
  var nodes = cy.nodes().not(".is-hidden");
  return nodes.union(nodes.edgesWith(nodes));
}

function layout() {
  visibleElements().layout({
    name: "dagre",
    rankDir: "LR",
    nodeSep: 14,
    rankSep: 70,
    edgeSep: 8,
    fit: true,
    padding: FIT_PADDING,
    animate: false,
  }).run();
  if (cy.zoom() > MAX_FIT_ZOOM) {
    cy.zoom(MAX_FIT_ZOOM);
    cy.center();
  }
}

function redraw() {
  applyCollapse();
  refreshNodes();
  layout();
}

function elementsOf(data) {
  var elements = [];
  data.nodes.forEach(function (n) {
    elements.push({
      group: "nodes",
      data: { id: n.id, task: n.task, title: n.title, agent: n.agent, state: "pending", progress: 0, label: n.title },
      classes: "task",
    });
  });
  data.groups.forEach(function (g) {
    if (!(g.id in collapsed)) {
      collapsed[g.id] = !!g.collapsed;
    }
    elements.push({ group: "nodes", data: { id: g.id, group: g, label: g.label, state: "pending", progress: 0 }, classes: "group" });
  });
  data.edges.forEach(function (e) {
    elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target }, classes: "dep" });
  });
  return elements;
}

function buildGraph() {
  var container = document.getElementById("dag");
  if (!container || !window.cytoscape) {
    return;
  }
  var read = readGraph();
  graphText = read.text;
  graph = read.data;
  if (cy) {
    cy.destroy();
  }
  cy = window.cytoscape({
    container: container,
    elements: elementsOf(graph),
    style: stylesheet(),
    minZoom: 0.08,
    maxZoom: 3,
    boxSelectionEnabled: false,
    autoungrabify: true,
  });
  cy.on("tap", "node.task", function (event) {
    onOpenTask(event.target.data("task"));
  });
  cy.on("tap", "node.group", function (event) {
    collapsed[event.target.id()] = false;
    redraw();
  });
  redraw();
  markSelected();
}

function markSelected() {
  if (!cy) {
    return;
  }
  cy.nodes(".is-selected").removeClass("is-selected");
  if (selectedTask) {
    cy.getElementById("t" + selectedTask).addClass("is-selected");
  }
}

function setAllCollapsed(value) {
  graph.groups.forEach(function (g) {
    collapsed[g.id] = value;
  });
  redraw();
}

// --- What the page calls --------------------------------------------------------------------------

/** Draws the graph; `openTask(pk)` is called when a task's node is tapped. */
export function startGraph(openTask) {
  onOpenTask = openTask;
  buildGraph();
  window.addEventListener("resize", function () {
    if (cy) {
      cy.resize();
    }
  });
}

/** After a swap: rebuild when the plan's structure changed, else recolour from the rows. */
export function syncGraph() {
  var el = document.getElementById("dag-graph");
  if (el && el.dataset.graph !== graphText) {
    buildGraph();
  } else {
    refreshNodes();
  }
}

export function selectTask(taskId) {
  selectedTask = taskId;
  markSelected();
}

export function expandAll() {
  setAllCollapsed(false);
}

export function collapseAll() {
  setAllCollapsed(true);
}

/** The toolbar's buttons (data-dag): zoom-in, zoom-out, fit, expand, collapse. */
export function dagTool(name) {
  if (!cy) {
    return;
  }
  if (name === "zoom-in" || name === "zoom-out") {
    var box = cy.extent();
    cy.zoom({
      level: cy.zoom() * (name === "zoom-in" ? ZOOM_STEP : 1 / ZOOM_STEP),
      position: { x: (box.x1 + box.x2) / 2, y: (box.y1 + box.y2) / 2 },
    });
  } else if (name === "fit") {
    cy.fit(visibleElements(), FIT_PADDING);
  } else if (name === "expand") {
    expandAll();
  } else if (name === "collapse") {
    collapseAll();
  }
}

/** For tests and the console: the live Cytoscape instance and the graph read from the page. */
export function currentGraph() {
  return { cy: cy, graph: graph };
}
