/* The DAG: Cytoscape.js (the `cytoscape` global, with the dagre layout registered) drawing
 * #dag-graph's data-graph (dashboard/fragments.py compact_graph).
 *
 * The task rows (#task-<pk>: data-state, data-progress, data-tokens, data-wait, and the title,
 * key, agent, state label and token text in their cells) are the single source of node state:
 * refreshNodes recolours the nodes from them.
 *
 * Reading a large graph:
 * - grouping modes (readmodels/graph.py): fan-outs, an agent within a step, whole steps, or every
 *   task; a collapsed group is one node that counts its members by state, its fill their states
 *   side by side (each its share, in its tint); tapping it expands it;
 * - search: matching tasks (and the groups holding them) stand out, the rest is dimmed; Enter
 *   goes to the first match;
 * - focus: the selected task with everything upstream and downstream of it (Cytoscape's
 *   predecessors and successors) lit, the rest dimmed; a collapsed group holding it is expanded
 *   so that its own edges show; Esc or "Clear focus" ends it;
 * - labels by zoom: near, the title and its state; farther, the key alone in a larger font; too
 *   small to read, no label (min-zoomed-font-size) rather than a smudge;
 * - the minimap: a second, small Cytoscape instance with the whole graph and the viewport as a
 *   rectangle; click or drag on it to move there; shown while the view leaves part of the graph out;
 * - direction: left to right, or top to bottom when that draws a long thin graph larger (layout).
 */

var TITLE_CHARS = 30;
var ZOOM_STEP = 1.25;
var MAX_FIT_ZOOM = 1.25;
// A graph taller than the canvas's shape may grow the canvas up to this share of the window's height.
var MAX_CANVAS_SHARE = 0.8;
// The canvas is sized again once the window has kept its size this long (milliseconds).
var RESIZE_SETTLE_MS = 150;
var FIT_PADDING = 18;
var GO_TO_ZOOM = 1;
// Label levels by zoom: below MID_ZOOM the key alone, larger; below FAR_ZOOM larger still.
var MID_ZOOM = 0.65;
var FAR_ZOOM = 0.4;
// A graph laid out top to bottom instead of left to right must be drawn this much larger (layout).
var ROTATE_GAIN = 1.2;
// Labels smaller than this on screen are not drawn (px).
var MIN_LABEL_PX = 7;
// A task's key, farther out: its font at zoom-mid and at zoom-far (px).
var KEY_MID_FONT = 20;
var KEY_FAR_FONT = 30;
// The minimap shows when the graph has more visible nodes than this.
var MINIMAP_MIN_NODES = 12;
var MODES = ["fanout", "agent", "step", "none"];

// The aggregate state of a group: the most urgent state among its members.
var GROUP_PRIORITY = ["failed", "running", "throttled", "waiting", "retrying", "queued", "ready", "awaiting_review",
  "waiting_gate", "pending", "cancelled", "skipped", "succeeded"];
// A group's label names three states at most; the rest are counted as "N others" (groupLabel).
var OTHERS = "others";
// The order of the counts in a group's label.
var GROUP_LABEL_ORDER = ["running", "failed", "queued", "throttled", "waiting", "retrying", "ready", "waiting_gate",
  "awaiting_review", "succeeded", "pending", "skipped", "cancelled"];
// The order of the states in a group's fill (groupStrip).
var GROUP_STRIP_ORDER = ["succeeded", "failed", "skipped", "cancelled", "running", "awaiting_review", "queued",
  "throttled", "waiting", "retrying", "ready", "waiting_gate", "pending"];
// A group's box: as wide as GROUP_WIDTH, its label wrapped within GROUP_TEXT_WIDTH, and as tall as
// the longest label it can ever show needs at the largest of its fonts (GROUP_FONTS: near,
// zoom-mid, zoom-far) with GROUP_PAD above and below (groupHeight). The box's size is fixed when
// the graph is drawn: its counts change during a run without a new layout, and a box that grew
// with them would cover its neighbours. At zoom-far a group's name is as large as a task's key:
// Cytoscape leaves a label out by its font's size on screen (min-zoomed-font-size, the zoom
// rounded up to a power of two), and a smaller font went first (at "Fit", a fan-out's boxes had
// no name while the keys of the tasks beside them showed).
var LABEL_FONT = "DejaVu Sans, Arial, sans-serif";
var GROUP_WIDTH = 300;
var GROUP_TEXT_WIDTH = 268;
var GROUP_MIN_HEIGHT = 72;
var GROUP_PAD = 10;
var GROUP_BORDER = 3;
var GROUP_FONTS = [
  { size: 11, lineHeight: 1.35, text: "label" },
  { size: 18, lineHeight: 1.1, text: "label" },
  { size: KEY_FAR_FONT, lineHeight: 1.1, text: "name" },
];

var cy = null;
var mini = null;
var graph = null;
var graphText = null;
var mode = null;
var collapsed = {};
var selectedTask = null;
var focusedTask = null;
var query = "";
var onOpenTask = function () {};

// --- Reading the page ---------------------------------------------------------------------------

function taskRow(taskId) {
  return document.getElementById("task-" + taskId);
}

function cellText(row, selector) {
  var cell = row.querySelector(selector);
  return cell ? cell.textContent.trim() : "";
}

// The page's compact graph in Cytoscape's terms.
function readGraph() {
  var el = document.getElementById("dag-graph");
  var text = el ? el.dataset.graph || "" : "";
  var raw = text ? JSON.parse(text) : { nodes: [], edges: [], groups: [], mode: "fanout" };
  return {
    text: text,
    data: {
      mode: raw.mode || "fanout",
      nodes: raw.nodes.map(function (n) {
        var row = taskRow(n[0]);
        return {
          id: "t" + n[0],
          task: n[0],
          title: row ? cellText(row, ".task-link") : "task " + n[0],
          key: row ? cellText(row, ".cell-task code") : "",
          agent: row ? cellText(row, ".cell-agent") : "",
        };
      }),
      edges: raw.edges.map(function (e) {
        return { id: "e" + e[0] + "-" + e[1], source: "t" + e[0], target: "t" + e[1] };
      }),
      groups: raw.groups.map(function (g) {
        return {
          id: g.id,
          mode: g.mode || "fanout",
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
  var state = row.dataset.state || "pending";
  return {
    state: state,
    stateLabel: cellText(row, ".state-badge") || state,
    progress: row.dataset.progress !== undefined ? Number(row.dataset.progress) || 0 : state === "succeeded" ? 100 : 0,
    tokens: Number(row.dataset.tokens) || 0,
    tokensText: cellText(row, ".cell-tokens"),
    wait: row.dataset.wait || "",
    activity: row.dataset.activity || "",
  };
}

// A state's name as the legend shows it (the legend is rendered from the engine's labels).
function stateName(s) {
  var item = document.querySelector(".legend li[data-state='" + s + "']");
  return item ? item.textContent.trim() : s;
}

var colourCache = {};
// A CSS custom property of the page (base.css: --state-<name>, --tint-<name>).
function cssColour(property, fallback) {
  if (!(property in colourCache)) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(property).trim();
    colourCache[property] = value || fallback;
  }
  return colourCache[property];
}

function modeGroups() {
  return graph.groups.filter(function (g) {
    return g.mode === mode;
  });
}

// --- Labels and states ----------------------------------------------------------------------------

function shorten(text, max) {
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

// A running agent's node says what it is doing now ("step 3 · calling lookup"); others their agent and state.
function nodeLabel(title, agent, d) {
  if (d.activity) {
    // "step 3 · waiting for approval of search": without its step number when that makes it fit.
    var doing = d.activity.length > TITLE_CHARS ? d.activity.replace(/^step \d+ · /, "") : d.activity;
    return shorten(title, TITLE_CHARS) + "\n" + shorten(doing, TITLE_CHARS);
  }
  var second = agent + " · " + d.stateLabel;
  if (d.tokens) {
    second += " · " + d.tokensText + " tok";
  }
  return shorten(title, TITLE_CHARS) + "\n" + second;
}

// "N state" for each state among a group's members, in GROUP_LABEL_ORDER.
function countParts(counts) {
  var parts = [];
  GROUP_LABEL_ORDER.forEach(function (s) {
    if (counts[s]) {
      parts.push(counts[s] + " " + stateName(s));
    }
  });
  return parts;
}

// A group's label: its name, and its counts by state. Three at most: past three, the first two and
// "N others" for the rest, so that the counts shown always add up to the group's size.
function groupLabel(group, counts) {
  var parts = countParts(counts);
  if (parts.length > 3) {
    var shown = parts.slice(0, 2);
    var rest = group.members.length - shown.reduce(function (sum, part) {
      return sum + parseInt(part, 10);
    }, 0);
    parts = shown.concat([rest + " " + OTHERS]);
  }
  return group.label + "\n" + parts.join(" · ");
}

// How many lines `text` takes wrapped within `width` at `font`, wrapped as cytoscape wraps a label:
// at its line breaks, then between words.
var measure = null;
function wrappedLines(text, font, width) {
  measure = measure || document.createElement("canvas").getContext("2d");
  measure.font = font;
  var lines = 0;
  text.split("\n").forEach(function (line) {
    var current = "";
    lines += 1;
    line.split(/\s+/).forEach(function (word) {
      var next = current ? current + " " + word : word;
      if (current && measure.measureText(next).width > width) {
        lines += 1;
        current = word;
      } else {
        current = next;
      }
    });
  });
  return lines;
}

// Every count line a group of `size` tasks can show: one to three "N state" parts in
// GROUP_LABEL_ORDER, or two and "N others", each N as wide as `size` in digits (the font's digits
// share one width).
function possibleCountLines(size) {
  var n = String(size).replace(/./g, "8");
  var parts = GROUP_LABEL_ORDER.map(function (s) {
    return n + " " + stateName(s);
  });
  var lines = [];
  parts.forEach(function (a, i) {
    lines.push(a);
    parts.slice(i + 1).forEach(function (b, j) {
      lines.push(a + " · " + b);
      lines.push(a + " · " + b + " · " + n + " " + OTHERS);
      parts.slice(i + j + 2).forEach(function (c) {
        lines.push(a + " · " + b + " · " + c);
      });
    });
  });
  return lines;
}

// The most lines a count line of a group of `size` takes at `font` (per font and digit count).
var countLinesCache = {};
function mostCountLines(size, font) {
  var key = font + "/" + String(size).length;
  if (!(key in countLinesCache)) {
    countLinesCache[key] = Math.max.apply(
      null,
      possibleCountLines(size).map(function (line) {
        return wrappedLines(line, font, GROUP_TEXT_WIDTH);
      })
    );
  }
  return countLinesCache[key];
}

// The height of a group's box: its name and the longest count line it may show, at every font.
function groupHeight(name, size) {
  var tallest = 0;
  GROUP_FONTS.forEach(function (f) {
    var font = "bold " + f.size + "px " + LABEL_FONT;
    var lines = wrappedLines(name, font, GROUP_TEXT_WIDTH) + (f.text === "name" ? 0 : mostCountLines(size, font));
    tallest = Math.max(tallest, lines * f.size * f.lineHeight);
  });
  return Math.max(GROUP_MIN_HEIGHT, Math.ceil(tallest + 2 * (GROUP_PAD + GROUP_BORDER)));
}

// A group's fill: its members' states side by side, each as wide as its share, in its tint
// (finished first, then what is under way, then what waits), as the run's state strip draws them.
// One colour for the whole group would say "failed" over 19 succeeded tasks and 1 failed one.
function groupStrip(counts, size) {
  var colours = [];
  var positions = [];
  var start = 0;
  GROUP_STRIP_ORDER.forEach(function (s) {
    if (counts[s]) {
      var end = start + (100 * counts[s]) / size;
      var tint = cssColour("--tint-" + s, "#eef0f3");
      colours.push(tint, tint);
      positions.push(start.toFixed(2) + "%", end.toFixed(2) + "%");
      start = end;
    }
  });
  return { colours: colours.join(" "), positions: positions.join(" ") };
}

function refreshGroup(groupNode) {
  var group = groupNode.data("group");
  var counts = {};
  group.members.forEach(function (id) {
    var s = cy.getElementById(id).data("state") || "pending";
    counts[s] = (counts[s] || 0) + 1;
  });
  var aggregate = GROUP_PRIORITY.find(function (s) {
    return counts[s];
  }) || "pending";
  var strip = groupStrip(counts, group.members.length);
  groupNode.data({
    state: aggregate,
    stripColours: strip.colours,
    stripPositions: strip.positions,
    label: groupLabel(group, counts),
    counts: countParts(counts).join(" · "),
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
  recolourMinimap();
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
        "font-family": LABEL_FONT,
        color: "#1b2430",
        "line-height": 1.35,
        "min-zoomed-font-size": MIN_LABEL_PX,
      },
    },
    { selector: "node[state = 'skipped'], node[state = 'cancelled']", style: { "border-style": "dashed", color: "#4a5565" } },
    { selector: "node[state = 'waiting']", style: { "border-style": "double", "border-width": 4 } },
    { selector: "node[state = 'retrying']", style: { "border-style": "dotted", "border-width": 3 } },
    { selector: "node[state = 'throttled']", style: { "border-style": "dashed", "border-width": 3 } },
    { selector: "node[state = 'running']", style: { "border-width": 3 } },
    {
      selector: "node.group",
      style: {
        width: GROUP_WIDTH,
        height: "data(height)",
        "background-gradient-stop-colors": "data(stripColours)",
        "background-gradient-stop-positions": "data(stripPositions)",
        "text-max-width": GROUP_TEXT_WIDTH,
        "border-style": "solid",
        "border-width": GROUP_BORDER,
        "font-weight": "bold",
      },
    },
    // Farther out: the key alone (a group: its name), larger, so that what is shown can be read.
    { selector: "node.task.zoom-mid", style: { label: "data(key)", "font-size": KEY_MID_FONT, "text-wrap": "ellipsis" } },
    { selector: "node.task.zoom-far", style: { label: "data(key)", "font-size": KEY_FAR_FONT, "text-wrap": "ellipsis" } },
    { selector: "node.group.zoom-mid", style: { "font-size": GROUP_FONTS[1].size, "line-height": GROUP_FONTS[1].lineHeight } },
    {
      selector: "node.group.zoom-far",
      style: { label: "data(name)", "font-size": GROUP_FONTS[2].size, "line-height": GROUP_FONTS[2].lineHeight },
    },
    {
      selector: "node.is-selected",
      style: { "underlay-color": "#2563a8", "underlay-padding": 6, "underlay-opacity": 0.22, "underlay-shape": "round-rectangle" },
    },
    { selector: "node.is-match", style: { "underlay-color": "#f5b400", "underlay-padding": 8, "underlay-opacity": 0.55, "underlay-shape": "round-rectangle" } },
    { selector: ".is-dim", style: { opacity: 0.18 } },
    { selector: "edge.is-lit", style: { width: 2.5, "line-color": "#2563a8", "target-arrow-color": "#2563a8" } },
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
    { selector: "edge.is-downward", style: { "taxi-direction": "downward" } },
  ];
}

// Edges drawn to and from collapsed groups (each member's edges, redirected, deduplicated).
function groupEdges() {
  var owner = {};
  modeGroups().forEach(function (group) {
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
    cy.nodes(".group").addClass("is-hidden");
    cy.nodes(".task").removeClass("is-hidden");
    modeGroups().forEach(function (group) {
      if (collapsed[group.id]) {
        cy.getElementById(group.id).removeClass("is-hidden");
        group.members.forEach(function (id) {
          cy.getElementById(id).addClass("is-hidden");
        });
      }
    });
    cy.add(groupEdges());
  });
  var groups = modeGroups();
  var anyCollapsed = groups.some(function (g) {
    return collapsed[g.id];
  });
  var expand = document.querySelector("[data-dag='expand']");
  var collapse = document.querySelector("[data-dag='collapse']");
  if (expand) {
    expand.hidden = !groups.length || !anyCollapsed;
  }
  if (collapse) {
    collapse.hidden = !groups.length || anyCollapsed;
  }
}

function visibleElements() {
  var nodes = cy.nodes().not(".is-hidden");
  return nodes.union(nodes.edgesWith(nodes));
}

function runDagre(elements, rankDir) {
  elements.layout({
    name: "dagre",
    rankDir: rankDir,
    nodeSep: 14,
    rankSep: 70,
    edgeSep: 8,
    fit: true,
    padding: FIT_PADDING,
    animate: false,
  }).run();
  return Math.min(cy.zoom(), MAX_FIT_ZOOM);
}

// A graph taller than the canvas's shape (left to right: a large run's wide steps; top to bottom: a
// long chain) fits by its height and leaves most of the canvas's width empty (a 300-task graph
// used 270 of 734 px). The canvas then grows, up to MAX_CANVAS_SHARE of the window's height, as
// far as the graph needs to fill its width at no more than MAX_FIT_ZOOM. Sizes the canvas for the
// laid-out `visible` elements (from its stylesheet's height up); whether it grew.
function sizeCanvas(visible) {
  var container = cy.container();
  container.style.height = "";
  cy.resize();
  var base = container.clientHeight;
  var box = visible.boundingBox();
  if (!box.w || !box.h) {
    return false;
  }
  var zoom = Math.min(MAX_FIT_ZOOM, (cy.width() - 2 * FIT_PADDING) / box.w);
  var wanted = Math.ceil(box.h * zoom + 2 * FIT_PADDING);
  var height = Math.max(base, Math.min(wanted, Math.round(window.innerHeight * MAX_CANVAS_SHARE)));
  if (height <= base) {
    return false;
  }
  container.style.height = height + "px";
  cy.resize();
  return true;
}

// The whole graph in view, drawn no larger than MAX_FIT_ZOOM.
function fitWhole(visible) {
  cy.fit(visible, FIT_PADDING);
  if (cy.zoom() > MAX_FIT_ZOOM) {
    cy.zoom(MAX_FIT_ZOOM);
    cy.center(visible);
  }
}

// Whether the model-coordinates box `inner` lies inside `outer` (a pixel of rounding either way).
function boxInside(inner, outer) {
  return inner.x1 >= outer.x1 - 1 && inner.x2 <= outer.x2 + 1 && inner.y1 >= outer.y1 - 1 && inner.y2 <= outer.y2 + 1;
}

// After the window is resized: the canvas sized again for the new window (it was sized at first
// paint only: a window made shorter kept a canvas taller than itself). A graph shown whole is
// fitted again; a view the reader zoomed or moved keeps its zoom and its centre.
function fitToWindow() {
  if (!cy) {
    return;
  }
  var visible = visibleElements();
  var view = cy.extent();
  var whole = boxInside(visible.nodes().boundingBox({ includeLabels: false }), view);
  sizeCanvas(visible);
  if (whole) {
    fitWhole(visible);
  } else {
    centerOn({ x: (view.x1 + view.x2) / 2, y: (view.y1 + view.y2) / 2 });
  }
  syncMinimap();
}

// Runs `fn` once the calls have stopped for `ms` (a window being dragged fires resize many times).
function debounced(fn, ms) {
  var timer = null;
  return function () {
    window.clearTimeout(timer);
    timer = window.setTimeout(fn, ms);
  };
}

// dagre lays the graph out left to right, as a plan reads. A graph that is long and thin that way
// (a chain of steps with a node or two each: the grouped views of a large run) then fits the canvas
// by its width alone: a strip too small to read across an empty canvas. When that strip leaves
// half the canvas empty at a scale that shortens the labels, dagre lays it out top to bottom
// instead, if that draws it at least ROTATE_GAIN times larger.
function layout() {
  // A node just shown (a group expanded, another mode) keeps the size of display: none (1 × 1)
  // until its style is read: without this, dagre lays such nodes out as points, on top of each
  // other. Reading a style property brings the node's style up to date.
  var visible = visibleElements();
  visible.nodes().forEach(function (node) {
    node.pstyle("display");
  });
  cy.container().style.height = "";
  cy.resize();
  var across = runDagre(visible, "LR");
  var down = false;
  if (across < MID_ZOOM && visible.renderedBoundingBox().h < cy.height() / 2) {
    down = runDagre(visible, "TB") >= across * ROTATE_GAIN;
    if (!down) {
      runDagre(visible, "LR");
    }
  }
  cy.edges().toggleClass("is-downward", down);
  if (sizeCanvas(visible) || cy.zoom() > MAX_FIT_ZOOM) {
    fitWhole(visible);
  }
}

function redraw() {
  applyCollapse();
  refreshNodes();
  layout();
  zoomLabels();
  syncMinimap();
  applyHighlight();
}

function elementsOf(data) {
  var elements = [];
  data.nodes.forEach(function (n) {
    elements.push({
      group: "nodes",
      data: { id: n.id, task: n.task, title: n.title, key: n.key || n.title, agent: n.agent, state: "pending", progress: 0, label: n.title },
      classes: "task",
    });
  });
  data.groups.forEach(function (g) {
    elements.push({
      group: "nodes",
      data: { id: g.id, group: g, name: g.label, label: g.label, height: groupHeight(g.label, g.members.length), state: "pending",
        stripColours: "#ffffff #ffffff", stripPositions: "0% 100%" },
      classes: "group",
    });
  });
  data.edges.forEach(function (e) {
    elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target }, classes: "dep" });
  });
  return elements;
}

// Each group starts as the server says for its mode (fan-outs: the wide ones; other modes: all).
function resetCollapsed() {
  collapsed = {};
  graph.groups.forEach(function (g) {
    collapsed[g.id] = g.mode === "fanout" ? !!g.collapsed : true;
  });
}

function setModeControl() {
  var select = document.getElementById("dag-mode");
  if (select) {
    select.value = mode;
  }
}

function buildGraph() {
  var container = document.getElementById("dag");
  if (!container || !window.cytoscape) {
    return;
  }
  var read = readGraph();
  graphText = read.text;
  graph = read.data;
  if (mode === null || MODES.indexOf(mode) < 0) {
    mode = graph.mode;
  }
  resetCollapsed();
  setModeControl();
  if (cy) {
    cy.destroy();
  }
  zoomLevel = ""; // the new graph's nodes carry no zoom class yet: its first fit gives them theirs
  cy = window.cytoscape({
    container: container,
    elements: elementsOf(graph),
    style: stylesheet(),
    minZoom: 0.05,
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
  cy.on("tap", function (event) {
    if (event.target === cy) {
      clearFocus();
    }
  });
  cy.on("mouseover", "node", function (event) {
    describeHover(event.target);
  });
  cy.on("mouseout", "node", function () {
    describeHover(null);
  });
  cy.on("zoom", zoomLabels);
  cy.on("viewport", showMinimap);
  buildMinimap();
  redraw();
  markSelected();
}

// --- Labels by zoom -------------------------------------------------------------------------------

var zoomLevel = "";
function zoomLabels() {
  if (!cy) {
    return;
  }
  var z = cy.zoom();
  var level = z >= MID_ZOOM ? "" : z >= FAR_ZOOM ? "zoom-mid" : "zoom-far";
  if (level === zoomLevel) {
    return;
  }
  zoomLevel = level;
  cy.batch(function () {
    cy.nodes().removeClass("zoom-mid zoom-far");
    if (level) {
      cy.nodes().addClass(level);
    }
  });
  // The new label styles applied now, before anything measures the nodes. This runs within a
  // fit or a layout (on their zoom event), which then read the nodes' bounding boxes: Cytoscape
  // measured the labels of a node whose class had just changed with the previous level's label
  // sizes (the key at 20 px for a title at 11), kept those bounds, and drew the new label into
  // them: clipped, and from textures of both sizes ("e the big Fr" on the first task, grouped by
  // step). Reading a style property applies the node's style and invalidates its cached bounds.
  cy.nodes().forEach(function (node) {
    node.pstyle("label");
  });
}

// --- What the pointer is over ---------------------------------------------------------------------

function describeHover(node) {
  var out = document.getElementById("dag-hover");
  if (!out) {
    return;
  }
  if (!node) {
    out.textContent = "";
    return;
  }
  if (node.hasClass("group")) {
    out.textContent = node.data("name") + ": " + node.data("counts") + " — click to expand";
    return;
  }
  var d = rowData(node.data("task")) || { stateLabel: node.data("state"), wait: "" };
  out.textContent = node.data("title") + " (" + node.data("key") + ") · " + node.data("agent") + " · " + d.stateLabel +
    (d.activity ? " — " + d.activity : d.wait ? " — " + d.wait : "");
}

// --- Minimap --------------------------------------------------------------------------------------

function miniStyle() {
  return [
    {
      selector: "node",
      style: {
        shape: "round-rectangle",
        width: 200,
        height: 50,
        "background-color": function (ele) {
          return cssColour("--state-" + (ele.data("state") || "pending"), "#8a94a3");
        },
        "border-width": 0,
        label: "",
      },
    },
    { selector: "edge", style: { width: 4, "line-color": "#c7cdd5", "curve-style": "straight" } },
  ];
}

function buildMinimap() {
  var box = document.getElementById("dag-minimap");
  if (!box || !window.cytoscape) {
    return;
  }
  if (mini) {
    mini.destroy();
  }
  mini = window.cytoscape({
    container: box.querySelector(".dag-minimap-canvas"),
    style: miniStyle(),
    userZoomingEnabled: false,
    userPanningEnabled: false,
    boxSelectionEnabled: false,
    autoungrabify: true,
    autounselectify: true,
    minZoom: 0.001,
  });
  if (!box.dataset.wired) {
    box.dataset.wired = "1";
    var dragging = false;
    box.addEventListener("pointerdown", function (event) {
      dragging = true;
      box.setPointerCapture(event.pointerId);
      moveToMinimapPoint(event);
    });
    box.addEventListener("pointermove", function (event) {
      if (dragging) {
        moveToMinimapPoint(event);
      }
    });
    box.addEventListener("pointerup", function () {
      dragging = false;
    });
  }
}

// The minimap's copy of the graph: the visible nodes at their positions, and the edges.
var graphBox = null;
function syncMinimap() {
  var box = document.getElementById("dag-minimap");
  if (!mini || !box) {
    return;
  }
  var visible = visibleElements();
  graphBox = visible.nodes().length > MINIMAP_MIN_NODES ? visible.nodes().boundingBox({ includeLabels: false }) : null;
  mini.batch(function () {
    mini.elements().remove();
    if (graphBox) {
      mini.add(
        visible.map(function (el) {
          if (el.isNode()) {
            return { group: "nodes", data: { id: el.id(), state: el.data("state") }, position: { x: el.position("x"), y: el.position("y") } };
          }
          return { group: "edges", data: { id: el.id(), source: el.data("source"), target: el.data("target") } };
        })
      );
    }
  });
  box.hidden = true;
  showMinimap();
}

// The minimap shows while the view leaves part of a large graph out: over a graph shown whole it
// would only hide the nodes under it.
function showMinimap() {
  var box = document.getElementById("dag-minimap");
  if (!mini || !cy || !box) {
    return;
  }
  var whole = !graphBox || boxInside(graphBox, cy.extent());
  if (whole !== box.hidden) {
    box.hidden = whole;
    if (!whole) {
      mini.resize();
      mini.fit(undefined, 6);
    }
  }
  drawMinimapView();
}

function recolourMinimap() {
  if (!mini || !cy) {
    return;
  }
  mini.batch(function () {
    mini.nodes().forEach(function (node) {
      var state = cy.getElementById(node.id()).data("state");
      if (node.data("state") !== state) {
        node.data("state", state);
      }
    });
  });
}

// The rectangle of the minimap that the main view shows.
function drawMinimapView() {
  var box = document.getElementById("dag-minimap");
  var view = box ? box.querySelector(".dag-minimap-view") : null;
  if (!mini || !cy || !view || box.hidden) {
    return;
  }
  var ext = cy.extent();
  var z = mini.zoom();
  var p = mini.pan();
  var width = box.clientWidth;
  var height = box.clientHeight;
  var left = Math.max(0, ext.x1 * z + p.x);
  var top = Math.max(0, ext.y1 * z + p.y);
  var right = Math.min(width, ext.x2 * z + p.x);
  var bottom = Math.min(height, ext.y2 * z + p.y);
  view.style.left = left + "px";
  view.style.top = top + "px";
  view.style.width = Math.max(4, right - left) + "px";
  view.style.height = Math.max(4, bottom - top) + "px";
}

function moveToMinimapPoint(event) {
  var box = document.getElementById("dag-minimap");
  var rect = box.getBoundingClientRect();
  var z = mini.zoom();
  var p = mini.pan();
  var x = (event.clientX - rect.left - p.x) / z;
  var y = (event.clientY - rect.top - p.y) / z;
  centerOn({ x: x, y: y });
}

function centerOn(point) {
  cy.pan({ x: cy.width() / 2 - point.x * cy.zoom(), y: cy.height() / 2 - point.y * cy.zoom() });
}

// --- Search and focus -----------------------------------------------------------------------------

// The group of the current mode that holds this task, when it is collapsed (else null).
function collapsedGroupOf(nodeId) {
  return modeGroups().find(function (g) {
    return collapsed[g.id] && g.members.indexOf(nodeId) >= 0;
  }) || null;
}

// The task's node, shown with its direct neighbours: the collapsed groups that hold it or a task
// it feeds or is fed by are expanded, so that its own edges show which task feeds which.
function reveal(taskId) {
  var id = "t" + taskId;
  var around = [id];
  graph.edges.forEach(function (edge) {
    if (edge.source === id) {
      around.push(edge.target);
    } else if (edge.target === id) {
      around.push(edge.source);
    }
  });
  var changed = false;
  around.forEach(function (nodeId) {
    var group = collapsedGroupOf(nodeId);
    if (group) {
      collapsed[group.id] = false;
      changed = true;
    }
  });
  if (changed) {
    redraw();
  }
  return cy.getElementById(id);
}

function matchingTasks() {
  var q = query.toLowerCase();
  return cy.nodes(".task").filter(function (node) {
    return (node.data("title") + " " + node.data("key")).toLowerCase().indexOf(q) >= 0;
  });
}

function applyHighlight() {
  if (!cy) {
    return;
  }
  var status = document.getElementById("dag-search-status");
  cy.batch(function () {
    cy.elements().removeClass("is-dim is-match is-lit");
    if (query) {
      var matches = matchingTasks();
      var shown = matches.not(".is-hidden");
      matches.forEach(function (node) {
        var group = collapsedGroupOf(node.id());
        if (group) {
          shown = shown.union(cy.getElementById(group.id));
        }
      });
      cy.elements().not(shown).addClass("is-dim");
      shown.addClass("is-match");
      if (status) {
        status.textContent = matches.length === 1 ? "1 task matches" : matches.length + " tasks match";
      }
      return;
    }
    if (status) {
      status.textContent = "";
    }
    if (focusedTask) {
      var id = "t" + focusedTask;
      var group = collapsedGroupOf(id);
      var node = group ? cy.getElementById(group.id) : cy.getElementById(id);
      if (node.empty()) {
        return;
      }
      var lit = node.union(node.predecessors()).union(node.successors());
      cy.elements().not(lit).addClass("is-dim");
      lit.edges().addClass("is-lit");
    }
  });
  var clear = document.querySelector("[data-dag='clear-focus']");
  if (clear) {
    clear.hidden = !focusedTask;
  }
}

function clearFocus() {
  if (focusedTask) {
    focusedTask = null;
    applyHighlight();
  }
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
  modeGroups().forEach(function (g) {
    collapsed[g.id] = value;
  });
  redraw();
}

// --- What the page calls --------------------------------------------------------------------------

/** Draws the graph; `openTask(pk)` is called when a task's node is tapped. */
export function startGraph(openTask) {
  onOpenTask = openTask;
  buildGraph();
  window.addEventListener("resize", debounced(fitToWindow, RESIZE_SETTLE_MS));
  var search = document.getElementById("dag-search");
  if (search) {
    search.addEventListener("input", function () {
      searchTasks(search.value);
    });
    search.addEventListener("keydown", function (event) {
      if (event.key === "Enter") {
        event.preventDefault();
        goToFirstMatch();
      } else if (event.key === "Escape") {
        search.value = "";
        searchTasks("");
      }
    });
  }
  var select = document.getElementById("dag-mode");
  if (select) {
    select.addEventListener("change", function () {
      setMode(select.value);
    });
  }
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && event.target === document.body) {
      clearFocus();
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

/** The task shown in the panel: marked, and focused (its upstream and downstream lit). */
export function selectTask(taskId) {
  selectedTask = taskId;
  if (cy && taskId) {
    reveal(taskId);
  }
  focusedTask = taskId;
  markSelected();
  applyHighlight();
}

/** Grouping mode: "fanout", "agent", "step" or "none". */
export function setMode(name) {
  if (MODES.indexOf(name) < 0 || !graph) {
    return;
  }
  mode = name;
  resetCollapsed();
  setModeControl();
  redraw();
  cy.fit(visibleElements(), FIT_PADDING);
}

/** Highlight the tasks whose title or key contains `text` (and the groups holding them). */
export function searchTasks(text) {
  query = (text || "").trim();
  applyHighlight();
}

/** Go to the first match of the search: its group expanded, centred at a readable zoom, opened. */
export function goToFirstMatch() {
  if (!cy || !query) {
    return;
  }
  var first = matchingTasks().first();
  if (first.empty()) {
    return;
  }
  var taskId = first.data("task");
  var node = reveal(taskId);
  cy.zoom(Math.max(cy.zoom(), GO_TO_ZOOM));
  centerOn(node.position());
  onOpenTask(taskId);
}

export function expandAll() {
  setAllCollapsed(false);
}

export function collapseAll() {
  setAllCollapsed(true);
}

/** The toolbar's buttons (data-dag): zoom-in, zoom-out, fit, expand, collapse, clear-focus. */
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
  } else if (name === "clear-focus") {
    clearFocus();
  }
}

/** For tests and the console: the live Cytoscape instances, the graph read from the page, the mode. */
export function currentGraph() {
  return { cy: cy, mini: mini, graph: graph, mode: mode, focused: focusedTask };
}
