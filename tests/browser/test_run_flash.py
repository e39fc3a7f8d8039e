"""The run page's message line in Chromium (static/dashboard/run/flash.js): a success is news for
a few seconds and goes away by itself, whether the page came with it ("Run #7 launched.") or an
action's answer brought it ("a will run again."); an error stays until it is dismissed."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from orchestrator.engine import runs
from orchestrator.models import Agent, Run
from tests.browser.test_run_page import assert_not_reloaded, open_run
from tests.conftest import fast_latency, run_here

pytestmark = [pytest.mark.browser]

# flash.js shows a success for 6 s.
GONE_WITHIN_MS = 10_000


def test_successes_fade_once_they_are_no_longer_news_and_errors_wait_to_be_dismissed(
    logged_in_page, make_agent, priced_limit, make_plan, no_broker, screenshot
):
    page = logged_in_page
    make_agent("researcher", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    first = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1")
    run_here(first)
    open_run(page, first)
    flash = page.locator("#run-flash")
    said = flash.locator(".run-flash-text")

    # "Launch again" sends the browser to the new run, whose page came with the news.
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("[data-action='launch-again']").click()
    expect(page).to_have_url(re.compile(rf"/runs/{first.pk + 1}/$"))
    again = Run.objects.get(pk=first.pk + 1)
    expect(said).to_have_text(f"Run #{again.pk} launched: plan {first.plan_id} again, with run #{first.pk}'s settings.")
    expect(flash).to_have_class(re.compile("run-flash-success"))
    screenshot(page, "launched")
    expect(said).to_have_count(0, timeout=GONE_WITHIN_MS)  # though no frame came meanwhile
    run_here(again)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "failed")

    # An error stays until dismissed.
    task = again.tasks.get()
    page.goto(f"/runs/{again.pk}/?task={task.pk}")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.__notReloaded = true")
    retry = page.locator("#task-panel [data-action='retry']")
    page.route("**/retry/", lambda route: route.fulfill(status=500, body="boom"))
    heard_before = len(page.js_problems)
    retry.click()
    expect(said).to_have_text("The server could not do this (HTTP 500). Reload the page and try again.")
    time.sleep(GONE_WITHIN_MS / 1000)
    expect(said).to_have_count(1)
    screenshot(page, "error-kept")
    flash.get_by_role("button", name="Dismiss").click()
    expect(said).to_have_count(0)
    # The browser logs the 500 it was given: expected here. A JavaScript error is not.
    page.js_problems[heard_before:] = [p for p in page.js_problems[heard_before:] if ": console error: " not in p]
    page.unroute("**/retry/")

    # A retry's answer: news until the task has run again.
    Agent.objects.update(provider_options=fast_latency(0.01))
    retry.click()
    expect(said).to_have_text("a will run again.")
    run_here(again)
    expect(page.locator("#run-header [data-run-status]")).to_have_attribute("data-run-status", "succeeded")
    expect(said).to_have_count(0, timeout=GONE_WITHIN_MS)
    screenshot(page, "retried-and-finished")
    assert_not_reloaded(page)
