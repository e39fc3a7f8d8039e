"""Checkpoint decisions (engine/decisions.py): separation of duties, the plan version reviewed, their words."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Event, Run, TaskRun
from tests.orchestrator.engine.steps import states

State = TaskRun.State


@pytest.fixture
def own_plan_checkpoint(personas, make_agent, make_plan):
    """A run the launcher launched, waiting for its plan's approval; the launcher is also an Approver."""
    make_agent("researcher")
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    run = runs.launch(make_plan({"a": ("researcher", [])}), launched_by=launcher, require_plan_approval=True)
    return run, run.checkpoints.get(kind=Checkpoint.Kind.PLAN)


def test_approving_ones_own_plan_is_refused_and_audited(personas, own_plan_checkpoint):
    run, checkpoint = own_plan_checkpoint
    with pytest.raises(runs.ActionError, match=f"separation of duties: launcher launched run {run.pk}"):
        runs.decide(checkpoint, approve=True, user=personas["launcher"])
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.PENDING
    denial = Event.objects.get(type="access.denied")
    assert (denial.actor_user, denial.run_id) == (personas["launcher"], run.pk)
    assert denial.payload == {"permission": "separation_of_duties", "action": f"APPROVE checkpoint {checkpoint.pk}"}


def test_rejecting_ones_own_plan_is_allowed_and_not_a_denial(personas, own_plan_checkpoint):
    _, checkpoint = own_plan_checkpoint
    runs.decide(checkpoint, approve=False, user=personas["launcher"], comment="wrong plan")
    checkpoint.refresh_from_db()
    assert checkpoint.status == Checkpoint.Status.REJECTED
    assert not Event.objects.filter(type="access.denied").exists()


def test_a_rejected_plans_run_is_cancelled_in_the_audit_log_by_who_rejected_it(personas, own_plan_checkpoint):
    """The run's end named "system" as its actor, though a person had rejected its plan."""
    run, checkpoint = own_plan_checkpoint
    runs.decide(checkpoint, approve=False, user=personas["approver"], comment="wrong goal")
    ended = Event.objects.get(run=run, type="run.cancelled")
    assert (ended.actor_kind, ended.actor_user, ended.actor_name) == ("user", personas["approver"], "approver")
    assert ended.message == "plan rejected: wrong goal"


# --- Approvals bound to the plan version reviewed -------------------------------------------------


@pytest.fixture
def pending_plan(personas, make_agent, make_plan):
    """A run launched by the launcher (also an Approver), waiting for another approver."""
    make_agent("researcher")
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan, launched_by=launcher, require_plan_approval=True)
    return run, run.checkpoints.get(kind=Checkpoint.Kind.PLAN)


def test_a_plan_checkpoint_records_the_version_of_the_plan_under_review(pending_plan):
    from orchestrator import plans

    run, checkpoint = pending_plan
    assert len(checkpoint.plan_version) == 12 and checkpoint.plan_version == plans.plan_version(run.plan)
    created = Event.objects.get(run=run, type="checkpoint.created")
    assert created.payload["plan_version"] == checkpoint.plan_version


def test_an_edit_after_the_approver_opened_the_plan_refuses_their_approval(personas, pending_plan):
    from orchestrator.engine import plan_edits

    run, checkpoint = pending_plan
    reviewed = checkpoint.plan_version  # what the approver's page showed
    plan_edits.edit_instructions(checkpoint, "a", "Do something else entirely.", user=personas["launcher"])
    checkpoint.refresh_from_db()
    edited = checkpoint.plan_version
    assert edited != reviewed
    edit = Event.objects.get(run=run, type="plan.subtask_edited")
    assert (edit.payload["version_before"], edit.payload["version"]) == (reviewed, edited)

    with pytest.raises(runs.ActionError) as refused:
        runs.decide(checkpoint, approve=True, user=personas["approver"], plan_version=reviewed)
    assert str(refused.value) == (
        f"the plan was edited after you opened it (you reviewed version {reviewed}, it is now version {edited}): "
        "review the changes, then approve again"
    )
    checkpoint.refresh_from_db()
    run.refresh_from_db()
    assert (checkpoint.status, run.status) == ("pending", "awaiting_approval")

    runs.decide(checkpoint, approve=True, user=personas["approver"], plan_version=edited)
    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.plan_version) == ("approved", edited)
    approved = Event.objects.get(run=run, type="checkpoint.approved")
    assert approved.payload["plan_version"] == edited
    assert f"(plan version {edited})" in approved.message


def test_removing_a_subtask_also_moves_the_version(personas, pending_plan):
    from orchestrator.engine import plan_edits

    _, checkpoint = pending_plan
    reviewed = checkpoint.plan_version
    plan_edits.remove_subtask(checkpoint, "b", user=personas["launcher"])
    with pytest.raises(runs.ActionError, match="the plan was edited after you opened it"):
        runs.decide(checkpoint, approve=True, user=personas["approver"], plan_version=reviewed)


def test_an_unchanged_version_approves_and_a_rejection_needs_none(personas, pending_plan):
    _, checkpoint = pending_plan
    runs.decide(checkpoint, approve=False, user=personas["approver"], comment="not now", plan_version="stale")
    checkpoint.refresh_from_db()
    assert checkpoint.status == "rejected"


def test_without_a_version_the_current_plan_is_approved_and_recorded(personas, pending_plan):
    from orchestrator.engine import plan_edits

    _, checkpoint = pending_plan
    plan_edits.edit_instructions(checkpoint, "a", "Edited.", user=personas["launcher"])
    checkpoint.refresh_from_db()
    runs.decide(checkpoint, approve=True, user=personas["approver"])  # the command line shows no plan
    decided = Checkpoint.objects.get(pk=checkpoint.pk)
    assert (decided.status, decided.plan_version) == ("approved", checkpoint.plan_version)


def test_a_gates_decision_and_its_closing_are_worded_as_the_pages_name_it(personas, make_agent, make_plan):
    """The event log said "Before checkpoint approved" and "After checkpoint 7 closed" where the
    rest of the page says gate and review."""
    make_agent("researcher")
    run = runs.launch(
        make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("researcher", [], {"gate": "before"})})
    )
    first, second = run.checkpoints.order_by("pk")
    runs.decide(first, approve=True, user=personas["approver"])
    runs.cancel(run)
    messages = list(Event.objects.filter(run=run, type__startswith="checkpoint.").values_list("type", "message"))
    assert ("checkpoint.approved", "Gate checkpoint approved") in [(t, m.split(":")[0]) for t, m in messages]
    closed = [m for t, m in messages if t == "checkpoint.closed"]
    assert closed and closed[0].startswith(f"Gate checkpoint {second.pk} closed without a decision")
    assert str(second).startswith(f"Gate checkpoint {second.pk} (")


def test_a_run_awaiting_its_plans_approval_starts_after_it_is_created(personas, pending_plan):
    run, checkpoint = pending_plan
    assert Run.objects.get(pk=run.pk).started_at is None
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    run = Run.objects.get(pk=run.pk)
    assert run.started_at is not None and run.started_at > run.created_at


@pytest.mark.django_db
def test_rejecting_a_gate_whose_task_no_longer_waits_there_skips_nothing(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.CANCELLED)  # as an older stop left it
    runs.decide(Checkpoint.objects.get(run=run), approve=False, comment="too late")
    assert states(run)["a"] == "cancelled"


@pytest.mark.django_db
def test_a_rejected_plan_cancels_every_task_including_one_a_person_skipped(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}), require_plan_approval=True)
    runs.skip_task(run.tasks.get(subtask__key="a"), reason="not needed")
    runs.decide(Checkpoint.objects.get(run=run, kind="plan"), approve=False, comment="wrong goal")
    assert set(states(run).values()) == {"cancelled"}
