"""Open pages hear of a worker gone silent: the ticker's check (DESIGN §3, Crash recovery).

A running task whose worker stopped renewing its lease says so (readmodels/silence.py: "no word
from worker vm:4121 since 10:30:52 UTC — retried when its lease runs out at 10:31:07 UTC if it
stays silent", or that it fails then when no retry is left), but a silent worker sends no events, and open pages redraw a task on its events.
So each tick (engine/reaper.py) records one `attempt.silent` event for a running attempt that
turned silent — once per silence: the lease it stopped at names it — and one `attempt.heard` when
its worker renews the lease again after that; a lease that runs out is the reaper's
`attempt.lost`. Those events redraw the task's row, its panel and its agent's lane, and the log
keeps them: a worker that stalled for a while is worth knowing of afterwards too.

Cheap while all is well: one indexed read of the running tasks whose lease ends soon (none, as a
rule) and one of the `attempt.silent` events of the last lease or so (none, as a rule).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator import events, wording
from orchestrator.engine import scheduler
from orchestrator.models import Event, TaskRun
from orchestrator.readmodels.silence import silence_of, silent_lease_bound

State = TaskRun.State
SILENT, HEARD = "attempt.silent", "attempt.heard"
# How far back a silence may still end in its worker being heard: its lease, and ticks to spare.
LOOK_BACK_S = 60.0


def announce(now: datetime | None = None) -> dict[str, int]:
    """Record the silences that began and ended since the last tick; how many of each."""
    now = now or timezone.now()
    return {"silent": announce_silent(now), "heard": announce_heard(now)}


def announce_silent(now: datetime) -> int:
    """An `attempt.silent` event for each running attempt that turned silent and has none yet."""
    candidates = _silent_tasks(now, TaskRun.objects.all())
    if not candidates:
        return 0
    by_run: dict[int, list[int]] = defaultdict(list)
    for task in candidates:
        by_run[task.run_id].append(task.pk)
    recorded = 0
    for run_id, task_ids in by_run.items():
        with events.atomic():
            run = scheduler.lock_run(run_id)  # one check at a time: each silence is said once
            tasks = _silent_tasks(now, TaskRun.objects.filter(pk__in=task_ids))
            said = _said(SILENT, [task.pk for task in tasks], now)
            for task in tasks:
                silence = silence_of(
                    task.state,
                    task.lease_owner,
                    task.lease_expires_at,
                    now,
                    lost_before=task.lost_count,
                    attempts=task.attempt_count - task.earlier_attempts,
                )
                if silence is None or (task.pk, task.attempt_count, _moment(silence.lease_expires_at)) in said:
                    continue
                events.record(
                    SILENT,
                    run=run,
                    task=task,
                    message=f"attempt {task.attempt_count}: {silence.text}",
                    payload={
                        "attempt": task.attempt_count,
                        "worker": task.lease_owner,
                        "lease_expires_at": _moment(silence.lease_expires_at),
                        "heard_at": _moment(silence.heard_at),
                    },
                )
                recorded += 1
    return recorded


def announce_heard(now: datetime) -> int:
    """An `attempt.heard` event for each silence said whose worker has renewed its lease since."""
    silences = Event.objects.filter(type=SILENT, created_at__gte=now - _look_back()).values_list(
        "run_id", "task_run_id", "payload"
    )
    open_by_run: dict[int, list[tuple[int, dict]]] = defaultdict(list)
    for run_id, task_id, payload in silences:
        open_by_run[run_id].append((task_id, payload))
    recorded = 0
    for run_id, said in open_by_run.items():
        with events.atomic():
            run = scheduler.lock_run(run_id)
            tasks = {
                task.pk: task
                for task in TaskRun.objects.filter(pk__in=[task_id for task_id, _ in said], state=State.RUNNING)
            }
            heard = _said(HEARD, list(tasks), now)
            for task_id, payload in said:
                task = tasks.get(task_id)
                if task is None or task.attempt_count != payload["attempt"] or task.lease_expires_at is None:
                    continue  # it ended, or the reaper took it: its own event said so
                stopped_at = datetime.fromisoformat(payload["lease_expires_at"])
                if task.lease_expires_at <= stopped_at:
                    continue  # still silent
                if (task_id, payload["attempt"], payload["lease_expires_at"]) in heard:
                    continue
                silent_s = (task.lease_expires_at - stopped_at).total_seconds()
                events.record(
                    HEARD,
                    run=run,
                    task=task,
                    message=(
                        f"attempt {payload['attempt']}: worker {task.lease_owner} was heard again "
                        f"after {wording.duration(silent_s)} without a word"
                    ),
                    payload={**payload, "silent_s": round(silent_s, 3)},
                )
                recorded += 1
    return recorded


def _silent_tasks(now: datetime, tasks) -> list[TaskRun]:
    """Those of `tasks` running with a silent worker whose lease has not run out yet (the reaper's)."""
    return list(
        tasks.filter(state=State.RUNNING, lease_expires_at__gt=now, lease_expires_at__lte=silent_lease_bound(now))
    )


def _said(event_type: str, task_ids: list[int], now: datetime) -> set[tuple[int, int, str]]:
    """(task, attempt, the lease its worker stopped at) of the silences these events said already."""
    if not task_ids:
        return set()
    rows = Event.objects.filter(
        type=event_type, task_run_id__in=task_ids, created_at__gte=now - _look_back()
    ).values_list("task_run_id", "payload")
    return {(task_id, payload.get("attempt"), payload.get("lease_expires_at")) for task_id, payload in rows}


def _look_back() -> timedelta:
    return timedelta(seconds=settings.GLASSBOX_LEASE_S + LOOK_BACK_S)


def _moment(value: datetime) -> str:
    return value.isoformat()
