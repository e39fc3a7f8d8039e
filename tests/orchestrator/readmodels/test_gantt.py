"""The run page's timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from orchestrator.engine import runs, scheduler
from orchestrator.models import Attempt, Run, TaskRun
from orchestrator.readmodels.gantt import (
    EndedSpan,
    PausedSpan,
    assign_tracks,
    ended_spans,
    gantt,
    gantt_bar,
    paused_spans,
    started_attempts,
)

from .conftest import start


def test_assign_tracks_uses_the_fewest_tracks():
    intervals = [(0, 10), (5, 15), (10, 20), (12, None), (30, 40)]
    tracks = assign_tracks(intervals)
    assert tracks == [0, 1, 0, 2, 0]
    # An open interval (still running) keeps its track for good.
    assert assign_tracks([(0, None), (5, 6), (7, 8)]) == [0, 1, 1]
    assert assign_tracks([]) == []


def test_gantt_puts_overlapping_attempts_on_separate_tracks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "w": ("writer", ["a", "b"])})
    a, b = run.tasks.get(subtask__key="a"), run.tasks.get(subtask__key="b")
    start(a, ago_s=5)
    start(b, ago_s=3)
    timeline = gantt(run)
    lanes = {lane.agent: lane for lane in timeline.lanes}
    assert [len(track) for track in lanes["researcher"].tracks] == [1, 1]
    assert lanes["writer"].tracks == [[]]
    bar = lanes["researcher"].tracks[0][0]
    assert bar.key == "a" and bar.end_ms is None and bar.worker == "w:1"
    assert timeline.bars == 2


def test_paused_spans_run_from_each_pause_to_its_resume_or_to_the_runs_end():
    t = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(10)]
    ms = [int(x.timestamp() * 1000) for x in t]
    changes = [("run.paused", t[1]), ("run.resumed", t[3]), ("run.paused", t[5])]
    assert paused_spans(changes, None) == [PausedSpan(ms[1], ms[3]), PausedSpan(ms[5], None)]  # still paused
    assert paused_spans(changes, t[8]) == [PausedSpan(ms[1], ms[3]), PausedSpan(ms[5], ms[8])]  # cancelled paused
    # A run reopened by a retry is resumed without a pause: no span.
    assert paused_spans([("run.resumed", t[2])], None) == []
    assert PausedSpan(ms[1], ms[3]).seconds == 2.0 and PausedSpan(ms[5], None).seconds is None


def test_a_pause_the_run_ended_in_ends_with_it_when_a_person_reopens_the_run():
    """Paused, its last running task ended the run; a retry later reopened it: the work after the
    reopening was drawn under a "paused" band that ran on to the run's second end."""
    t = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(0, 1000, 100)]
    ms = [int(x.timestamp() * 1000) for x in t]
    changes = [("run.paused", t[1]), ("run.succeeded", t[2]), ("run.reopened", t[8])]
    assert paused_spans(changes, t[9]) == [PausedSpan(ms[1], ms[2])]


def test_ended_spans_run_from_each_end_to_the_reopening_after_it_and_say_what_reopened_the_run():
    t = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in (0, 600, 610, 4210, 4300)]
    ms = [int(x.timestamp() * 1000) for x in t]
    changes = [
        ("run.failed", t[0], "0 of 1 tasks succeeded"),
        ("run.reopened", t[1], "run reopened by a retry of scope"),
        ("run.over_budget", t[2], "stopped: over budget"),
        ("run.reopened", t[3], "run reopened by a re-run from draft"),
        ("run.succeeded", t[4], "1 of 1 tasks succeeded"),  # its last end: the end of the timeline
    ]
    first, second = ended_spans(changes)
    assert first == EndedSpan(ms[0], ms[1], "failed", "a retry of scope")
    assert first.title == "Ended (failed) for 10 min 00 s, then reopened by a retry of scope"
    assert (first.label, second.label) == ("ended 10 min 00 s", "ended 1 h 00 min")
    assert second.title == "Ended (over budget) for 1 h 00 min, then reopened by a re-run from draft"
    assert ended_spans([("run.succeeded", t[0], "")]) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_broker")
def test_a_run_reopened_by_a_retry_ten_minutes_after_it_failed_shows_that_span_and_no_pause(
    make_agent, make_plan, stopped_clock
):
    from tests.conftest import fast_latency, run_here

    breaker = make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = run_here(runs.launch(make_plan({"a": ("breaker", [])})))
    assert gantt(run).ended == []  # ended, never reopened: the timeline ends there
    failed_at = int(run.finished_at.timestamp() * 1000)
    stopped_clock(600)
    breaker.provider_options = fast_latency(0.01)
    breaker.save()
    runs.retry_task(run.tasks.get())
    run.refresh_from_db()
    (ended,) = gantt(run).ended
    assert ended.title == "Ended (failed) for 10 min 00 s, then reopened by a retry of a"
    assert (ended.start_ms, ended.end_ms) == (failed_at, failed_at + 600_000)
    stopped_clock(5)
    run = run_here(run)
    timeline = gantt(run)
    assert run.status == Run.Status.SUCCEEDED and timeline.ended == [ended] and timeline.paused == []
    assert [bar.number for _, bar in timeline.lanes[0].bars] == [1, 2]


def test_the_timeline_shows_each_pause_as_it_happens(launched):
    run = launched(PLAN)
    assert gantt(run).paused == []
    runs.pause(run)
    (paused,) = gantt(run).paused
    assert paused.end_ms is None  # still paused: the span grows with the clock
    runs.resume(run)
    (resumed,) = gantt(run).paused
    assert resumed.start_ms == paused.start_ms and resumed.end_ms is not None
    runs.pause(run)
    runs.cancel(run)
    run.refresh_from_db()
    first, cancelled = gantt(run).paused
    assert first == resumed and cancelled.end_ms == int(run.finished_at.timestamp() * 1000)


PLAN = {"a": ("researcher", []), "b": ("writer", ["a"])}


def test_a_timeline_without_attempts_says_one_may_start_while_the_run_goes_on(launched):
    run = launched(PLAN)
    assert gantt(run).empty_text == "No attempt has started yet."


def test_a_rejected_plans_timeline_says_no_attempt_ran_because_of_the_rejection(launched, personas):
    run = launched(PLAN, require_plan_approval=True)
    assert gantt(run).empty_text == "No attempt has started yet."  # the plan may still be approved
    runs.decide(run.checkpoints.get(), approve=False, user=personas["approver"], comment="wrong agents")
    run.refresh_from_db()
    assert gantt(run).empty_text == "No attempt ran: the plan was rejected."


def test_a_run_cancelled_awaiting_its_plans_approval_says_it_was_cancelled_before_it_started(launched):
    run = launched(PLAN, require_plan_approval=True)
    runs.cancel(run)
    assert gantt(run).empty_text == "No attempt ran: the run was cancelled before it started."


def test_a_run_cancelled_before_its_first_attempt_started_says_so(launched):
    run = runs.cancel(launched(PLAN))  # started: its first attempt was queued, never claimed
    assert gantt(run).empty_text == "No attempt ran: the run was cancelled before any started."


def test_a_run_that_ended_with_attempts_says_nothing_of_attempts_that_did_not_run(launched):
    run = launched(PLAN)
    start(run.tasks.get(subtask__key="a"))
    assert gantt(run).empty_text == "No attempt has started yet."  # hidden beside the bar, as live
    assert gantt(runs.cancel(run)).empty_text == ""


@pytest.mark.parametrize(
    ("status", "why"),
    [
        (Run.Status.FAILED, "the run failed before any started"),
        (Run.Status.OVER_BUDGET, "the budget did not cover the first task"),
        (Run.Status.SUCCEEDED, "every task was skipped"),  # a succeeded task has a started attempt
    ],
)
def test_a_run_that_ended_otherwise_before_any_attempt_says_how(launched, status, why):
    run = launched(PLAN)
    with transaction.atomic():
        scheduler.end_run(run, status, "ended for the test")
    assert gantt(run).empty_text == f"No attempt ran: {why}."


def test_the_bars_read_one_statement_without_the_attempts_request_or_output(launched, django_assert_num_queries):
    """The live view reads the bars of the tasks a frame concerns at most frames: a real agent's
    request, output and prompt are large, and a bar shows none of them."""
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    big = "x" * 50_000
    for task in run.tasks.all():
        attempt = start(task)
        Attempt.objects.filter(pk=attempt.pk).update(request={"messages": [big]}, output=big)
        TaskRun.objects.filter(pk=task.pk).update(output=big)
    with django_assert_num_queries(1) as captured:
        bars = [gantt_bar(attempt) for attempt in started_attempts(run.pk)]
    assert sorted(bar.key for bar in bars) == ["a", "b"]
    (statement,) = (query["sql"] for query in captured.captured_queries)
    assert '"request"' not in statement and '"output"' not in statement and "system_prompt" not in statement
