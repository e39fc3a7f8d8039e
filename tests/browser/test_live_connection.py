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


# The header's approvals count polls every 5 s (templates/base.html).
POLL_S = 5


def test_while_offline_only_the_badge_speaks_of_the_connection_and_the_approvals_poll_recovers_silently(
    logged_in_page, make_agent, make_plan, no_broker, screenshot
):
    """The approvals count's poll toasted "The server did not answer. Check the connection and try
    again." at every turn beside "reconnecting…", and the error stayed once the server answered."""
    from tests.browser.test_approvals_badge import open_tool_checkpoint

    page = logged_in_page
    make_agent("coder")
    run = runs.launch(make_plan({"a": ("coder", [])}), budget_usd="1")
    task = run.tasks.get()
    open_run(page, run)
    badge, count = page.locator("#live-status"), page.locator("#approvals-count")
    toast = page.locator("#run-flash .run-flash-text")
    expect(count).to_be_attached()

    heard_before = len(page.js_problems)
    page.context.set_offline(True)
    expect(badge).to_have_attribute("data-state", "offline", timeout=STALE_WITHIN_MS)
    with page.expect_event("requestfailed", lambda request: "/approvals/count/" in request.url, timeout=15_000):
        pass  # a poll failed while the badge says so
    page.wait_for_timeout(POLL_S * 1000 + 500)  # and the next one
    expect(badge).to_have_text("reconnecting…")
    expect(toast).to_have_count(0)
    screenshot(page, "offline-one-message")

    open_tool_checkpoint(run, task)  # something for the poll to count once it is heard again
    page.context.set_offline(False)
    with page.expect_response(lambda r: "/approvals/count/" in r.url and r.status == 200, timeout=15_000):
        pass
    expect(count).to_have_text("1")
    expect(badge).to_have_attribute("data-state", "live", timeout=BACK_WITHIN_MS)
    expect(toast).to_have_count(0)
    offline = page.js_problems[heard_before:]
    page.js_problems[heard_before:] = [problem for problem in offline if ": console error: " not in problem]
    assert_not_reloaded(page)
    screenshot(page, "back-online-silently")
