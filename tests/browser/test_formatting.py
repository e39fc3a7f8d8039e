"""Durations are formatted once: on the server (dashboard/formatting.py), except the clocks that
tick in the browser, whose one formatter (static/dashboard/run/format.js) must say the same.

The comparison runs format.js in Chromium on the same values as format_duration, days, zero,
hours, negative and rounding ties included; then a run started days ago shows the same elapsed
text before and after the page's clock has ticked, and an ETA counts down to where the server
says a countdown has run out (readmodels/eta.py ETA_RUN_OUT_S), then reads as the server's.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.formatting import format_duration
from orchestrator.engine import runs
from orchestrator.models import Run
from orchestrator.readmodels.eta import ETA_RUN_OUT_S
from tests.conftest import fast_latency

pytestmark = [pytest.mark.browser]

FORMAT_MODULE = "/static/dashboard/run/format.js"
SECONDS = [
    None,
    0,
    -3,
    0.04,
    0.05,
    0.25,
    0.75,
    1.25,
    9.94,
    9.96,
    10,
    12.5,
    13.5,
    59.4,
    59.5,
    60,
    185,
    3599.5,
    3600,
    7440,
    86399,
    47 * 3600 + 59 * 60,
    48 * 3600,
    3 * 86400 + 7200,
    400 * 86400 + 5 * 3600 + 17,
]


def test_the_browser_formats_durations_as_the_server_does(logged_in_page):
    page = logged_in_page
    in_browser = page.evaluate(
        """async ([module, values]) => {
            const { formatDuration } = await import(module);
            return values.map(formatDuration);
        }""",
        [FORMAT_MODULE, SECONDS],
    )
    assert in_browser == [format_duration(s) for s in SECONDS]
    assert "3 d 2 h" in in_browser and "0.0 s" in in_browser and "2 h 04 min" in in_browser


def test_a_run_started_days_ago_ticks_in_days_like_the_server_renders(logged_in_page, demo_agents, make_plan):
    page = logged_in_page
    run = runs.launch(make_plan({"scope": ("researcher", [])}, goal="A long one"), budget_usd="1")
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(days=3, hours=2, minutes=10))
    page.goto(f"/runs/{run.pk}/")
    elapsed = page.locator("#run-totals .js-elapsed")
    expect(elapsed).to_have_text("3 d 2 h")  # the server's text
    # The page's clock rewrites the text every second: blank it and see the browser's own text.
    elapsed.evaluate("el => { el.textContent = ''; }")
    expect(elapsed).to_have_text("3 d 2 h", timeout=3000)


def test_the_eta_counts_down_to_the_servers_run_out_then_says_past_the_estimate(
    logged_in_page, make_agent, make_plan, priced_limit
):
    page = logged_in_page
    make_agent("writer", provider_options=fast_latency(2.0))
    run = runs.launch(make_plan({"w": ("writer", [])}), budget_usd="1")  # w waits, queued: 2 s left
    page.goto(f"/runs/{run.pk}/")
    eta = page.locator("#run-totals .js-eta")
    expect(eta).to_have_attribute("data-run-out-s", format(ETA_RUN_OUT_S, "g"))
    expect(eta).to_have_text(re.compile(r"^\d\.\d s$"))  # counting down from "2.0 s"
    expect(eta).to_have_text("past the estimate", timeout=10_000)
    # Where the server says a countdown has run out, the page's clock says so too.
    eta.evaluate("el => { el.dataset.etaAt = String(Number(el.dataset.etaAt) + 60_000); }")
    expect(eta).not_to_have_text("past the estimate")  # a minute to go
    eta.evaluate("el => { el.dataset.runOutS = '3600'; }")
    expect(eta).to_have_text("past the estimate")
