"""The New-run form's two-column grid in Chromium: each field's label in the left column and its
input beside it, whichever plan source is chosen and however the page was reached (?plan=N from
the Plans page), at full width and on a phone."""

from __future__ import annotations

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
