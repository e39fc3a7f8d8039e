"""What the run page's Result says of each final task (readmodels/result.py)."""

from __future__ import annotations

import pytest

from orchestrator.models import Attempt, TaskRun
from orchestrator.readmodels.result import other_outputs, result_outputs

from .conftest import start, succeed

pytestmark = pytest.mark.django_db
State = TaskRun.State


def test_each_final_task_is_a_result_partial_text_nothing_or_not_yet(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "c": ("writer", []), "d": ("writer", [])})
    a, b, c, d = (run.tasks.get(subtask__key=key) for key in "abcd")
    succeed(a)
    for task, output, error in ((b, "Half of it", "simulated failure"), (c, "", "run stopped")):
        start(task)
        Attempt.objects.filter(task_run=task).update(state=Attempt.State.FAILED if task == b else "cancelled")
        TaskRun.objects.filter(pk=task.pk).update(
            state=State.FAILED if task == b else State.CANCELLED, output=output, error=error
        )
    outputs = result_outputs(run.tasks.all())
    assert outputs[a.pk].kind == "result"
    assert outputs[b.pk].kind == "partial"
    assert outputs[b.pk].partial.heading == "Partial output of attempt 1 (failed)"
    assert outputs[b.pk].partial.text == "Half of it"
    assert (outputs[c.pk].kind, outputs[c.pk].note) == ("none", "No output: run stopped")
    assert outputs[d.pk].kind == "pending"


def test_an_ended_run_lists_the_outputs_of_tasks_that_ran_and_counts_those_that_never_did(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", []), "c": ("writer", [])})
    a, b, c = (run.tasks.get(subtask__key=key) for key in "abc")
    succeed(a)
    TaskRun.objects.filter(pk=c.pk).update(earlier_attempts=1)  # it ran before a re-run reset it
    tasks = list(run.tasks.order_by("subtask__position"))
    assert other_outputs(False, tasks) == ([a, b, c], 0)  # a run going on lists them all
    assert other_outputs(True, tasks) == ([a, c], 1)
