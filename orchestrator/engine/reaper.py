"""Crash recovery and timers: the periodic tick (DESIGN §3, Crash recovery).

- A running attempt whose lease expired (its worker was killed or stalled) is marked lost and
  its task is retried as a new attempt, spending none of its retries (a worker's death is not the
  task's fault), up to GLASSBOX_MAX_LOST_ATTEMPTS lost attempts (engine/retries.py
  `retry_lost_or_fail`); whatever the lost attempt says later is discarded.
- A running attempt whose task no longer runs it (cancelled or skipped while it ran) ends when its
  host next beats; if its worker was killed first, nothing ever ends it, and the run page said
  "1 attempt still stopping" for good. Once its worker has been silent for a lease it is declared
  lost, its saved usage counted (`reap_orphans`); its task is not touched.
- A queued attempt that no worker claimed in time is handed to the broker again (the Redis
  broker loses a task whose worker dies; a process can die between commit and enqueue).
- Runs with ready work whose backoff or rate-limit wait has passed are advanced.
- A running attempt whose worker went silent (before its lease runs out), or was heard again,
  is said so on open pages (orchestrator.engine.silences).

`tick()` runs from a q2 Schedule (the safety net every minute) and from a ticker thread in every
worker process (every second, see orchestrator.engine.ticker), so recovery takes seconds, not minutes.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from orchestrator import events, sql
from orchestrator.engine import dispatch, scheduler, settlement, silences, tool_approvals
from orchestrator.engine.retries import retry_lost_or_fail
from orchestrator.models import Attempt, Checkpoint, Run, TaskRun
from orchestrator.providers.base import Usage
from orchestrator.readmodels import prices

log = logging.getLogger(__name__)
State = TaskRun.State
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")  # as Usage's


# Expired attempts of one run reaped in one transaction, at most this many: a worker killed under
# 50 attempts of a run had them reaped one transaction each, the run locked 50 times over, and
# its last retry started seconds after its first.
REAP_BATCH = 100


def reap_expired() -> int:
    """Declare running attempts with an expired lease lost, and retry their tasks."""
    return sum(len(outcomes) for outcomes in reap_by_run().values())


def reap_by_run() -> dict[int, list[str]]:
    """`reap_expired`, by run: each run's expired attempts in one transaction (`reap_run`, in
    batches of REAP_BATCH), and what each reaped task came to (see `reap_run`)."""
    now = timezone.now()
    expired: dict[int, list[tuple[int, int]]] = defaultdict(list)
    rows = TaskRun.objects.filter(state=State.RUNNING, lease_expires_at__lt=now).order_by("run_id", "pk")
    for task_id, run_id, number in rows.values_list("pk", "run_id", "attempt_count"):
        expired[run_id].append((task_id, number))
    outcomes: dict[int, list[str]] = {}
    for run_id, tasks in expired.items():
        for start in range(0, len(tasks), REAP_BATCH):
            outcomes.setdefault(run_id, []).extend(reap_run(run_id, tasks[start : start + REAP_BATCH], now))
    return {run_id: reaped for run_id, reaped in outcomes.items() if reaped}


class Lost(NamedTuple):
    """A running attempt found lost under its run's lock, and why."""

    attempt_id: int
    number: int
    worker: str
    usage: Usage
    task: TaskRun

    @property
    def message(self) -> str:
        return f"lease expired: worker {self.worker or self.task.lease_owner} stopped responding"


def reap_run(run_id: int, expired: list[tuple[int, int]], now: datetime) -> list[str]:
    """Declare lost the attempts (task id, attempt number) of run `run_id` whose lease expired
    before `now`, and retry their tasks, in one transaction holding the run's lock; what each
    reaped task came to ("retry scheduled", "failed", or "cancelled" when another's failure
    stopped the run under fail_fast).

    Exactly once: under the run's lock the attempts are locked (before their tasks, as in every
    transaction that changes both), and a task is reaped only while it is still running that
    attempt with its lease expired — one that heartbeated, ended or was reaped by another
    process meanwhile is left alone.
    """
    with events.atomic():
        run = scheduler.lock_run(run_id)
        lost = _still_lost(expired, now)
        if not lost:
            return []
        # The usage its host last saved is what it is known to have used: it is kept and counted,
        # priced at the model its request used (its agent may have moved to another since).
        limits = prices.price_list()
        ran_with = _ran_with([a.attempt_id for a in lost])
        settled = settlement.settlements([(a.attempt_id, a.usage, limits.get(ran_with[a.attempt_id])) for a in lost])
        by_message: dict[str, list[settlement.Settlement]] = defaultdict(list)
        for a, s in zip(lost, settled, strict=True):
            by_message[a.message].append(s)
        for message, group in by_message.items():
            settlement.apply_settlements(group, run_id=run.pk, state=Attempt.State.LOST, finished_at=now, error=message)
        for a, s in zip(lost, settled, strict=True):
            if s.counts:
                sql.update(TaskRun, s.task_totals(), pk=a.task.pk)
            events.record(
                "attempt.lost",
                run=run,
                task=a.task,
                message=f"attempt {a.number} lost: {a.message}",
                payload={"attempt": a.number, "worker": a.worker},
            )
        # Their calls awaiting approval will never run: no question is left open for nobody.
        asking = set(
            Checkpoint.objects.filter(
                task_run_id__in=[a.task.pk for a in lost], kind=Checkpoint.Kind.TOOL, status=Checkpoint.Status.PENDING
            ).values_list("task_run_id", flat=True)
        )
        for a in lost:
            if a.task.pk in asking:
                tool_approvals.close_open([a.task.pk], f"attempt {a.number} lost: {a.message}")
        return [
            "cancelled"
            if run.is_finished  # the failure of one before it stopped the run (fail_fast)
            else retry_lost_or_fail(run, a.task, a.message)
            for a in lost
        ]


def reap_orphans() -> int:
    """Declare lost the running attempts whose task no longer runs them (cancelled or skipped
    while they ran, see the module docstring) and whose worker has not beaten for a lease: a run's
    in one transaction under its lock, their saved usage settled on the attempt, its task and its
    run as a cancelled attempt's is. The task keeps its state. Returns how many were reaped."""
    silent_since = timezone.now() - timedelta(seconds=settings.GLASSBOX_LEASE_S)
    orphans = (
        Attempt.objects.filter(state=Attempt.State.RUNNING, heartbeat_at__lt=silent_since)
        .exclude(task_run__state=State.RUNNING, task_run__attempt_count=F("number"))
        .values_list("pk", "task_run__run_id")
    )
    by_run: dict[int, list[int]] = defaultdict(list)
    for attempt_id, run_id in orphans:
        by_run[run_id].append(attempt_id)
    return sum(_reap_orphans_of(run_id, ids, silent_since) for run_id, ids in sorted(by_run.items()))


def _reap_orphans_of(run_id: int, attempt_ids: list[int], silent_since: datetime) -> int:
    now = timezone.now()
    with events.atomic():
        run = scheduler.lock_run(run_id)
        names = ("pk", "task_run_id", "number", "worker", *USAGE_FIELDS)
        rows = sql.select(  # still running, still silent, under their lock: exactly once
            Attempt,
            names,
            order_by=("pk",),
            lock=True,
            pk__in=attempt_ids,
            state=Attempt.State.RUNNING,
            heartbeat_at__lt=silent_since,
        )
        if not rows:
            return 0
        tasks = TaskRun.objects.select_related("subtask").in_bulk([r[1] for r in rows])
        limits = prices.price_list()
        ran_with = _ran_with([r[0] for r in rows])
        settled = settlement.settlements([(r[0], Usage(*r[4:]), limits.get(ran_with[r[0]])) for r in rows])
        for row, s in zip(rows, settled, strict=True):
            task = tasks[row[1]]
            ended = task.get_state_display().lower()
            why = f"lease expired: worker {row[3]} stopped responding after its task was {ended}"
            settlement.apply_settlements([s], run_id=run.pk, state=Attempt.State.LOST, finished_at=now, error=why)
            if s.counts:
                sql.update(TaskRun, s.task_totals(), pk=task.pk)
            events.record(
                "attempt.lost",
                run=run,
                task=task,
                message=f"attempt {row[2]} lost: {why}",
                payload={"attempt": row[2], "worker": row[3]},
            )
    return len(rows)


def _ran_with(attempt_ids: list[int]) -> dict[int, tuple[str, str]]:
    """The provider and model each attempt ran with, as its request recorded them when it was
    claimed (readmodels/prices.py `ran_with`): what its tokens are priced at, as the attempt's
    other ends price them (`Claim.limit`, read at the claim), and whose per-minute budgets
    admission took its reservation from."""
    ran_with = prices.ran_with()
    rows = Attempt.objects.filter(pk__in=attempt_ids).values_list("pk", ran_with["provider"], ran_with["model"])
    return {pk: (provider, model) for pk, provider, model in rows}


def _still_lost(expired: list[tuple[int, int]], now: datetime) -> list[Lost]:
    """Those of the `expired` (task id, attempt number) still running that attempt with the
    lease expired before `now`, their attempts locked; in the order of their tasks."""
    names = ("pk", "task_run_id", "number", "worker", *USAGE_FIELDS)
    locked = sql.select(Attempt, names, order_by=("pk",), lock=True, match=(("task_run_id", "number"), expired))
    attempts = {(row[1], row[2]): row for row in locked}
    tasks = (
        TaskRun.objects.select_related("subtask", "agent")
        .filter(pk__in=[task_id for task_id, _ in expired], state=State.RUNNING, lease_expires_at__lt=now)
        .order_by("pk")
    )
    return [
        Lost(row[0], row[2], row[3], Usage(*row[4:]), task)
        for task in tasks
        if (row := attempts.get((task.pk, task.attempt_count))) is not None
    ]


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
    said = silences.announce()
    reaped = reap_by_run()
    orphans = reap_orphans()
    requeued = requeue_stale()
    advanced = 0
    due = set(runs_with_due_work())
    # A task that failed for good may finish its run or skip its downstream: its run takes a step,
    # one per run however many of its tasks were reaped.
    due |= {run_id for run_id, outcomes in reaped.items() if "failed" in outcomes}
    for run_id in sorted(due):
        scheduler.advance(run_id)
        advanced += 1
    reaped_count = sum(map(len, reaped.values()))
    return {"reaped": reaped_count, "orphans": orphans, "requeued": requeued, "advanced": advanced, **said}
