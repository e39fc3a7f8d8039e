"""The run page's tasks: display states, labels and live token burn."""

from __future__ import annotations

from orchestrator.models import Attempt, TaskRun
from orchestrator.readmodels.tasks import WAITING, display_state, task_views

from .conftest import start

State = TaskRun.State


def test_display_state_separates_held_back_from_ready():
    assert display_state(State.READY, "") == State.READY
    assert display_state(State.READY, "run cap reached (4 running)") == WAITING
    assert display_state(State.THROTTLED, "provider sim limit") == State.THROTTLED
    assert display_state(State.QUEUED, "stale reason") == State.QUEUED


def test_task_views_carry_display_state_and_live_token_burn(launched):
    run = launched({"scope": ("researcher", []), "b": ("researcher", [])}, cap=1)
    scope, b = run.tasks.get(subtask__key="scope"), run.tasks.get(subtask__key="b")
    attempt = start(scope)
    TaskRun.objects.filter(pk=b.pk).update(state=State.READY, wait_reason="run cap reached (1 running)")
    Attempt.objects.filter(pk=attempt.pk).update(output_tokens=17)  # what the host last saved of its stream
    views = {v.key: v for v in task_views(run)}
    assert views["scope"].display_state == State.RUNNING
    assert views["scope"].live_output_tokens == 17
    assert views["scope"].tokens == 17

    # Once the attempt ends its tokens are the task's own, counted once.
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.SUCCEEDED)
    TaskRun.objects.filter(pk=scope.pk).update(state=State.SUCCEEDED, output_tokens=17)
    views = {v.key: v for v in task_views(run)}
    assert (views["scope"].live_output_tokens, views["scope"].tokens) == (0, 17)
    assert views["b"].display_state == WAITING
    assert views["b"].state_label == "held back"
