"""The run page's "live" badge in Chromium tells the truth about its websocket: a socket that stays
open while nothing gets through (the browser went offline) is not live. The page says
"reconnecting…" until the server answers again, then catches up with what it missed.

No cluster: the test process runs the attempts itself, as a worker would, and daphne's broadcaster
finds their events by polling the event table.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from orchestrator.engine import runs
from orchestrator.models import Run
from tests.browser.test_run_page import assert_not_reloaded, open_run, wait_caught_up
from tests.conftest import run_here

pytestmark = [pytest.mark.browser]

# live.js pings every 3 s and gives up on a socket 8 s after an unanswered ping; reconnecting
# backs off (htmx-ext-ws's full jitter) while the network is away.
STALE_WITHIN_MS = 15_000
BACK_WITHIN_MS = 45_000


def test_the_badge_stops_saying_live_while_offline_and_the_page_catches_up_after(
    logged_in_page, demo_agents, priced_limit, make_plan, no_broker, screenshot
):
    page = logged_in_page
    run = runs.launch(make_plan({"scope": ("researcher", []), "write": ("writer", ["scope"])}), budget_usd="5")
    open_run(page, run)
    badge = page.locator("#live-status")
    expect(badge).to_have_text("live")

    heard_before = len(page.js_problems)
    page.context.set_offline(True)
    run_here(run)  # the run succeeds while the page hears nothing
    assert Run.objects.get(pk=run.pk).status == Run.Status.SUCCEEDED
    expect(badge).to_have_attribute("data-state", "offline", timeout=STALE_WITHIN_MS)
    expect(badge).to_have_text("reconnecting…")
    expect(page.locator("#run-header [data-run-status]")).not_to_have_attribute("data-run-status", "succeeded")
    screenshot(page, "offline")

    page.context.set_offline(False)
    expect(badge).to_have_attribute("data-state", "live", timeout=BACK_WITHIN_MS)
    # Offline, the browser logged every request and reconnection it could not make: expected here.
    # A JavaScript error is not.
    offline = page.js_problems[heard_before:]
    page.js_problems[heard_before:] = [problem for problem in offline if ": console error: " not in problem]
    wait_caught_up(page, run)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "succeeded")
    assert_not_reloaded(page)
    screenshot(page, "back-online")
