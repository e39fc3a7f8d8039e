"""Crash recovery and timers: the periodic tick (DESIGN §3, Crash recovery).

- A running attempt whose lease expired (its worker was killed or stalled) is marked lost and
  its task is retried as a new attempt; whatever the lost attempt says later is discarded.
- A queued attempt that no worker claimed in time is handed to the broker again (the Redis
  broker loses a task whose worker dies; a process can die between commit and enqueue).
- Runs with ready work whose backoff or rate-limit wait has passed are advanced.

`tick()` runs from a q2 Schedule (the safety net every minute) and from a ticker thread in every
worker process (every second, see orchestrator.engine.ticker), so recovery takes seconds, not minutes.
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator import events
from orchestrator.engine import admission, dispatch, scheduler, tool_approvals
from orchestrator.engine.retries import schedule_retry_or_fail
from orchestrator.engine.settlement import settle
from orchestrator.models import Attempt, Run, TaskRun
from orchestrator.providers.base import Usage

log = logging.getLogger(__name__)
State = TaskRun.State


def reap_expired() -> int:
    """Declare running attempts with an expired lease lost, and retry their tasks."""
    now = timezone.now()
    expired = list(
        TaskRun.objects.filter(state=State.RUNNING, lease_expires_at__lt=now).values_list(
            "pk", "run_id", "attempt_count"
        )
    )
    reaped = 0
    for task_id, run_id, number in expired:
        with events.atomic():
            run = scheduler.lock_run(run_id)
            task = (
                TaskRun.objects.select_related("subtask", "agent")
                .filter(pk=task_id, state=State.RUNNING, attempt_count=number, lease_expires_at__lt=now)
                .first()
            )
            if task is None:
                continue  # it heartbeated or finished meanwhile
            attempt = Attempt.objects.get(task_run=task, number=number)
            message = f"lease expired: worker {attempt.worker or task.lease_owner} stopped responding"
            # The usage its host last saved is what it is known to have used: it is kept and counted.
            saved = Usage(
                attempt.input_tokens, attempt.output_tokens, attempt.cache_read_tokens, attempt.cache_creation_tokens
            )
            settle(attempt.pk, saved, admission.provider_limit(task.agent), run_id=run.pk, task_id=task.pk)
            Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.LOST, finished_at=now, error=message)
            events.record(
                "attempt.lost",
                run=run,
                task=task,
                message=f"attempt {number} lost: {message}",
                payload={"attempt": number, "worker": attempt.worker},
            )
            # Its calls awaiting approval will never run: no question is left open for nobody.
            tool_approvals.close_open([task.pk], f"attempt {number} lost: {message}")
            schedule_retry_or_fail(run, task, message, retryable=True, own_fault=True, retry_after=0)
            reaped += 1
    return reaped


def requeue_stale() -> int:
    """Hand queued attempts that nobody claimed back to the broker (claiming stays exactly-once)."""
    now = timezone.now()
    stale = list(
        TaskRun.objects.filter(state=State.QUEUED, lease_expires_at__lt=now).values_list(
            "pk", "run_id", "attempt_count"
        )
    )
    for task_id, run_id, number in stale:
        with events.atomic():
            run = scheduler.lock_run(run_id)
            updated = TaskRun.objects.filter(
                pk=task_id, state=State.QUEUED, attempt_count=number, lease_expires_at__lt=now
            ).update(lease_expires_at=now + timedelta(seconds=settings.GLASSBOX_QUEUED_GRACE_S))
            if not updated:
                continue
            attempt = Attempt.objects.get(task_run_id=task_id, number=number)
            task = TaskRun.objects.get(pk=task_id)
            events.record(
                "attempt.requeued",
                run=run,
                task=task,
                message=f"attempt {number} was not picked up in {settings.GLASSBOX_QUEUED_GRACE_S} s: handed to the broker again",
                payload={"attempt": number},
            )
            transaction.on_commit(functools.partial(dispatch.enqueue_attempt, attempt.pk))
    return len(stale)


def runs_with_due_work() -> list[int]:
    now = timezone.now()
    return list(
        TaskRun.objects.filter(state__in=TaskRun.ADMISSIBLE, run__status=Run.Status.RUNNING)
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .order_by()
        .values_list("run_id", flat=True)
        .distinct()
    )


def tick() -> dict[str, int]:
    """One pass of crash recovery and timers. Safe to run in many processes at once."""
    reaped = reap_expired()
    requeued = requeue_stale()
    advanced = 0
    due = set(runs_with_due_work())
    if reaped:  # a task that failed for good may finish its run or skip its downstream
        due |= set(
            Run.objects.filter(status=Run.Status.RUNNING, tasks__state=State.FAILED).values_list("pk", flat=True)
        )
    for run_id in sorted(due):
        scheduler.advance(run_id)
        advanced += 1
    return {"reaped": reaped, "requeued": requeued, "advanced": advanced}
