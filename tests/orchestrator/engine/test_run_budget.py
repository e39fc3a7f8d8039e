"""A run's budget after launch (engine/run_budget.py): a person changes it, on the audit log, and
a retry the budget cannot cover is refused before anything moves."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from orchestrator.engine import run_budget, runs
from orchestrator.models import Event, Run
from tests.orchestrator.engine.steps import finish, states

pytestmark = pytest.mark.django_db


def stopped_over_budget(make_plan) -> Run:
    """A run of a then b whose budget, once a cost what it cost, leaves b less than its worst case:
    it stops over budget, b cancelled ("run over budget")."""
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}), budget_usd="1")
    b = run.tasks.get(subtask__key="b")
    Run.objects.filter(pk=run.pk).update(cost_usd=Decimal("1") - run_budget.worst_case_cost(b) / 2, reserved_usd=0)
    finish(run, "a")
    run.refresh_from_db()
    assert run.status == Run.Status.OVER_BUDGET and states(run) == {"a": "succeeded", "b": "cancelled"}
    return run


def test_the_over_budget_stop_points_to_the_control_that_raises_the_budget(demo_agents, make_plan, priced_limit):
    """It said "raise the budget and retry" while no page, API call or command could raise it."""
    run = stopped_over_budget(make_plan)
    assert run.summary.startswith("stopped: the budget of $1.00 does not cover the next task (spent $0.99")
    assert run.summary.endswith("; raise the budget on the run's page, then retry a cancelled task")


def test_a_retry_the_budget_cannot_cover_is_refused_up_front_with_the_numbers(demo_agents, make_plan, priced_limit):
    """A retry said "b will run again", reopened the run, cancelled b again in the same second and
    ended the run once more, the time between counted in its Elapsed."""
    run = stopped_over_budget(make_plan)
    b = run.tasks.get(subtask__key="b")
    assert run_budget.worst_case_cost(b) == Decimal("0.016176")  # its prompt's bound and 1,024 tokens out
    ended_at, seq = run.finished_at, Event.objects.filter(run=run).count()
    with pytest.raises(runs.ActionError) as refused:
        runs.retry_task(b)
    assert str(refused.value) == (
        f"task b may cost up to $0.0162 and run {run.pk} has $0.0081 of its budget of $1.00 left ($0.9919 spent): "
        "raise the budget to at least $1.01 first"
    )
    run.refresh_from_db()
    assert (run.status, run.finished_at, Event.objects.filter(run=run).count()) == ("over_budget", ended_at, seq)
    assert states(run)["b"] == "cancelled"


def test_raising_the_budget_is_recorded_with_who_and_from_what_to_what_then_a_retry_goes_on(
    demo_agents, make_plan, priced_limit, personas
):
    run = stopped_over_budget(make_plan)
    b = run.tasks.get(subtask__key="b")
    with pytest.raises(runs.ActionError) as refused:
        runs.retry_task(b)
    advised = re.search(r"at least \$([\d.]+) first$", str(refused.value)).group(1)

    runs.change_budget(run, advised, user=personas["launcher"])
    event = Event.objects.get(run=run, type="run.budget_changed")
    assert (event.actor_kind, event.actor_name) == ("user", "launcher")
    assert event.message == f"budget changed from $1.00 to ${advised} by launcher"
    assert event.payload == {"from_usd": "1.0000", "to_usd": advised}
    run.refresh_from_db()
    assert run.budget_usd == Decimal(advised) and run.status == "over_budget"  # stopped until a retry
    assert run_budget.changed(run) == (
        f"Run {run.pk}'s budget is now ${advised}. It stays stopped until you retry a cancelled task."
    )

    runs.retry_task(b)
    run.refresh_from_db()
    assert run.status == "running" and states(run)["b"] == "queued"


def test_a_retry_in_a_run_stopped_over_budget_brings_back_the_work_the_stop_cancelled(
    demo_agents, make_plan, priced_limit
):
    """Retrying one task went on with it alone: the tasks the stop cancelled stayed cancelled and
    the run ended again once it finished."""
    run = runs.launch(
        make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("researcher", ["b"])}), budget_usd="1"
    )
    b = run.tasks.get(subtask__key="b")
    Run.objects.filter(pk=run.pk).update(cost_usd=Decimal("1") - run_budget.worst_case_cost(b) / 2, reserved_usd=0)
    finish(run, "a")
    assert states(run) == {"a": "succeeded", "b": "cancelled", "c": "cancelled"}
    runs.change_budget(run, "2")
    runs.retry_task(b)
    assert states(run) == {"a": "succeeded", "b": "queued", "c": "pending"}
    assert Event.objects.get(run=run, type="task.reset").message == "waits again: b retried"


def test_the_command_line_is_named_when_it_changes_a_budget(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1")
    runs.change_budget(run, "2.5", actor_name="cli:alice")
    event = Event.objects.get(run=run, type="run.budget_changed")
    assert (event.actor_kind, event.actor_name, event.message) == (
        "system",
        "cli:alice",
        "budget changed from $1.00 to $2.50 by alice from the command line",
    )


@pytest.mark.parametrize(
    ("amount", "said"),
    [
        ("abc", "budget must be an amount in USD such as 0.50, got 'abc'"),
        ("0", "budget must be from $0.0001 to $99,999,999.9999, got $0.00"),
        ("0.123456", "budget must have at most 4 decimal places, got $0.123456"),
        ("1", "run {pk}'s budget is already $1.00"),
    ],
)
def test_a_budget_the_launch_would_refuse_is_refused_with_its_words(demo_agents, make_plan, amount, said):
    run = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1")
    with pytest.raises(runs.ActionError) as refused:
        runs.change_budget(run, amount)
    assert str(refused.value) == said.format(pk=run.pk)
    assert not Event.objects.filter(run=run, type="run.budget_changed").exists()


def test_a_budget_below_what_the_run_spent_and_holds_is_refused(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1")
    Run.objects.filter(pk=run.pk).update(cost_usd=Decimal("0.30"), reserved_usd=Decimal("0.20"))
    with pytest.raises(runs.ActionError) as refused:
        runs.change_budget(run, "0.45")
    assert (
        str(refused.value)
        == f"budget $0.45 is below the $0.5000 run {run.pk} has spent and holds for its running tasks"
    )
    assert runs.change_budget(run, "0.50").budget_usd == Decimal("0.50")


def test_an_ended_run_keeps_its_budget(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1")
    runs.cancel(run)
    with pytest.raises(runs.ActionError) as refused:
        runs.change_budget(run, "2")
    assert str(refused.value) == f"run {run.pk} already ended (cancelled): its budget can no longer be changed"
