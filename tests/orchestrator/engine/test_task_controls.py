"""A person's retry or skip of a task (engine/task_controls.py)."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import TaskRun


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (TaskRun.State.SUCCEEDED, "has succeeded"),
        (TaskRun.State.WAITING_GATE, "needs approval"),
        (TaskRun.State.AWAITING_REVIEW, "is in review"),
        (TaskRun.State.RUNNING, "is running"),
    ],
)
def test_a_refused_retry_or_rerun_says_what_the_task_is_in_its_badges_words(make_agent, make_plan, state, said):
    """A refusal read "task start is succeeded: only …" and "is waiting gate": the state's code
    after "is". It says what the task is as its badge does."""
    from orchestrator.engine import reruns

    make_agent("researcher")
    run = runs.launch(make_plan({"start": ("researcher", [])}))
    run.tasks.update(state=state)
    with pytest.raises(runs.ActionError) as refused:
        runs.retry_task(run.tasks.get())
    assert str(refused.value) == f"task start {said}: only a failed, cancelled or skipped task can be retried"
    if state != TaskRun.State.SUCCEEDED:
        with pytest.raises(runs.ActionError, match=f"^task start {said}: only a task that has finished "):
            reruns.rerun_from(run.tasks.get())
