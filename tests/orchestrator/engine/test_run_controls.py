"""Pausing, resuming and cancelling a run (engine/run_controls.py): who did it, on the audit log."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import Event
from tests.orchestrator.engine.steps import finish, states

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(demo_agents, make_plan):
    return runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}))


def actors(run, *types: str) -> dict[str, tuple[str, str]]:
    return {e.type: (e.actor_kind, e.actor_name) for e in Event.objects.filter(run=run, type__in=types)}


def test_a_cancel_names_the_person_who_cancelled_on_the_runs_end_as_on_its_tasks(run, personas):
    """The audit log gave "system" as the actor of run.cancelled (its message "cancelled by
    launcher"), while the tasks' task.cancelled beside it named the person."""
    runs.cancel(run, user=personas["launcher"])
    assert actors(run, "run.cancelled", "task.cancelled") == {
        "run.cancelled": ("user", "launcher"),
        "task.cancelled": ("user", "launcher"),
    }
    assert Event.objects.get(run=run, type="run.cancelled").actor_user == personas["launcher"]


def test_a_cancel_from_the_command_line_names_its_operating_system_user(run):
    runs.cancel(run, actor_name="cli:alice")
    ended = Event.objects.get(run=run, type="run.cancelled")
    assert (ended.actor_kind, ended.actor_name, ended.message) == (
        "system",
        "cli:alice",
        "cancelled by alice from the command line",
    )


def test_a_pause_and_a_resume_name_who_did_them(run, personas):
    runs.pause(run, user=personas["launcher"])
    runs.resume(run, actor_name="cli:alice")
    assert actors(run, "run.paused", "run.resumed") == {
        "run.paused": ("user", "launcher"),
        "run.resumed": ("system", "cli:alice"),
    }


@pytest.mark.django_db
def test_pause_stops_admission_and_resume_restarts_it(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan)
    runs.pause(run)
    finish(run, "a")
    assert states(run)["b"] == "ready"
    with pytest.raises(runs.ActionError, match="cannot be paused"):
        runs.pause(run)
    runs.resume(run)
    assert states(run)["b"] == "queued"


@pytest.mark.django_db
def test_cancel_ends_the_run_and_every_unfinished_task(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan)
    runs.cancel(run)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert set(states(run).values()) == {"cancelled"}
    with pytest.raises(runs.ActionError, match="already ended"):
        runs.cancel(run)
