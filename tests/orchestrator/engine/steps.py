"""Helpers for tests that drive scheduling steps by hand."""

from __future__ import annotations

from django.utils import timezone

from orchestrator.engine import scheduler
from orchestrator.models import Run, TaskRun

State = TaskRun.State


def states(run: Run) -> dict[str, str]:
    return dict(run.tasks.values_list("subtask__key", "state"))


def finish(run: Run, key: str, state: str = State.SUCCEEDED, **fields) -> None:
    """Mark a task ended as a worker would, then let the scheduler react."""
    TaskRun.objects.filter(run=run, subtask__key=key).update(state=state, finished_at=timezone.now(), **fields)
    scheduler.advance(run.pk)
