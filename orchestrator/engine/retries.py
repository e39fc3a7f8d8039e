"""What a failed or lost attempt leads to (DESIGN §3): the provider's back-off after a 429/529,
a retry after exponential backoff with jitter, or the task failed for good — and, under the
fail_fast policy, the run stopped.

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
# Bound on a start's attempts whatever their cause, so a provider that never recovers cannot loop forever.
MAX_ATTEMPTS = 50


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
    """After a failed or lost attempt: retry with backoff, or fail the task for good."""
    task.refresh_from_db()
    faults = task.fault_count + (1 if own_fault else 0)
    max_retries = task.subtask.effective_max_retries
    now = timezone.now()
    # The bound counts this start's attempts: a re-run (engine/reruns.py) starts the count again.
    if retryable and faults <= max_retries and task.attempt_count - task.earlier_attempts < MAX_ATTEMPTS:
        delay = backoff_seconds(faults, retry_after)
        not_before = now + timedelta(seconds=delay)
        wait = waits.RetryBackoff(not_before, message)
        transitions.move(
            task,
            State.READY,
            fault_count=faults,
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
    # Appended, not bracketed: a provider's message often ends in brackets of its own. The
    # attempts are this start's: those before a re-run are the row's own line (engine/reruns.py).
    attempts = task.attempt_count - task.earlier_attempts
    reason = message if not retryable else f"{message}, after {wording.counted(attempts, 'attempt')}"
    transitions.move(
        task,
        State.FAILED,
        fault_count=faults,
        lease_owner="",
        lease_expires_at=None,
        error=reason[:2000],
        finished_at=now,
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
