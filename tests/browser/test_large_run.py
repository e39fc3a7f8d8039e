"""A finished 293-task run in Chromium: the graph starts grouped so that it can be read, finds a
task, focuses it with its upstream and downstream, shows a minimap that moves the view, and
labels stay readable (or absent) at every zoom. Screenshots in test-artifacts/<test>/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import artifact_dir
from tests.browser.test_run_page import VIEWPORT, poll
from tests.large_run import finished_large_run

pytestmark = [pytest.mark.browser]


def graph_shot(page, request, name: str) -> None:
    """The graph card alone, large enough to read (the full-page screenshots shrink it)."""
    page.locator(".dag-card").screenshot(path=str(artifact_dir(request.node.name) / f"graph-{name}.png"))


def overlapping_nodes(page) -> int:
    """Pairs of visible nodes drawn on top of each other (a layout that lost their sizes)."""
    return page.evaluate(
        """() => {
            const boxes = window.glassboxRun.cy.nodes(':visible').map(n => n.boundingBox({includeLabels: false}));
            let pairs = 0;
            for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const a = boxes[i], b = boxes[j];
                if (a.x1 < b.x2 - 1 && b.x1 < a.x2 - 1 && a.y1 < b.y2 - 1 && b.y1 < a.y2 - 1) pairs++;
            }
            return pairs;
        }"""
    )


def visible_nodes(page) -> int:
    return page.evaluate("window.glassboxRun.cy.nodes(':visible').length")


def open_large_run(page, run, viewport=VIEWPORT) -> None:
    page.set_viewport_size(viewport)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    poll(page, "() => !!window.glassboxRun && window.glassboxRun.cy.nodes().length > 0", what="the graph")


def test_a_293_task_graph_is_readable_searchable_and_focusable(logged_in_page, browser_user, screenshot, request):
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    tasks = dict(run.tasks.values_list("subtask__key", "pk"))
    open_large_run(page, run)

    # Grouped by agent within each step: seven nodes, each counting its tasks by state.
    assert page.evaluate("window.glassboxRun.mode") == "agent"
    expect(page.locator("#dag-mode")).to_have_value("agent")
    assert visible_nodes(page) == 7 and overlapping_nodes(page) == 0
    labels = page.evaluate("window.glassboxRun.cy.nodes('.group:visible').map(n => n.data('label'))")
    assert "240 × researcher · step 3\n240 succeeded" in labels
    # At "Fit" the labels stay readable: drawn at least 7 px high on screen, or not drawn at all.
    page.get_by_role("button", name="Fit").click()
    readable = page.evaluate(
        """() => window.glassboxRun.cy.nodes(':visible').every(n => {
            const px = parseFloat(n.style('font-size')) * window.glassboxRun.cy.zoom();
            return px >= 7 || parseFloat(n.style('min-zoomed-font-size')) >= 7;
        })"""
    )
    assert readable
    screenshot(page, "grouped-by-agent")
    graph_shot(page, request, "grouped-by-agent")

    # Every task: more than the canvas shows whole at the least zoom, so the minimap appears and
    # moves the view where it is clicked.
    page.locator("#dag-mode").select_option("none")
    assert visible_nodes(page) == 293 and overlapping_nodes(page) == 0
    minimap = page.locator("#dag-minimap")
    expect(minimap).to_be_visible()
    assert page.evaluate("window.glassboxRun.minimap.nodes().length") == 293
    page.get_by_role("button", name="Zoom in").click()
    page.get_by_role("button", name="Zoom in").click()
    page.get_by_role("button", name="Zoom in").click()
    box = minimap.bounding_box()
    # Click where the report (the last task) is drawn in the minimap: the view moves there.
    report = page.evaluate(f"window.glassboxRun.minimap.getElementById('t{tasks['report']}').renderedPosition()")
    page.mouse.click(box["x"] + report["x"], box["y"] + report["y"])
    shown = page.evaluate(
        """id => {
            const cy = window.glassboxRun.cy, e = cy.extent(), p = cy.getElementById(id).position();
            return p.x >= e.x1 && p.x <= e.x2 && p.y >= e.y1 && p.y <= e.y2;
        }""",
        f"t{tasks['report']}",
    )
    assert shown, "clicking the report in the minimap did not bring it into view"
    view = page.locator(".dag-minimap-view").bounding_box()
    assert view["width"] < box["width"] and box["x"] <= view["x"] <= box["x"] + box["width"]
    # Zoomed out this far, a task's label is its key, larger; zoomed in, its title and state.
    level = page.evaluate("window.glassboxRun.cy.nodes('.task').first().hasClass('zoom-far')")
    assert isinstance(level, bool)
    screenshot(page, "every-task-with-minimap")
    graph_shot(page, request, "every-task-with-minimap")

    # Search: back in agent mode, the group holding the match stands out and the rest is dimmed.
    page.locator("#dag-mode").select_option("agent")
    assert visible_nodes(page) == 7 and overlapping_nodes(page) == 0  # laid out again, not on top of each other
    search = page.get_by_label("Find a task")
    search.fill("probe_3_7")
    expect(page.locator("#dag-search-status")).to_have_text("1 task matches")
    matched = page.evaluate("window.glassboxRun.cy.nodes('.is-match').map(n => n.data('name') || n.data('key'))")
    assert matched == ["240 × researcher · step 3"]
    assert page.evaluate("window.glassboxRun.cy.nodes(':visible.is-dim').length") == 6
    screenshot(page, "search")
    graph_shot(page, request, "search")

    # Enter goes there: the groups holding it and its neighbours open, the task is selected, its
    # panel opens, and the focus lights its upstream (area_3, scope) and downstream (synth_3; the
    # reviews' group, the report).
    search.press("Enter")
    probe = tasks["probe_3_7"]
    expect(page.locator("#task-panel")).to_have_attribute("data-task", str(probe))
    poll(page, "id => window.glassboxRun.focused === id", probe, what="the focus on the task")
    assert overlapping_nodes(page) == 0
    node = f"window.glassboxRun.cy.getElementById('t{probe}')"
    assert page.evaluate(f"{node}.visible() && {node}.hasClass('is-selected')")
    search.fill("")
    lit = page.evaluate(
        "window.glassboxRun.cy.nodes(':visible').filter(n => !n.hasClass('is-dim')).map(n => n.data('key') || n.data('name'))"
    )
    assert {"probe_3_7", "area_3", "scope", "synth_3", "12 × reviewer · step 5", "report"} <= set(lit)
    assert "probe_3_8" not in lit and "area_4" not in lit and "synth_4" not in lit  # the rest dimmed
    screenshot(page, "focus")
    graph_shot(page, request, "focus")
    page.get_by_role("button", name="Clear focus").click()
    assert page.evaluate("window.glassboxRun.cy.elements('.is-dim').length") == 0

    # The event log: the newest 30 events, older ones on demand; its task filter loads when used.
    rows = page.locator("#event-log-rows .event-row")
    expect(rows).to_have_count(30)
    page.get_by_role("button", name="Show older events").click()
    expect(rows).to_have_count(60)
    task_filter = page.locator("#filter-task")
    task_filter.focus()
    expect(task_filter.locator("option")).to_have_count(294)  # "All tasks" and each task
    task_filter.select_option(label="report")
    expect(rows).to_have_count(3)  # queued, started, succeeded
    screenshot(page, "event-log-filtered")
    assert not page.js_problems


def test_the_graph_grouped_by_agent_fills_its_canvas_at_1280_px(logged_in_page, browser_user, screenshot, request):
    """Grouped by agent, the 293 tasks are a chain of six steps with one or two nodes each: laid
    out left to right, it was a strip 63 px high across a 470 px canvas, its groups 102 px wide with
    their counts left out. Now dagre lays such a graph out top to bottom: it fills the canvas's
    height, each group drawn over 150 px wide with its counts."""
    page = logged_in_page
    run = finished_large_run(launched_by=browser_user)
    open_large_run(page, run, {"width": 1280, "height": 860})
    assert page.evaluate("window.glassboxRun.mode") == "agent"
    graph_shot(page, request, "grouped-by-agent-1280")
    drawn = page.evaluate(
        """() => {
            const cy = window.glassboxRun.cy, box = cy.elements(':visible').renderedBoundingBox();
            const groups = cy.nodes('.group:visible').map(n => n.renderedBoundingBox({includeLabels: false}).w);
            return {width: box.w, height: box.h, canvasWidth: cy.width(), canvasHeight: cy.height(),
                    narrowestGroup: Math.min(...groups), zoomFar: cy.nodes('.zoom-far').length};
        }"""
    )
    assert drawn["height"] >= drawn["canvasHeight"] * 0.75, drawn
    assert drawn["width"] * drawn["height"] >= 0.3 * drawn["canvasWidth"] * drawn["canvasHeight"], drawn
    assert drawn["narrowestGroup"] >= 150 and drawn["zoomFar"] == 0, drawn  # far out, a group shows its name alone
    assert visible_nodes(page) == 7 and overlapping_nodes(page) == 0
    labels = page.evaluate("window.glassboxRun.cy.nodes('.group:visible').map(n => n.data('label'))")
    assert "240 × researcher · step 3\n240 succeeded" in labels

    downward = "window.glassboxRun.cy.edges(':visible').filter(e => e.hasClass('is-downward')).length"
    assert page.evaluate(downward) == 6

    # Every task: a graph taller than wide already, laid out left to right as before.
    page.locator("#dag-mode").select_option("none")
    assert visible_nodes(page) == 293 and overlapping_nodes(page) == 0
    assert page.evaluate(downward) == 0
    screenshot(page, "every-task")
