"""A fan-out's burst in Chromium: the root's success readies every probe at once, and the page that
watched it live is the page a reload shows (tests/dashboard/test_live_burst.py checks the same on
the server's HTML; here htmx, run/oob.js and the page's scripts apply the frame).

No cluster: the test process runs the root's attempt itself, as a worker would, and daphne's
broadcaster finds its events by polling the event table.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from orchestrator.engine import runs
from orchestrator.models import Attempt, Checkpoint, Run
from orchestrator.readmodels import log as run_log
from tests.browser.test_run_page import assert_not_reloaded, open_run, wait_caught_up
from tests.conftest import run_attempt

pytestmark = [pytest.mark.browser]

PROBES = 120  # two events a readied probe: more than the log holds, in one transaction
# The parts of the page the live view keeps, compared as the browser holds them (the totals and
# the timeline move with the clock: their state is compared below through what they count).
PARTS = ("#run-header", "#run-checkpoints", "#task-table", "#agent-lanes", "#event-log-rows", "#event-log-more")
PARTS += ("#run-result", "#run-artifacts", "#dag-graph", ".state-counts", "#filter-type")

# Each part's HTML, its forms' CSRF tokens aside (masked afresh for every page).
READ_PARTS = """parts => parts.map(sel => {
    const el = document.querySelector(sel);
    return el ? el.outerHTML.replace(/ class=""/g, "").replace(/(name="csrfmiddlewaretoken" value=")[^"]*/g, "$1") : null;
})"""
READ_NODES = "() => window.glassboxRun.cy.nodes('.task').map(n => [n.id(), n.data('state'), n.data('label')])"


def test_a_fan_out_burst_leaves_the_page_a_reload_shows(
    logged_in_page, demo_agents, priced_limit, make_plan, no_broker, screenshot
):
    page = logged_in_page
    probes = [f"probe_{i:03}" for i in range(PROBES)]
    tasks = {"scope": ("researcher", [])}
    tasks |= {key: ("researcher", ["scope"]) for key in probes}
    tasks["synthesis"] = ("writer", probes)
    run = runs.launch(
        make_plan(tasks, goal="A fan-out watched live"), cap=4, budget_usd="100", require_plan_approval=True
    )
    open_run(page, run)

    # The approval's frame puts the page in step with the live feed.
    runs.decide(Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN), approve=True)
    wait_caught_up(page, run)
    before = Run.objects.get(pk=run.pk).last_event_seq

    # The scope task succeeds: every probe is readied in one transaction.
    run_attempt(Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED).pk)
    latest = Run.objects.get(pk=run.pk).last_event_seq
    assert latest - before > run_log.LOG_LIMIT
    wait_caught_up(page, run)
    marker = page.locator("#live-seq")
    expect(marker).to_have_attribute("data-full", "0")  # a live batch, not a full refresh
    expect(page.locator("#event-log-rows .event-row")).to_have_count(run_log.PAGE_LOG_ROWS)
    page.wait_for_timeout(300)  # htmx settles the swapped parts (their classes) after a moment
    live_parts = page.evaluate(READ_PARTS, list(PARTS))
    live_nodes = page.evaluate(READ_NODES)
    assert_not_reloaded(page)
    screenshot(page, "after-the-burst")

    reloaded = page.context.new_page()
    open_run(reloaded, run)
    reloaded.wait_for_timeout(300)
    for selector, live, fresh in zip(PARTS, live_parts, reloaded.evaluate(READ_PARTS, list(PARTS)), strict=True):
        assert live == fresh, f"{selector} differs from a reload"
    assert live_nodes == reloaded.evaluate(READ_NODES)
    for stat in (2, 3, 4):  # cost, concurrency, tokens (elapsed and ETA tick with the clock)
        expect(page.locator("#run-totals .stat-value").nth(stat)).to_have_text(
            reloaded.locator("#run-totals .stat-value").nth(stat).inner_text()
        )
    reloaded.close()
