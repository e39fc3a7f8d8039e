"""The New-run form's two-column grid in Chromium: each field's label in the left column and its
input beside it, whichever plan source is chosen and however the page was reached (?plan=N from
the Plans page), at full width and on a phone."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser]

WIDE = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}

# The boxes of the "Saved plan" label and its dropdown.
BOXES = """() => ['label[for="id_saved_plan"]', '#id_saved_plan'].map(sel => {
    const r = document.querySelector(sel).getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width};
})"""


def assert_label_beside_its_dropdown(page) -> None:
    label, select = page.evaluate(BOXES)
    assert label["right"] <= select["left"], f"the label ({label}) is not left of the dropdown ({select})"
    assert abs(label["top"] - select["top"]) < 12, f"the label ({label}) is not on the dropdown's row ({select})"
    assert select["width"] >= 400, f"the dropdown is cut to {select['width']} px"


def assert_label_above_its_dropdown(page) -> None:
    label, select = page.evaluate(BOXES)
    assert label["bottom"] <= select["top"], f"the label ({label}) is not above the dropdown ({select})"
    assert select["width"] >= 300, f"the dropdown is cut to {select['width']} px"


def test_a_saved_plans_dropdown_sits_in_the_field_column_beside_its_label(
    logged_in_page, demo_agents, priced_limit, make_plan, screenshot
):
    page = logged_in_page
    plan = make_plan({"scope": ("researcher", [])}, goal="Write a decision brief on vector databases")

    page.set_viewport_size(WIDE)
    page.goto(f"/runs/new/?plan={plan.pk}")  # Plans → Launch…
    expect(page.get_by_label("A saved plan")).to_be_checked()
    expect(page.get_by_label("Saved plan", exact=True)).to_be_visible()
    assert_label_beside_its_dropdown(page)
    screenshot(page, "from-plans-1280")

    page.goto("/runs/new/")
    page.get_by_label("A saved plan").check()
    assert_label_beside_its_dropdown(page)
    # The fields after it keep their columns too.
    goal, settings = page.evaluate(
        """() => ['label[for="id_goal"]', 'label[for="id_cap"]'].map(sel =>
            document.querySelector(sel).getBoundingClientRect().left)"""
    )
    assert goal == settings

    page.set_viewport_size(PHONE)
    page.goto(f"/runs/new/?plan={plan.pk}")
    assert_label_above_its_dropdown(page)
    screenshot(page, "from-plans-390")


def wide_plan(path) -> str:
    """122 subtasks in 4 steps: scope, 111 sections and 8 appendices after it, a merge, a summary."""
    sections = [f"section-{i:03}" for i in range(1, 112)]
    appendices = [f"appendix-{i}" for i in range(1, 9)]
    lines = ["goal: Write a long report", "subtasks:", "  - {key: scope, agent: researcher, title: Scope it}"]
    lines += [f"  - {{key: {k}, agent: writer, title: Write {k}, depends_on: [scope]}}" for k in sections]
    lines += [f"  - {{key: {k}, agent: researcher, title: Add {k}, depends_on: [scope]}}" for k in appendices]
    lines.append(f"  - {{key: merge, agent: writer, title: Merge, depends_on: [{', '.join(sections + appendices)}]}}")
    lines.append("  - {key: summary, agent: writer, title: Sum it up, depends_on: [merge]}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_fan_out_of_111_subtasks_is_one_card_and_every_step_is_on_screen(
    logged_in_page, demo_agents, priced_limit, tmp_path, screenshot
):
    """The pre-flight of a 122-subtask plan stacked 112 cards in one column (7,925 px), its last
    step off-screen to the right."""
    page = logged_in_page
    page.set_viewport_size(WIDE)
    page.goto("/runs/new/")
    page.get_by_label("Plan file", exact=True).set_input_files(wide_plan(tmp_path / "wide.yaml"))
    page.get_by_role("button", name="Check the plan").click()
    dag = page.locator("#preflight-dag")
    expect(dag).to_contain_text("122 subtasks")
    # One section is on the critical path and keeps its card; the 110 others are one card.
    group = page.locator(".dag-group", has_text="section-")
    expect(group).to_contain_text(re.compile(r"section-00[12] … section-111"))
    expect(group).to_contain_text("110 subtasks alike")
    expect(page.locator(".dag-node.critical", has_text="section-")).to_have_count(1)
    expect(page.locator("#preflight-group-appendix-1")).to_contain_text("8 subtasks alike")
    box = dag.bounding_box()
    assert box is not None and box["height"] < 900
    for step in range(1, 5):
        label = page.get_by_role("listitem", name=f"Step {step}").bounding_box()
        assert label is not None and label["x"] + label["width"] <= WIDE["width"], f"step {step} is off-screen"
    screenshot(page, "preflight-wide-fan-out")

    group.get_by_text("Show all 110").click()
    expect(page.locator("#preflight-node-section-111")).to_be_visible()
    expect(page.locator("#preflight-node-section-111")).to_contain_text("Write section-111")
