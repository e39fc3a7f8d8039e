"""What a failed or lost attempt leads to (DESIGN §3): the provider's back-off after a 429/529,
a retry after exponential backoff with jitter, or the task failed for good — and, under the
fail_fast policy, the run stopped.

A failure spends the task's retries (`max_retries`) when it is the task's own; a lost attempt (its
worker killed, or silent past its lease) is not the task's fault and spends none, as a graceful
hand-back spends none: it is bounded apart (GLASSBOX_MAX_LOST_ATTEMPTS,
`TaskRun.no_retry_after_loss`), so a task that kills its worker every time still ends.

Called inside the transaction that records the attempt's end (attempt_ends.fail) or declares it
lost (reaper), with the run's row locked.
"""

from __future__ import annotations

import random
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator import events, wording
from orchestrator.engine import adaptive, scheduler, transitions, waits
from orchestrator.models import ProviderLimit, Run, TaskRun
from orchestrator.providers.base import ProviderError

State = TaskRun.State


def backoff_seconds(fault_count: int, retry_after: float | None) -> float:
    """Exponential backoff with full jitter, never sooner than the provider's Retry-After."""
    base = settings.GLASSBOX_RETRY_BASE_S * (2 ** max(0, fault_count - 1))
    delay = random.uniform(0, min(settings.GLASSBOX_RETRY_MAX_S, base))
    return max(delay, retry_after or 0.0)


def back_off_provider(run: Run, task: TaskRun, error: ProviderError) -> None:
    """A 429/529 is not the task's fault: the whole provider waits, every run on it.

    Only the first refusal of a burst halves the effective cap: answers to requests that were
    already in flight when the provider started refusing do not halve it again. A 429 from a
    provider whose request rate is unknown teaches one (adaptive.learn_request_rate).
    """
    wait = error.retry_after_s or 1.0
    now = timezone.now()
    until = now + timedelta(seconds=wait)
    ProviderLimit.objects.get_or_create(provider=task.agent.provider, model=task.agent.model)
    limit = ProviderLimit.objects.select_for_update(no_key=True).get(
        provider=task.agent.provider, model=task.agent.model
    )
    fresh = not limit.backoff_until or limit.backoff_until <= now
    if not limit.backoff_until or limit.backoff_until < until:
        ProviderLimit.objects.filter(pk=limit.pk).update(backoff_until=until)
    if error.status_code == 429:  # a rate limit (529 is an overload: it says nothing of the rate)
        adaptive.learn_request_rate(limit, run=run, task=task)
    events.record(
        "provider.backoff",
        run=run,
        task=task,
        message=f"{limit} answered {error.status_code or 'rate limited'}: backing off {wait:.1f} s",
        payload={"provider": limit.provider, "model": limit.model, "retry_after_s": wait, "status": error.status_code},
    )
    if fresh:
        adaptive.decrease(limit, run=run, task=task)


def schedule_retry_or_fail(
    run: Run, task: TaskRun, message: str, *, retryable: bool, own_fault: bool, retry_after: float | None
) -> str:
    """After a failed attempt: retry with backoff, or fail the task for good."""
    task.refresh_from_db()
    faults = task.fault_count + (1 if own_fault else 0)
    max_retries = task.subtask.effective_max_retries
    # The bound counts this start's attempts: a re-run (engine/reruns.py) starts the count again.
    if retryable and faults <= max_retries and _attempts(task) < TaskRun.MAX_ATTEMPTS:
        return _retry(run, task, message, backoff_seconds(faults, retry_after), fault_count=faults)
    return _fail(
        run, task, message if not retryable else f"{message}, after {_attempts_said(task)}", fault_count=faults
    )


def retry_lost_or_fail(run: Run, task: TaskRun, message: str) -> str:
    """After an attempt lost with its worker (engine/reaper.py): retried with backoff, spending no
    retry, unless the rule says no retry is left (`TaskRun.no_retry_after_loss`: its start lost
    GLASSBOX_MAX_LOST_ATTEMPTS attempts, or made MAX_ATTEMPTS); then the task fails and says why."""
    task.refresh_from_db()
    lost = task.lost_count + 1
    if no_retry := TaskRun.no_retry_after_loss(task.lost_count, _attempts(task)):
        reason = f"{message}, after {_attempts_said(task)} (no retry left: {no_retry.why}, {no_retry.bound})"
        return _fail(run, task, reason, lost_count=lost)
    return _retry(run, task, message, backoff_seconds(lost, None), lost_count=lost)


def _attempts(task: TaskRun) -> int:
    """This start's attempts: those before a re-run are the row's own line (engine/reruns.py)."""
    return task.attempt_count - task.earlier_attempts


def _attempts_said(task: TaskRun) -> str:
    return wording.counted(_attempts(task), "attempt")


def _retry(run: Run, task: TaskRun, message: str, delay: float, **counts: int) -> str:
    """The task ready again once `delay` seconds have passed; `counts`: its fault or lost count."""
    now = timezone.now()
    not_before = now + timedelta(seconds=delay)
    wait = waits.RetryBackoff(not_before, message)
    transitions.move(
        task,
        State.READY,
        **counts,
        not_before=not_before,
        lease_owner="",
        lease_expires_at=None,
        error=message[:2000],
        ready_at=now,
        wait_reason=wait.message,
        wait_code=wait.code,
    )
    events.record(
        "task.retry_scheduled",
        run=run,
        task=task,
        message=f"attempt {task.attempt_count} failed ({message[:200]}); retry in {delay:.1f} s",
        payload={"attempt": task.attempt_count, "error": message[:500], "delay_s": round(delay, 3)},
    )
    return "retry scheduled"


def _fail(run: Run, task: TaskRun, reason: str, **counts: int) -> str:
    """The task failed for good with `reason` (appended to, not bracketed: a provider's message
    often ends in brackets of its own); under fail_fast its run stops."""
    transitions.move(
        task,
        State.FAILED,
        **counts,
        lease_owner="",
        lease_expires_at=None,
        error=reason[:2000],
        finished_at=timezone.now(),
    )
    events.record("task.failed", run=run, task=task, message=reason[:500], payload={"error": reason[:2000]})
    if run.failure_policy == Run.FailurePolicy.FAIL_FAST:
        stop_fail_fast(run, task)
    return "failed"


def stop_fail_fast(run: Run, failed: TaskRun) -> None:
    """Policy fail_fast: the first failure stops the run; running attempts stop at their next beat."""
    now = timezone.now()
    transitions.move_where(
        run.tasks.exclude(state__in=TaskRun.TERMINAL),
        State.CANCELLED,
        error=f"run stopped: {failed.subtask.key} failed (fail_fast)",
        finished_at=now,
        lease_owner="",
        lease_expires_at=None,
    )
    scheduler.close_pending_checkpoints(run, f"the run stopped: {failed.subtask.key} failed (fail_fast)")
    scheduler.end_run(
        run, Run.Status.FAILED, f"stopped at the first failure (fail_fast): {failed.subtask.key}: {failed.error}"
    )
