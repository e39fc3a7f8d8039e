"""Checkpoints closed without a decision (engine/undecided.py): a cancelled run, a skipped task or
an ended attempt closes its open questions as `closed`, says why and records `checkpoint.closed`;
none of them reads as a rejection."""

from __future__ import annotations

import pytest
from django.db import transaction

from orchestrator.engine import runs, scheduler, tool_approvals
from orchestrator.models import Checkpoint, Event, Run, TaskRun

pytestmark = pytest.mark.django_db


def tool_checkpoint(run: Run, key: str = "a") -> Checkpoint:
    """A call of workspace:write_file by `key`'s agent awaiting approval."""
    task = run.tasks.get(subtask__key=key)
    details = {"agent": "researcher", "server": "workspace", "tool": "write_file", "arguments": {}}
    return Checkpoint.objects.create(
        run=run, task_run=task, kind=Checkpoint.Kind.TOOL, call_id="toolu_1", details=details
    )


def closed_events(checkpoint: Checkpoint) -> list[Event]:
    return [e for e in Event.objects.filter(type="checkpoint.closed") if e.payload["checkpoint"] == checkpoint.pk]


def assert_closed(checkpoint: Checkpoint, why: str) -> None:
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.comment, checkpoint.decided_by) == ("closed", why, None)
    assert checkpoint.decided_at is not None
    assert checkpoint.outcome == f"closed without a decision: {why}"
    [event] = closed_events(checkpoint)
    assert event.payload["reason"] == why and event.run_id == checkpoint.run_id
    assert event.task_run_id == checkpoint.task_run_id
    assert "closed without a decision" in event.message
    assert not Event.objects.filter(type="checkpoint.rejected").exists()


def test_cancelling_the_run_closes_a_waiting_tool_call_without_a_decision(demo_agents, make_plan, personas):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    checkpoint = tool_checkpoint(run)
    runs.cancel(run, user=personas["launcher"])
    assert_closed(checkpoint, "the run was cancelled")


def test_skipping_the_task_closes_its_waiting_tool_call_without_a_decision(demo_agents, make_plan, personas):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", [])}))
    checkpoint = tool_checkpoint(run)
    runs.skip_task(run.tasks.get(subtask__key="a"), user=personas["launcher"])
    assert_closed(checkpoint, "the task was skipped by launcher")
    assert run.tasks.get(subtask__key="a").state == TaskRun.State.SKIPPED


def test_a_skip_with_a_reason_gives_it(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    checkpoint = tool_checkpoint(run)
    runs.skip_task(run.tasks.get(subtask__key="a"), reason="done by hand")
    assert_closed(checkpoint, "the task was skipped: done by hand")


def test_an_attempt_that_ends_while_waiting_closes_its_call(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    checkpoint = tool_checkpoint(run)
    assert tool_approvals.close(checkpoint.pk, "the attempt ended while waiting (shutdown)")
    assert_closed(checkpoint, "the attempt ended while waiting (shutdown)")
    assert not tool_approvals.close(checkpoint.pk, "again")  # once
    assert len(closed_events(checkpoint)) == 1


def test_the_reaper_closes_the_calls_of_a_lost_attempt(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    checkpoint = tool_checkpoint(run)
    with transaction.atomic():
        assert tool_approvals.close_open([checkpoint.task_run_id], "attempt 1 lost: lease expired") == 1
    assert_closed(checkpoint, "attempt 1 lost: lease expired")


def test_cancelling_the_run_closes_its_gates_and_reviews(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("writer", [])})
    run = runs.launch(plan)
    gate = Checkpoint.objects.get(run=run, kind="before")
    runs.cancel(run)
    assert_closed(gate, "the run was cancelled")


def test_cancelling_a_run_whose_plan_awaits_review_closes_the_review(demo_agents, make_plan, personas):
    run = runs.launch(
        make_plan({"a": ("researcher", [])}), launched_by=personas["launcher"], require_plan_approval=True
    )
    review = Checkpoint.objects.get(run=run, kind="plan")
    runs.cancel(run, user=personas["launcher"])
    assert_closed(review, "the run was cancelled")


def test_a_run_over_budget_closes_its_gates(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [], {"gate": "before"})}))
    with transaction.atomic():
        scheduler.stop_over_budget(scheduler.lock_run(run.pk))
    assert_closed(Checkpoint.objects.get(run=run, kind="before"), "the run went over its budget")
