"""The run page's graph (static/dashboard/run/graph.js) as a run changes it, in Chromium.

Screenshots in test-artifacts/<test>/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from bench import dags
from orchestrator import plans
from orchestrator.engine import plan_edits, runs
from orchestrator.models import Checkpoint, Plan
from tests.browser.test_large_run import graph_shot, open_large_run
from tests.browser.test_run_layout import crowded_group_labels
from tests.browser.test_run_page import open_run, poll
from tests.large_run import finished_large_run

pytestmark = [pytest.mark.browser]

GROUP_BOXES = """() => window.glassboxRun.cy.nodes('.group:visible').map(n => {
    const b = n.boundingBox({includeLabels: false});
    return {name: n.data('name'), label: n.data('label'), x1: b.x1, x2: b.x2, y1: b.y1, y2: b.y2};
})"""


def tint(page, state: str) -> str:
    """The tint of a state (base.css --tint-<state>, which the task rows use) as Cytoscape writes it."""
    hex_colour = page.evaluate(
        "s => getComputedStyle(document.documentElement).getPropertyValue('--tint-' + s).trim()", state
    )
    red, green, blue = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red},{green},{blue})"


def sizes_of(boxes: list[dict]) -> dict[str, tuple[int, int]]:
    return {b["name"]: (round(b["x2"] - b["x1"]), round(b["y2"] - b["y1"])) for b in boxes}


def overlapping(boxes: list[dict]) -> list[str]:
    """Pairs of group boxes that cover each other (by more than a pixel)."""
    return [
        f"{a['name']} / {b['name']}"
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["x1"] < b["x2"] - 1 and b["x1"] < a["x2"] - 1 and a["y1"] < b["y2"] - 1 and b["y1"] < a["y2"] - 1
    ]


def test_group_boxes_keep_their_size_and_never_overlap_as_their_counts_change(
    logged_in_page, browser_user, demo_agents, priced_limit, make_plan, screenshot
):
    """Grouped by agent, three groups of six gated tasks stand one above the other. Their labels
    grew a line when the counts changed ("6 needs approval" became "2 queued · 2 needs approval ·
    2 skipped"), and each box grew with its label without a new layout, over its neighbours. Now
    a box is as tall as its longest possible label from the start: the counts change, the boxes,
    the layout and the person's view do not. A box's fill was the most urgent state's tint over the
    share of finished members ("queued" over the two skipped tasks); now it shows each state's share.
    A fourth state in a group was left out of its label ("2 queued · 1 held back · 1 needs approval"
    for six tasks); now the label counts the rest as others and adds up to the group."""
    page = logged_in_page
    agents = ("researcher", "writer", "tester")
    plan = make_plan(
        {f"{agent}_{n}": (agent, [], {"gate": "before"}) for agent in agents for n in range(6)},
        goal="Counts that change under a person's eyes",
    )
    run = runs.launch(plan, cap=8, budget_usd="1")  # no cluster: the changes come from this test
    open_run(page, run)
    page.locator("#dag-mode").select_option("agent")
    poll(page, "() => window.glassboxRun.cy.nodes('.group:visible').length === 3", what="three groups")
    before = page.evaluate(GROUP_BOXES)
    assert {b["label"] for b in before} == {f"6 × {agent} · step 1\n6 needs approval" for agent in agents}
    # The person zoomed in: the live changes must not move the view for them.
    page.get_by_role("button", name="Zoom in").click()
    view = page.evaluate("() => ({zoom: window.glassboxRun.cy.zoom(), pan: window.glassboxRun.cy.pan()})")

    for agent in agents:
        tasks = list(run.tasks.filter(subtask__key__startswith=agent).order_by("subtask__position"))
        for task in tasks[:2]:
            gate = Checkpoint.objects.get(task_run=task, status=Checkpoint.Status.PENDING)
            runs.decide(gate, approve=True, user=browser_user)
        for task in tasks[2:4]:
            runs.skip_task(task, user=browser_user)
    poll(
        page,
        "() => window.glassboxRun.cy.nodes('.group:visible').every(n => n.data('label').endsWith("
        "'2 queued · 2 needs approval · 2 skipped'))",
        what="the groups' new counts",
    )
    after = page.evaluate(GROUP_BOXES)
    screenshot(page, "counts-changed")
    assert sizes_of(after) == sizes_of(before)
    assert overlapping(after) == []
    # The view stays where the person put it and every label stays inside its box, at each zoom.
    assert page.evaluate("() => ({zoom: window.glassboxRun.cy.zoom(), pan: window.glassboxRun.cy.pan()})") == view
    assert crowded_group_labels(page) == []
    # Each box is filled with its members' states side by side, in the tints the task rows use:
    # two skipped, two queued, two waiting for approval (a third each), not one colour for all.
    tints = [tint(page, state) for state in ("skipped", "queued", "waiting_gate") for _ in range(2)]
    fills = page.evaluate(
        "() => window.glassboxRun.cy.nodes('.group:visible').map(n => [n.style('background-gradient-stop-colors'),"
        " n.style('background-gradient-stop-positions')])"
    )
    assert fills == [[" ".join(tints), "0% 33.33% 33.33% 66.67% 66.67% 100%"]] * 3
    # Past three states, a label names two and counts the rest: its counts add up to the group.
    runs.pause(run)
    researchers = run.tasks.filter(subtask__key__startswith="researcher").order_by("subtask__position")
    runs.decide(Checkpoint.objects.get(task_run=researchers[4], status="pending"), approve=True, user=browser_user)
    poll(
        page,
        "() => window.glassboxRun.cy.nodes('.group:visible').some(n => n.data('label').endsWith('3 others'))",
        what="a label with four states",
    )
    labels = page.evaluate("() => window.glassboxRun.cy.nodes('.group:visible').map(n => n.data('label'))")
    assert "6 × researcher · step 1\n2 queued · 1 held back · 3 others" in labels
    assert sizes_of(page.evaluate(GROUP_BOXES)) == sizes_of(before)
    for level in ("zoom-mid", "zoom-far"):
        # (Its style read at once: Cytoscape measured a label whose class had just changed at the
        # previous level's sizes, and this looked at the label of another level.)
        page.evaluate(
            "level => { window.glassboxRun.cy.nodes().addClass(level).forEach(n => n.pstyle('label')); }", level
        )
        assert crowded_group_labels(page) == [], level
        page.evaluate("level => { window.glassboxRun.cy.nodes().removeClass(level); }", level)


DRAWN = """() => {
    const cy = window.glassboxRun.cy, box = cy.elements(':visible').renderedBoundingBox();
    return {mode: window.glassboxRun.mode, width: box.w, height: box.h, canvasWidth: cy.width(),
            canvasHeight: cy.height(), windowHeight: window.innerHeight, zoom: cy.zoom(),
            grown: document.getElementById('dag').style.height !== ''};
}"""
PADDING = 18  # graph.js FIT_PADDING
MAX_CANVAS_SHARE = 0.8  # graph.js: the canvas grows up to this share of the window's height


def fills_the_canvas(drawn: dict) -> bool:
    """The graph spans the canvas's width, or its height with the canvas as tall as it may grow."""
    across = drawn["width"] >= 0.9 * (drawn["canvasWidth"] - 2 * PADDING)
    tallest = drawn["canvasHeight"] >= MAX_CANVAS_SHARE * drawn["windowHeight"] - 4
    return across or (tallest and drawn["height"] >= 0.9 * (drawn["canvasHeight"] - 2 * PADDING))


def random_plan_document(nodes: int = 300) -> dict:
    """bench/dags.py's random DAG as a plan, its tasks dealt to the demo team in turn."""
    shape = dags.random_dag(nodes)
    team = ("researcher", "architect", "coder", "tester", "reviewer", "writer")
    ups = shape.upstreams
    return {
        "goal": f"A random graph of {nodes} tasks",
        "subtasks": [
            {"key": key, "agent": team[i % len(team)], "title": f"Task {key}", "depends_on": ups[key]}
            for i, key in enumerate(shape.keys)
        ],
    }


def test_a_300_task_graph_fills_its_panel_and_a_small_one_is_not_blown_up(
    logged_in_page, demo_agents, priced_limit, make_plan, request
):
    """A random 300-task graph, grouped, fitted by its height into a 470 px canvas: it used 270
    of the canvas's 734 px (grouped by fan-out; 548 by agent). Now the canvas grows with a tall
    graph, up to 80% of the window's height, so that the graph fills its width or that height, at
    1280 and 390 px. A graph of two tasks is drawn no larger than 1.25 and leaves the canvas as it is.
    The minimap covered the bottom right of a graph shown whole; now it shows once the view leaves
    part of the graph out."""
    page = logged_in_page
    spec = plans.validate(random_plan_document())
    large = runs.launch(plans.save_plan(spec, source=Plan.Source.MANUAL), budget_usd="100")
    for width, height in ((1280, 860), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"/runs/{large.pk}/")
        poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length > 0", what="the graph")
        drawn = page.evaluate(DRAWN)
        graph_shot(page, request, f"first-paint-{width}")
        assert drawn["mode"] == "agent" and fills_the_canvas(drawn), (width, drawn)
        # Shown whole, the graph has no minimap over it (it hid the nodes beneath); zoomed in, it has.
        minimap = page.locator("#dag-minimap")
        expect(minimap).to_be_hidden()
        page.get_by_role("button", name="Zoom in").click()
        expect(minimap).to_be_visible()
        # Grouped by fan-out, the tallest of its grouped views.
        page.locator("#dag-mode").select_option("fanout")
        drawn = page.evaluate(DRAWN)
        graph_shot(page, request, f"fanouts-{width}")
        assert fills_the_canvas(drawn), (width, drawn)

    small = runs.launch(make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}), budget_usd="1")
    open_run(page, small)
    poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length === 2", what="the graph")
    drawn = page.evaluate(DRAWN)
    assert drawn["zoom"] <= 1.25 and not drawn["grown"], drawn


SHOWN_WHOLE = """() => {
    const cy = window.glassboxRun.cy, e = cy.extent();
    const b = cy.nodes(':visible').boundingBox({includeLabels: false});
    return b.x1 >= e.x1 - 1 && b.x2 <= e.x2 + 1 && b.y1 >= e.y1 - 1 && b.y2 <= e.y2 + 1;
}"""
VIEW = "() => { const cy = window.glassboxRun.cy, e = cy.extent(); return [cy.zoom(), (e.x1 + e.x2) / 2, (e.y1 + e.y2) / 2]; }"


def fits_the_window(page) -> bool:
    """The graph is shown whole and fills its canvas, which is no taller than it may grow."""
    drawn = page.evaluate(DRAWN)
    within = drawn["canvasHeight"] <= MAX_CANVAS_SHARE * drawn["windowHeight"] + 1
    return within and fills_the_canvas(drawn) and page.evaluate(SHOWN_WHOLE)


def test_the_canvas_follows_the_windows_height_and_keeps_a_view_the_reader_zoomed(
    logged_in_page, browser_user, request
):
    """The canvas grew with a tall graph up to 80% of the window's height at first paint only: a
    window made shorter kept a canvas taller than 80% of it, a taller one a canvas the graph no
    longer filled. Now the canvas is sized again after a resize: a graph shown whole is fitted
    again, a view the reader zoomed into keeps its zoom and its centre."""
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    open_large_run(page, run, {"width": 1280, "height": 860})
    assert page.evaluate("window.glassboxRun.mode") == "agent" and fits_the_window(page)
    for height in (600, 1100):
        page.set_viewport_size({"width": 1280, "height": height})
        poll(page, lambda: fits_the_window(page), what=f"the graph fitted again in a {height} px window")
        graph_shot(page, request, f"grouped-by-agent-{height}")

    # Every task: too tall to be shown whole even at the least zoom; zoomed into, the view is kept.
    page.locator("#dag-mode").select_option("none")
    page.get_by_role("button", name="Zoom in").click()
    zoom, x, y = page.evaluate(VIEW)
    page.set_viewport_size({"width": 1280, "height": 700})
    share = MAX_CANVAS_SHARE * 700
    poll(page, lambda: abs(page.evaluate(DRAWN)["canvasHeight"] - share) <= 4, what="a canvas 80% of the window")
    assert page.evaluate(VIEW) == [pytest.approx(zoom), pytest.approx(x, abs=1), pytest.approx(y, abs=1)]
    expect(page.locator("#dag-minimap")).to_be_visible()
    graph_shot(page, request, "every-task-zoomed-700")
    assert not page.js_problems


# Each visible node as the graph canvas shows it: its label's text measured at its font (the
# widest line, in the canvas's pixels), the box Cytoscape keeps for that label (what the label is
# drawn into), and the columns of the node's inside where the node layer has ink (the label's dark
# text), read from the canvas itself.
DRAWN_LABELS = """() => {
    const cy = window.glassboxRun.cy, ratio = window.devicePixelRatio || 1, zoom = cy.zoom();
    const layer = document.querySelector('#dag canvas[data-id="layer2-node"]').getContext('2d');
    const measure = document.createElement('canvas').getContext('2d');
    return cy.nodes(':visible').map(n => {
        const text = n.pstyle('label').strValue;
        measure.font = `${n.pstyle('font-style').strValue} ${n.pstyle('font-weight').strValue} `
            + `${n.pstyle('font-size').pfValue}px ${n.pstyle('font-family').strValue}`;
        // Its lines as Cytoscape wraps them: at its line breaks, then a line wider than its
        // text-max-width after the words that fit (each with the space after it).
        const max = n.pstyle('text-max-width').pfValue, lines = [];
        const width = line => measure.measureText(line).width;
        text.split('\\n').forEach(line => {
            if (n.pstyle('text-wrap').value !== 'wrap' || width(line) <= max) {
                lines.push(line);
                return;
            }
            let current = '', from = 0;
            for (const space of line.matchAll(/[\\s\\u200b]+|$/g)) {
                const word = line.substring(from, space.index);
                from = space.index + space[0].length;
                if (width(current ? current + word + space[0] : word) <= max) {
                    current += word + space[0];
                } else {
                    if (current) lines.push(current);
                    current = word + space[0];
                }
            }
            if (!/^[\\s\\u200b]*$/.test(current)) lines.push(current);
        });
        const textWidth = Math.max(...lines.map(line => Math.ceil(width(line))));
        const labelBox = n.boundingBox({includeNodes: false, includeEdges: false, includeLabels: true,
                                        includeOverlays: false});
        const body = n.renderedBoundingBox({includeLabels: false, includeOverlays: false});
        if (body.x1 < 0 || body.y1 < 0 || body.x2 > cy.width() || body.y2 > cy.height()) {
            return null;  // partly out of view
        }
        // Cytoscape leaves out a label too small on screen (min-zoomed-font-size), with the zoom
        // rounded up to a power of two.
        const scale = Math.pow(2, Math.ceil(Math.log2(zoom * ratio)));
        const shown = n.pstyle('font-size').pfValue * scale >= n.pstyle('min-zoomed-font-size').pfValue;
        const inset = n.pstyle('border-width').pfValue * zoom + 2;
        const x = Math.round((body.x1 + inset) * ratio), y = Math.round((body.y1 + inset) * ratio);
        const w = Math.round((body.w - 2 * inset) * ratio), h = Math.round((body.h - 2 * inset) * ratio);
        let first = null, last = null;
        if (w > 0 && h > 0) {
            const px = layer.getImageData(x, y, w, h).data;
            for (let col = 0; col < w; col++) {
                for (let row = 0; row < h; row++) {
                    const i = 4 * (row * w + col);
                    if (px[i + 3] > 0 && px[i] + px[i + 1] + px[i + 2] < 3 * 140) {
                        first = first === null ? col : first;
                        last = col;
                        break;
                    }
                }
            }
        }
        return {name: n.data('name') || n.data('key'), group: n.hasClass('group'), shown: shown,
                fontPx: n.pstyle('font-size').pfValue * zoom * ratio,
                textWidth: textWidth * zoom * ratio, boxWidth: (labelBox.w - 4) * zoom * ratio,
                ink: first === null ? 0 : last - first + 1};
    }).filter(Boolean);
}"""


def misdrawn_labels(page) -> list[str]:
    """The visible nodes whose label is not drawn whole: kept in a box of another size than its
    text (a label measured at another zoom level's font, drawn clipped into it), or whose ink
    spans less than its text (clipped) or more (drawn twice, side by side), or is missing (a label
    too small on screen to be drawn has none)."""
    wrong = []
    for node in page.evaluate(DRAWN_LABELS):
        width = node["textWidth"]
        if abs(node["boxWidth"] - width) > max(3, 0.05 * width):
            wrong.append(f"{node['name']}: label box {node['boxWidth']:.0f} px for a text of {width:.0f} px")
        elif node["shown"] and node["fontPx"] >= 6 and not node["ink"]:
            wrong.append(f"{node['name']}: no label drawn")
        elif node["shown"] and node["fontPx"] >= 10 and not 0.8 * width - 3 <= node["ink"] <= 1.1 * width + 3:
            # (Smaller text is too faint at its edges to be measured by its ink, and below 6 px
            # too faint to be told from the fill.)
            wrong.append(f"{node['name']}: ink over {node['ink']} px for a text of {width:.0f} px")
        elif not node["shown"] and node["ink"]:
            wrong.append(f"{node['name']}: ink over {node['ink']} px for a label too small to draw")
    return wrong


def labels_drawn_whole(page) -> bool:
    # Cytoscape draws labels in the frames after a change (from textures it builds over a few).
    page.wait_for_timeout(300)
    return misdrawn_labels(page) == []


def layered_plan() -> dict:
    """A large run's shape: a first task, steps of 40, 60, 40 and 8 tasks (of the demo team's
    agents in turn, each after one or two of the step before), and a last task after the 8."""
    team = ("architect", "researcher", "coder", "tester", "reviewer", "writer")
    tasks = {"scope": ("researcher", [])}
    previous = ["scope"]
    for step, size in enumerate((40, 60, 40, 8), start=1):
        keys = [f"s{step}_{n:02}" for n in range(size)]
        for n, key in enumerate(keys):
            ups = {previous[n % len(previous)], previous[(3 * n + 1) % len(previous)]}
            tasks[key] = (team[(n + step) % len(team)], sorted(ups))
        previous = keys
    tasks["brief"] = ("writer", previous)
    return tasks


def test_labels_are_drawn_whole_in_every_grouping_and_at_every_zoom(
    logged_in_page, demo_agents, priced_limit, make_plan, request
):
    """Switching a large run's graph to "Group by step" after a view zoomed out: the first task's
    label read "e the big Fr" over "rcefceded suc", the same text drawn twice at two sizes and
    clipped, and step 2's name was tiny and doubled. The labels of a zoom level (a task's key at
    20 or 30 px, its title and state at 11) were switched during the layout's fit, which measured
    the nodes at once: Cytoscape kept the previous level's label sizes and drew the new label into
    them. And grouped by fan-out at "Fit", the group boxes had no name while the smaller task
    boxes beside them showed their keys: a group's name was drawn at 24 px against a key's 30, and
    Cytoscape leaves out labels too small on screen. Now every label is measured at its own font,
    and a group's name is left out only where the tasks' keys are too."""
    page = logged_in_page
    plan = make_plan(layered_plan(), goal="Five steps of 1, 40, 60, 40, 8 tasks and a brief")
    run = runs.launch(plan, cap=20, budget_usd="10")  # no cluster: the tasks stay where they start
    open_run(page, run)
    poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length > 0", what="the graph")
    # Each mode from the one before, at "Fit": zoomed out (the keys) and near (titles, counts).
    levels = set()
    for mode in ("agent", "step", "fanout", "none", "step"):
        page.locator("#dag-mode").select_option(mode)
        poll(page, "m => window.glassboxRun.mode === m", mode, what=f"the {mode} mode")
        level = page.evaluate("() => window.glassboxRun.cy.nodes(':visible').first().classes().join(' ')")
        levels.add(level.split()[-1] if "zoom-" in level else "near")
        whole = labels_drawn_whole(page)
        graph_shot(page, request, f"{mode}-fit")
        assert whole, (mode, misdrawn_labels(page))
        # Zoomed in and out from there, the labels of each level are drawn whole too.
        for button in ("Zoom in", "Zoom in", "Fit", "Zoom out", "Zoom out", "Zoom out", "Fit"):
            page.get_by_role("button", name=button).click()
            assert labels_drawn_whole(page), (mode, button, misdrawn_labels(page))
    assert levels >= {"near", "zoom-mid", "zoom-far"}, levels
    # Fan-outs, zoomed out to where the tasks' keys are still drawn (7.5 px on screen): the group
    # box beside them is named too, not left empty.
    page.locator("#dag-mode").select_option("fanout")
    page.evaluate(
        "() => { const cy = window.glassboxRun.cy; cy.zoom({level: 0.2, renderedPosition: {x: cy.width() / 2, y: cy.height() / 2}}); }"
    )
    whole = labels_drawn_whole(page)
    graph_shot(page, request, "fanout-far")
    assert whole, misdrawn_labels(page)
    nodes = page.evaluate(DRAWN_LABELS)
    assert any(node["shown"] for node in nodes if not node["group"])
    groups = [node for node in nodes if node["group"]]
    assert groups and all(node["shown"] and node["ink"] for node in groups), groups
    assert not page.js_problems


ZOOM_CLASSES = """() => window.glassboxRun.cy.nodes(':visible').map(n => n.id() + ' ' +
    (n.hasClass('zoom-far') ? 'far' : n.hasClass('zoom-mid') ? 'mid' : 'near')).sort()"""


def test_a_graph_rebuilt_by_a_plan_edit_shows_the_labels_of_its_zoom(
    logged_in_page, demo_agents, priced_limit, make_plan, request
):
    """A plan edit before the approval rebuilds the graph; fitted at the zoom level the old graph
    had, its nodes were left without that level's labels (the level was remembered across the
    rebuild, so nothing applied it): titles too small to draw where a reload shows the keys."""
    page = logged_in_page
    plan = make_plan(layered_plan(), goal="Five steps of 1, 40, 60, 40, 8 tasks and a brief")
    run = runs.launch(plan, cap=20, budget_usd="10", require_plan_approval=True)
    open_run(page, run)
    poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length > 0", what="the graph")
    page.locator("#dag-mode").select_option("none")
    poll(page, "() => window.glassboxRun.mode === 'none'", what="every task shown")
    before = page.evaluate(ZOOM_CLASSES)
    assert before and all(entry.endswith((" far", " mid")) for entry in before), before[:5]
    plan_edits.remove_subtask(Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN), "s4_07")
    poll(page, "() => window.glassboxRun.cy.nodes('.task').length === 149", what="the rebuilt graph")
    page.locator("#dag-mode").select_option("none")
    rebuilt = page.evaluate(ZOOM_CLASSES)
    graph_shot(page, request, "rebuilt")
    page.reload()
    poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length > 0", what="the graph")
    page.locator("#dag-mode").select_option("none")
    poll(page, "() => window.glassboxRun.mode === 'none'", what="every task shown")
    assert rebuilt == page.evaluate(ZOOM_CLASSES)
    assert labels_drawn_whole(page), misdrawn_labels(page)
    assert not page.js_problems
