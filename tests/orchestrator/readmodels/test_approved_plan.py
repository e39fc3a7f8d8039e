"""What the live view reads of a run's plan is kept once the plan's approval has fixed it."""

from __future__ import annotations

from orchestrator.engine import plan_edits
from orchestrator.models import Checkpoint, Run
from orchestrator.readmodels.eta import eta_plan
from orchestrator.readmodels.graph import final_task_ids


def test_a_running_runs_plan_is_read_once(launched, django_assert_num_queries):
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    b = run.tasks.get(subtask__key="b").pk
    assert eta_plan(run).graph.keys == ("a", "b")
    assert final_task_ids(run) == {b}
    again = Run.objects.get(pk=run.pk)
    with django_assert_num_queries(0):
        assert eta_plan(again).graph.keys == ("a", "b")
        assert final_task_ids(again) == {b}


def test_a_plan_awaiting_approval_is_read_afresh_after_an_edit(launched):
    run = launched(
        {"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["a"])}, require_plan_approval=True
    )
    c = run.tasks.get(subtask__key="c").pk
    assert set(eta_plan(run).estimates) == {"a", "b", "c"}
    assert c in final_task_ids(run)
    plan_edits.remove_subtask(Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN), "c")
    run = Run.objects.select_related("plan").get(pk=run.pk)
    assert set(eta_plan(run).estimates) == {"a", "b"}
    assert eta_plan(run).graph.keys == ("a", "b")
    assert final_task_ids(run) == {run.tasks.get(subtask__key="b").pk}
