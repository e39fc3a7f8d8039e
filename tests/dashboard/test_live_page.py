"""The page a live frame leaves is the page a reload shows.

Each test renders the run page, changes the run through the engine, renders the frame a viewer
at the page's event gets, applies it to the page as htmx and run/oob.js do (tests/live_dom.py)
and compares the result with the page rendered afresh.

A fan-out's burst: the root's success readies every probe in one transaction, hundreds of events
at once (bench/live_load.py watches the same shape with 50 viewers). A viewer in step gets one
live batch with what those events changed: the rows of the tasks they concern, the parts they
touch and the log's newest page, never the whole table or hundreds of log rows. A viewer that
resumes as far behind still gets the full refresh. The run's start and end change tasks with no
event of their own, and their frames bring the table.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard import fragments, frames
from orchestrator.engine import runs
from orchestrator.models import Attempt, Checkpoint, Event, Run
from orchestrator.readmodels import log as run_log
from tests.conftest import run_attempt
from tests.live_dom import Element, apply_frame, canonical, parse

from .test_consumers import oob_ids

PROBES = 120  # each readied probe writes two events: the burst is more than the log holds
VIEWER = fragments.Viewer(can_control=False, can_decide=False)  # the `viewer` persona's class
# Parts the browser changes on its own: the frame's marker, the socket's state, the log filter's
# list of types (log.js adds the types that arrive live: checked apart, `listed_types`).
BROWSER_KEPT = ("live-seq", "live-status", "filter-type")


@pytest.fixture
def fan_out(transactional_db, make_plan, demo_agents, priced_limit, no_broker) -> Run:
    probes = [f"probe_{i:03}" for i in range(PROBES)]
    tasks = {"scope": ("researcher", [])}
    tasks |= {key: ("researcher", ["scope"]) for key in probes}
    tasks["synthesis"] = ("writer", probes)
    return runs.launch(make_plan(tasks, goal="Fan-out burst"), cap=4, budget_usd="100")


@pytest.fixture
def awaiting_approval(transactional_db, make_plan, demo_agents, priced_limit, no_broker) -> Run:
    plan = make_plan({"scope": ("researcher", []), "a": ("researcher", ["scope"]), "b": ("writer", ["a"])})
    return runs.launch(plan, budget_usd="5", require_plan_approval=True)


@pytest.fixture
def page_after(client, personas, monkeypatch):
    """`page_after(run, change, in_step=True)`: the page rendered before `change()`, with the frame
    of what the change wrote applied, and the page a reload then shows (their `#run-live`), and
    the frame's batch. Every render shares one `now` (the totals show times relative to it)."""
    client.force_login(personas["viewer"])
    moment = timezone.now() + timedelta(hours=1)
    real_now = timezone.now

    def rendered(run: Run) -> Element:
        monkeypatch.setattr(timezone, "now", lambda: moment)
        try:
            response = client.get(f"/runs/{run.pk}/")
        finally:
            monkeypatch.setattr(timezone, "now", real_now)
        assert response.status_code == 200
        return parse(response.content.decode()).find("run-live")

    def page_after(run: Run, change, *, in_step: bool = True):
        seen = last_seq(run)
        page = rendered(run)
        change()
        monkeypatch.setattr(timezone, "now", lambda: moment)
        try:
            batch = frames.render_batch(run.pk, seen, VIEWER, in_step=in_step)
        finally:
            monkeypatch.setattr(timezone, "now", real_now)
        apply_frame(page, batch.html)
        return page, rendered(run), batch

    return page_after


def last_seq(run: Run) -> int:
    return Run.objects.get(pk=run.pk).last_event_seq


def run_the_root(run: Run) -> None:
    """The scope task runs and succeeds here, as a worker would: its success readies every probe."""
    run_attempt(Attempt.objects.get(task_run__run=run, state=Attempt.State.QUEUED).pk)
    assert run.tasks.filter(state__in=["ready", "queued"]).count() == PROBES


def shown(live_root: Element, seq: int) -> str:
    """The page's live part as the browser holds it after event `seq` (live.js keeps data-seq),
    without the parts the browser keeps itself and the live protocol's marks (data-upsert)."""
    live_root.attrs["data-seq"] = str(seq)
    for element in live_root.elements():
        element.attrs.pop("data-upsert", None)
    for element_id in BROWSER_KEPT:
        element = live_root.find(element_id)
        element.attrs.clear()
        element.children.clear()
    return canonical(live_root)


def types_so_far(run: Run) -> set[str]:
    """The event types the run has written: what the log's filter lists on its page now."""
    return set(Event.objects.filter(run=run).values_list("type", flat=True))


def listed_types(live_root: Element) -> set[str]:
    """The event types the log's filter lists."""
    types = next(e for e in live_root.find("filter-type").elements() if e.attrs.get("label") == "Types")
    return {option.attrs["value"] for option in types.elements() if option.tag == "option"}


def assert_same_page(page: Element, reloaded: Element, batch: frames.Batch, listed_before: set[str]) -> None:
    # The filter lists the types a reload lists: those it had, and those of the rows and of the
    # frame's data-types (its rows may be only the log's newest page), which log.js adds.
    arrived = {e.attrs["data-type"] for e in page.find("event-log-rows").elements() if "data-type" in e.attrs}
    arrived |= set(filter(None, page.find("live-seq").attrs.get("data-types", "").split(",")))
    assert listed_types(reloaded) == listed_before | arrived
    assert shown(page, batch.to_seq) == shown(reloaded, batch.to_seq)


# --- A fan-out's burst ----------------------------------------------------------------------------


def test_a_burst_is_one_live_batch_of_what_changed(fan_out):
    seen = last_seq(fan_out)
    run_the_root(fan_out)
    latest = last_seq(fan_out)
    assert latest - seen > run_log.LOG_LIMIT

    batch = frames.render_batch(fan_out.pk, seen, VIEWER, in_step=True)
    assert not batch.full and 'data-full="0"' in batch.html
    touched = set(fan_out.tasks.exclude(subtask__key="synthesis").values_list("pk", flat=True))
    rows = {int(pk) for pk in re.findall(r'<div id="task-(\d+)"[^>]*hx-swap-oob="true"', batch.html)}
    assert rows == touched  # the synthesis did not change: its row is not sent
    assert "task-table" not in oob_ids(batch.html)
    assert {"run-totals", "agent-lanes", "event-log-rows", "event-log-more"} <= oob_ids(batch.html)
    # The log's newest page replaces its rows, "Show older events" from there: not a row per event.
    log_rows = [int(seq) for seq in re.findall(r'<div id="event-(\d+)"', batch.html)]
    assert log_rows == list(range(latest, latest - run_log.PAGE_LOG_ROWS, -1))
    assert 'data-mode="replace" hx-swap-oob="innerHTML"' in batch.html
    assert f"?before={log_rows[-1]}" in batch.html

    # A viewer that resumes this far behind gets the full refresh instead, the log's page too.
    full = frames.render_batch(fan_out.pk, seen, VIEWER)
    assert full.full and "task-table" in oob_ids(full.html)
    assert len(re.findall(r'<div id="event-\d+"', full.html)) == run_log.PAGE_LOG_ROWS


@pytest.mark.parametrize("in_step", [True, False], ids=["live batch", "full refresh"])
def test_the_page_after_a_burst_is_the_page_a_reload_shows(fan_out, page_after, in_step):
    before = types_so_far(fan_out)
    page, reloaded, batch = page_after(fan_out, lambda: run_the_root(fan_out), in_step=in_step)
    assert batch.full is not in_step and batch.to_seq - batch.from_seq >= run_log.LOG_LIMIT
    assert_same_page(page, reloaded, batch, before)


# --- Run-wide changes with no event per task ---------------------------------------------------------


def test_the_plans_approval_clears_every_tasks_wait_on_the_page(awaiting_approval, page_after):
    run = awaiting_approval
    before = types_so_far(run)
    checkpoint = Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN)
    page, reloaded, batch = page_after(run, lambda: runs.decide(checkpoint, approve=True))
    assert "waits for the plan" not in canonical(reloaded.find("task-table"))
    assert_same_page(page, reloaded, batch, before)


def test_the_plans_rejection_cancels_every_task_on_the_page(awaiting_approval, page_after):
    run = awaiting_approval
    before = types_so_far(run)
    checkpoint = Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN)
    page, reloaded, batch = page_after(run, lambda: runs.decide(checkpoint, approve=False, comment="Too broad"))
    assert canonical(reloaded.find("task-table")).count('data-state="cancelled"') == 3
    assert_same_page(page, reloaded, batch, before)


def test_a_cancelled_runs_lanes_claim_no_slot_another_run_holds(
    transactional_db, make_plan, demo_agents, priced_limit, no_broker, page_after
):
    cancelled = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="5")
    runs.launch(make_plan({"x": ("researcher", []), "y": ("researcher", [])}, goal="Another run"), budget_usd="5")
    before = types_so_far(cancelled)
    page, reloaded, batch = page_after(cancelled, lambda: runs.cancel(cancelled))
    lanes = canonical(reloaded.find("agent-lanes"))
    assert "0/4" in lanes and "in other runs" not in lanes  # the other run's 2 queued tasks are its own
    assert "is-used" not in lanes and "is-elsewhere" not in lanes
    assert "This run has ended: it holds none of" in lanes
    assert_same_page(page, reloaded, batch, before)  # the live frame says what a reload says


def test_the_frame_of_a_runs_last_moving_task_says_the_rest_waits_for_the_decision(
    transactional_db, make_plan, demo_agents, priced_limit, no_broker, page_after
):
    run = runs.launch(make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("writer", [])}), budget_usd="5")
    before = types_so_far(run)
    b = Attempt.objects.get(task_run__run=run, task_run__subtask__key="b")
    page, reloaded, batch = page_after(run, lambda: run_attempt(b.pk))
    eta = reloaded.find("run-totals")
    assert "after the decision" in canonical(eta) and 'data-eta-at=""' in canonical(eta)
    assert_same_page(page, reloaded, batch, before)  # the live frame stops the countdown as a reload does


def test_a_frame_that_changes_checkpoints_brings_the_header_count_to_those_who_decide(awaiting_approval):
    decider = fragments.Viewer(can_control=False, can_decide=True)
    frame = frames.render_batch(awaiting_approval.pk, 0, decider)
    assert frame is not None and "approvals-count" in oob_ids(frame.html)
    assert re.search(r'<span id="approvals-count"[^>]*>1</span>', frame.html)
    # The header of a viewer who may not decide has no count: its frames carry none.
    viewer_frame = frames.render_batch(awaiting_approval.pk, 0, VIEWER)
    assert viewer_frame is not None and "approvals-count" not in oob_ids(viewer_frame.html)
