"""Editing a run's plan while its approval checkpoint is pending."""

from __future__ import annotations

import pytest

from orchestrator.engine import dispatch, plan_edits, runs
from orchestrator.engine.runs import ActionError
from orchestrator.models import Checkpoint, Dependency, Event, Plan, Run, Subtask, TaskRun
from orchestrator.plans import MAX_INSTRUCTIONS_CHARS

pytestmark = pytest.mark.django_db


@pytest.fixture
def plan(make_plan, demo_agents, priced_limit):
    return make_plan(
        {
            "scope": ("researcher", [], {"instructions": "Frame it."}),
            "a": ("researcher", ["scope"], {"instructions": "Research A."}),
            "b": ("researcher", ["scope"]),
            "write": ("writer", ["a", "b"]),
        }
    )


@pytest.fixture
def awaiting(plan, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)

    def launch() -> tuple[Run, Checkpoint]:
        run = runs.launch(plan, budget_usd="5", require_plan_approval=True)
        return run, run.checkpoints.get(kind=Checkpoint.Kind.PLAN)

    return launch


def keys(run: Run) -> list[str]:
    return list(run.tasks.order_by("subtask__position").values_list("subtask__key", flat=True))


def edges(run: Run) -> set[tuple[str, str]]:
    run.refresh_from_db()
    return set(Dependency.objects.filter(plan=run.plan).values_list("upstream__key", "downstream__key"))


def test_edit_copies_the_plan_for_this_run_and_writes_events(awaiting, plan, admin_user):
    run, cp = awaiting()
    subtask = plan_edits.edit_instructions(cp, "a", "Research A, deeply.\r\nCite sources.", admin_user)
    run.refresh_from_db()
    assert run.plan_id != plan.pk
    assert subtask.plan_id == run.plan_id
    assert subtask.instructions == "Research A, deeply.\nCite sources."
    assert plan.subtasks.get(key="a").instructions == "Research A."  # the original is untouched
    # The copy is complete: same subtasks, same edges, and the run's tasks point at it.
    assert list(run.plan.subtasks.order_by("position").values_list("key", flat=True)) == ["scope", "a", "b", "write"]
    assert edges(run) == {("scope", "a"), ("scope", "b"), ("a", "write"), ("b", "write")}
    assert set(run.tasks.values_list("subtask__plan_id", flat=True)) == {run.plan_id}
    copied = Event.objects.get(run=run, type="plan.copied")
    assert copied.payload == {"from_plan": plan.pk, "plan": run.plan_id}
    assert run.plan.copied_from == plan and list(plan.copies.all()) == [run.plan]  # each names the other
    edited = Event.objects.get(run=run, type="plan.subtask_edited")
    assert edited.actor_user == admin_user
    assert edited.payload["before"] == "Research A." and edited.payload["key"] == "a"
    assert edited.payload["task"] == run.tasks.get(subtask__key="a").pk


def test_later_edits_change_the_run_s_own_copy(awaiting):
    run, cp = awaiting()
    plan_edits.edit_instructions(cp, "a", "First.")
    run.refresh_from_db()
    copy = run.plan_id
    plan_edits.edit_instructions(cp, "b", "Second.")
    run.refresh_from_db()
    assert run.plan_id == copy
    assert Event.objects.filter(run=run, type="plan.copied").count() == 1
    assert Plan.objects.count() == 2


def test_two_runs_of_one_plan_are_edited_apart(awaiting, plan):
    first, cp1 = awaiting()
    second, cp2 = awaiting()
    plan_edits.edit_instructions(cp1, "a", "Only for the first run.")
    second.refresh_from_db()
    assert second.plan_id == plan.pk
    assert second.plan.subtasks.get(key="a").instructions == "Research A."


def test_an_unchanged_text_is_no_edit(awaiting, plan):
    run, cp = awaiting()
    plan_edits.edit_instructions(cp, "a", "  Research A.  ")
    run.refresh_from_db()
    assert run.plan_id == plan.pk
    assert not Event.objects.filter(run=run, type__startswith="plan.").exists()


def test_edit_refuses_bad_input_and_saves_nothing(awaiting, plan):
    run, cp = awaiting()
    with pytest.raises(ActionError, match="at most"):
        plan_edits.edit_instructions(cp, "a", "x" * (MAX_INSTRUCTIONS_CHARS + 1))
    with pytest.raises(ActionError, match="no subtask 'nope'"):
        plan_edits.edit_instructions(cp, "nope", "text")
    run.refresh_from_db()
    assert run.plan_id == plan.pk
    assert Plan.objects.count() == 1


def test_edits_only_while_the_plan_checkpoint_is_pending(awaiting):
    run, cp = awaiting()
    runs.decide(cp, approve=True)
    with pytest.raises(ActionError, match="already approved"):
        plan_edits.edit_instructions(cp, "a", "Too late.")
    with pytest.raises(ActionError, match="already approved"):
        plan_edits.remove_subtask(cp, "a")


def test_only_the_plan_checkpoint_allows_edits(plan, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    run = runs.launch(plan, budget_usd="5")
    gate = Checkpoint.objects.create(run=run, task_run=run.tasks.get(subtask__key="write"), kind=Checkpoint.Kind.BEFORE)
    with pytest.raises(ActionError, match="only the plan's approval checkpoint"):
        plan_edits.edit_instructions(gate, "write", "Nope.")


def test_a_cancelled_run_cannot_be_edited(awaiting):
    run, cp = awaiting()
    runs.cancel(run)
    with pytest.raises(ActionError):
        plan_edits.remove_subtask(cp, "a")


def test_remove_reconnects_nothing(awaiting, plan, admin_user):
    run, cp = awaiting()
    downstream = plan_edits.remove_subtask(cp, "a", admin_user)
    assert downstream == ["write"]
    assert keys(run) == ["scope", "b", "write"]
    assert edges(run) == {("scope", "b"), ("b", "write")}  # write lost a; nothing was added
    assert plan.subtasks.filter(key="a").exists()  # the original plan keeps it
    event = Event.objects.get(run=run, type="plan.subtask_removed")
    assert event.actor_user == admin_user
    assert (
        event.payload["key"] == "a"
        and event.payload["depends_on"] == ["scope"]
        and event.payload["downstream"] == ["write"]
    )


def test_remove_recomputes_the_critical_path_ranks(awaiting):
    run, cp = awaiting()
    before = dict(run.tasks.values_list("subtask__key", "rank"))
    plan_edits.remove_subtask(cp, "write")
    after = dict(run.tasks.values_list("subtask__key", "rank"))
    assert after["a"] < before["a"]
    assert after["scope"] < before["scope"]


def test_remove_estimates_the_run_s_cost_again_without_the_removed_subtask(awaiting):
    """The page sets what the run cost against its estimate: the removed task's share was in it."""
    run, cp = awaiting()
    launched_with = run.estimate_usd
    plan_edits.remove_subtask(cp, "write")
    run.refresh_from_db()
    assert run.estimate_usd == runs.estimate_cost(run.plan) < launched_with


def test_a_subtask_edited_first_can_still_be_removed(awaiting):
    run, cp = awaiting()
    plan_edits.edit_instructions(cp, "b", "Edited.")
    plan_edits.remove_subtask(cp, "b")
    assert keys(run) == ["scope", "a", "write"]


def test_the_last_subtask_cannot_be_removed(make_plan, demo_agents, priced_limit):
    run = runs.launch(make_plan({"only": ("writer", [])}), budget_usd="5", require_plan_approval=True)
    cp = run.checkpoints.get()
    with pytest.raises(ActionError, match="only subtask"):
        plan_edits.remove_subtask(cp, "only")
    assert TaskRun.objects.filter(run=run).count() == 1


def test_after_approval_the_edited_plan_runs(awaiting):
    run, cp = awaiting()
    plan_edits.remove_subtask(cp, "scope")
    runs.decide(cp, approve=True)
    states = dict(run.tasks.values_list("subtask__key", "state"))
    # a and b lost their only upstream: they start at once; write still waits for both.
    assert states["a"] in (TaskRun.State.QUEUED, TaskRun.State.READY)
    assert states["b"] in (TaskRun.State.QUEUED, TaskRun.State.READY)
    assert states["write"] == TaskRun.State.PENDING
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert Subtask.objects.filter(plan=run.plan).count() == 3
