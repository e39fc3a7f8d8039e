"""Fixtures of the read-model tests: a launched run (nothing enqueued) and helpers that fake progress."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from orchestrator import events
from orchestrator.engine import dispatch, runs
from orchestrator.models import Attempt, Run, TaskRun

State = TaskRun.State


@pytest.fixture
def launched(make_plan, demo_agents, priced_limit, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)

    def launch(tasks: dict, **kwargs) -> Run:
        kwargs.setdefault("budget_usd", "5")
        return runs.launch(make_plan(tasks), **kwargs)

    return launch


@pytest.fixture
def run_with_events(launched):
    run = launched({"scope": ("researcher", []), "a": ("researcher", ["scope"]), "w": ("writer", ["a"])})
    task = run.tasks.get(subtask__key="scope")
    with transaction.atomic():
        events.record("task.progress", run=run, task=task, payload={"progress": 10, "output_tokens": 5})
    return run


def start(task: TaskRun, *, ago_s: float = 1.0, worker: str = "w:1") -> Attempt:
    started = timezone.now() - timedelta(seconds=ago_s)
    attempt = Attempt.objects.filter(task_run=task).order_by("-number").first() or Attempt.objects.create(
        task_run=task, number=1
    )
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, worker=worker, started_at=started)
    TaskRun.objects.filter(pk=task.pk).update(state=State.RUNNING, started_at=started, attempt_count=attempt.number)
    return attempt


def succeed(task: TaskRun, *, took_s: float = 1.0, tokens: tuple[int, int] = (100, 50), cost: str = "0.001") -> None:
    end = timezone.now()
    begin = end - timedelta(seconds=took_s)
    attempt = Attempt.objects.filter(task_run=task).order_by("-number").first() or Attempt.objects.create(
        task_run=task, number=1
    )
    Attempt.objects.filter(pk=attempt.pk).update(
        state=Attempt.State.SUCCEEDED,
        started_at=begin,
        finished_at=end,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )
    TaskRun.objects.filter(pk=task.pk).update(
        state=State.SUCCEEDED,
        started_at=begin,
        finished_at=end,
        progress=100,
        output="ok",
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cost_usd=Decimal(cost),
        attempt_count=attempt.number,
    )
