"""The run page's graph (static/dashboard/run/graph.js) as a run changes it, in Chromium.

Screenshots in test-artifacts/<test>/.
"""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import Checkpoint
from tests.browser.test_run_layout import crowded_group_labels
from tests.browser.test_run_page import open_run, poll

pytestmark = [pytest.mark.browser]

GROUP_BOXES = """() => window.glassboxRun.cy.nodes('.group:visible').map(n => {
    const b = n.boundingBox({includeLabels: false});
    return {name: n.data('name'), label: n.data('label'), x1: b.x1, x2: b.x2, y1: b.y1, y2: b.y2};
})"""


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
    the layout and the person's view do not."""
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
    sizes = {b["name"]: (round(b["x2"] - b["x1"]), round(b["y2"] - b["y1"])) for b in before}
    assert {b["name"]: (round(b["x2"] - b["x1"]), round(b["y2"] - b["y1"])) for b in after} == sizes
    assert overlapping(after) == []
    # The view stays where the person put it and every label stays inside its box, at each zoom.
    assert page.evaluate("() => ({zoom: window.glassboxRun.cy.zoom(), pan: window.glassboxRun.cy.pan()})") == view
    assert crowded_group_labels(page) == []
    for level in ("zoom-mid", "zoom-far"):
        page.evaluate("level => { window.glassboxRun.cy.nodes().addClass(level); }", level)
        assert crowded_group_labels(page) == [], level
        page.evaluate("level => { window.glassboxRun.cy.nodes().removeClass(level); }", level)
