"""The admin's audit log (Events) in Chromium at 1280 px: every column in view, and each event's
message as the run page's log words it (readmodels/log.describe_event), not "-" for an event whose
story is in its payload."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from orchestrator.engine import runs
from orchestrator.models import Event
from orchestrator.readmodels.log import describe_event
from tests.browser.conftest import BROWSER_PASSWORD, browser_password_hash, log_in
from tests.browser.test_narrow import PHONE
from tests.conftest import run_here

pytestmark = [pytest.mark.browser]

WIDE = {"width": 1280, "height": 860}

# The changelist's columns whose right edge is past its box's (the list scrolls sideways in it).
COLUMNS_CUT = """() => {
    const box = document.querySelector('#changelist .results').getBoundingClientRect();
    return [...document.querySelectorAll('#result_list thead th')]
        .filter(th => th.getBoundingClientRect().right > Math.min(box.right, document.documentElement.clientWidth) + 0.5)
        .map(th => th.innerText.trim());
}"""


def test_the_audit_log_shows_every_column_at_1280_and_says_what_each_event_did(
    page, demo_agents, priced_limit, make_plan, no_broker, screenshot
):
    User.objects.create(username="root", password=browser_password_hash(), is_staff=True, is_superuser=True)
    run = runs.launch(make_plan({"scope": ("researcher", [])}, goal="An audited run"), budget_usd="5")
    run_here(run)
    succeeded = Event.objects.get(run=run, type="task.succeeded")
    assert not succeeded.message  # its story is in its payload
    said = describe_event(succeeded)
    assert said.startswith("attempt 1 · output tokens")

    log_in(page, "root", BROWSER_PASSWORD)
    page.set_viewport_size(WIDE)
    page.goto("/admin/orchestrator/event/")
    header = page.locator("#result_list thead")
    for column in ("Time", "Run", "Type", "Actor", "Task", "Message"):
        expect(header).to_contain_text(column, ignore_case=True)
    screenshot(page, "events-1280")
    assert page.evaluate(COLUMNS_CUT) == []
    row = page.locator("#result_list tbody tr", has=page.locator("td", has_text="task.succeeded"))
    expect(row).to_contain_text(said)
    expect(row).to_contain_text("scope")

    page.set_viewport_size(PHONE)
    page.reload()
    expect(page.locator("#result_list tbody tr", has_text="task.succeeded")).to_contain_text(said)
    screenshot(page, "events-390")
