"""Running one Attempt in a worker: claim, stream, heartbeat, record (DESIGN §3, Execution).

The worker claims its attempt with a conditional update (queued → running, with a lease),
streams the agent's answer while renewing the lease, enforces the task's timeout, and records
output, usage and cost in one transaction with the state change. Every write is conditional on
still holding the lease: once the reaper has declared an attempt lost, whatever that attempt
says later is kept on its Attempt row and never applied to the task.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from orchestrator import events
from orchestrator.engine import adaptive, context, feedback, scheduler, transitions, waits
from orchestrator.models import Attempt, Checkpoint, ProviderLimit, Run, Subtask, TaskRun
from orchestrator.providers.base import (
    AgentRequest,
    Completed,
    ProviderError,
    ProviderFeedback,
    TextDelta,
    Usage,
    get_provider,
)

log = logging.getLogger(__name__)

State = TaskRun.State
# Bound on attempts whatever their cause, so a provider that never recovers cannot loop forever.
MAX_ATTEMPTS = 50
# A worker stops running tasks it admitted itself after this long in one q2 task.
CHAIN_LIMIT_S = 300.0
# Streamed output reaches the database (and so the live view) at most this often per task.
FLUSH_INTERVAL_S = 0.3


class LeaseLost(Exception):
    """The task is no longer ours: the reaper declared the attempt lost, or a person acted."""


class AttemptTimedOut(Exception):
    pass


class RunCancelled(Exception):
    pass


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Claim:
    task: TaskRun
    attempt: Attempt
    worker: str


def owned(claim: Claim):
    """The task row as long as this attempt still holds its lease."""
    return TaskRun.objects.filter(
        pk=claim.task.pk, state=State.RUNNING, attempt_count=claim.attempt.number, lease_owner=claim.worker
    )


def claim_attempt(attempt_id: int, worker: str) -> Claim | None:
    """queued → running with a lease, or None if the attempt is not ours to run."""
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.GLASSBOX_LEASE_S)
    try:
        attempt = Attempt.objects.select_related("task_run").get(pk=attempt_id)
    except Attempt.DoesNotExist:
        return None
    with transaction.atomic():
        run = scheduler.lock_run(attempt.task_run.run_id)
        if run.status in (Run.Status.CANCELLED,) or run.is_finished:
            return None
        took = Attempt.objects.filter(pk=attempt_id, state=Attempt.State.QUEUED).update(
            state=Attempt.State.RUNNING, worker=worker, started_at=now, heartbeat_at=now
        )
        if not took:
            return None
        took = transitions.move_where(
            TaskRun.objects.filter(pk=attempt.task_run_id, attempt_count=attempt.number),
            State.RUNNING,
            from_states=[State.QUEUED],
            lease_owner=worker,
            lease_expires_at=lease_until,
            started_at=now,
            progress=0,
            output="",
        )
        if not took:
            transaction.set_rollback(True)
            return None
        task = TaskRun.objects.select_related("subtask", "agent", "run__plan").get(pk=attempt.task_run_id)
        attempt.refresh_from_db()
        events.record(
            "task.started",
            run=run,
            task=task,
            actor_name=f"agent:{task.agent.name}",
            payload={"attempt": attempt.number, "worker": worker},
        )
    return Claim(task, attempt, worker)


def build_request(task: TaskRun, attempt: Attempt) -> AgentRequest:
    agent = task.agent
    return AgentRequest(
        agent_name=agent.name,
        provider=agent.provider,
        model=agent.model,
        system_prompt=agent.system_prompt,
        prompt=context.build_prompt(task),
        max_tokens=agent.max_output_tokens,
        timeout_s=float(task.subtask.effective_timeout_s),
        seed=f"{task.run.plan_id}:{task.subtask.key}",
        attempt=attempt.number,
        options=dict(agent.provider_options or {}),
    )


def execute_attempt(attempt_id: int) -> str:
    """Entry point of one q2 task. Returns what happened, for the q2 result log.

    After finishing, the worker runs one of the tasks its own `advance` just admitted, instead of
    waiting for the broker to hand it out (DESIGN §3, dispatch latency): `advance(keep_one=True)`
    does not enqueue that attempt at all, so it costs no queue round trip and no second delivery.
    The chain stops after CHAIN_LIMIT_S so that a q2 task never nears q2's own timeout.
    """
    worker = worker_name()
    started = time.monotonic()
    outcome = "not claimed"
    next_id: int | None = attempt_id
    while next_id is not None:
        try:
            claim = claim_attempt(next_id, worker)
        except Exception:
            if next_id != attempt_id:  # kept for us and in no queue: let the broker have it
                scheduler.enqueue_attempt(next_id)
            raise
        if claim is None:
            if next_id == attempt_id:
                log.info("attempt %s is not ours to run (already claimed, finished or cancelled)", attempt_id)
            break
        outcome = run_claimed(claim)
        chaining = settings.GLASSBOX_CLAIM_NEXT and time.monotonic() - started < CHAIN_LIMIT_S
        next_id = scheduler.advance(claim.task.run_id, keep_one=chaining).kept
    return outcome


def run_claimed(claim: Claim) -> str:
    task, attempt = claim.task, claim.attempt
    request = build_request(task, attempt)
    deadline = time.monotonic() + request.timeout_s
    stream = None
    chunks: list[str] = []
    output_tokens = 0
    try:
        stream = get_provider(request.provider).stream(request)
        heartbeat = Heartbeat(claim)
        for item in stream:
            if isinstance(item, ProviderFeedback):
                feedback.apply(item)
                continue
            if isinstance(item, Completed):
                return complete(claim, "".join(chunks), item.usage)
            if isinstance(item, TextDelta):
                chunks.append(item.text)
                output_tokens = item.output_tokens
            if time.monotonic() > deadline:
                raise AttemptTimedOut(f"timed out after {request.timeout_s:.0f} s")
            heartbeat.beat("".join(chunks), output_tokens, request.max_tokens)
        raise ProviderError("the provider's stream ended without a final message")
    except LeaseLost:
        return discard_late(claim, Usage(output_tokens=output_tokens), "lease lost while running")
    except RunCancelled:
        return cancel_attempt(claim)
    except AttemptTimedOut as exc:
        return fail(claim, str(exc), attempt_state=Attempt.State.TIMED_OUT, usage=Usage(output_tokens=output_tokens))
    except ProviderError as exc:
        feedback.apply(exc.feedback)
        return fail(claim, str(exc), error=exc, usage=Usage(output_tokens=output_tokens))
    except Exception as exc:  # an agent's bug must not kill the worker: it is a failed attempt
        log.exception("attempt %s crashed", attempt.pk)
        return fail(claim, f"{type(exc).__name__}: {exc}", usage=Usage(output_tokens=output_tokens))
    finally:
        if stream is not None and hasattr(stream, "close"):
            stream.close()


class Heartbeat:
    """Renews the lease, flushes streamed output (throttled) and notices cancellation."""

    def __init__(self, claim: Claim):
        self.claim = claim
        self.last_flush = 0.0
        self.last_renew = time.monotonic()
        self.renew_every = settings.GLASSBOX_LEASE_S / 3

    def beat(self, output: str, output_tokens: int, max_tokens: int) -> None:
        now = time.monotonic()
        if now - self.last_flush < FLUSH_INTERVAL_S:
            return
        self.last_flush = now
        fields = {"output": output, "progress": min(99, int(100 * output_tokens / max(1, max_tokens)))}
        if now - self.last_renew >= self.renew_every:
            fields["lease_expires_at"] = timezone.now() + timedelta(seconds=settings.GLASSBOX_LEASE_S)
            self.last_renew = now
        with transaction.atomic():
            # The run's row lock first, as in every engine transaction: locking the task and attempt
            # rows first and the run's last (events.record) deadlocks with the reaper on PostgreSQL.
            status = scheduler.lock_run(self.claim.task.run_id).status
            if status == Run.Status.CANCELLED:
                raise RunCancelled()
            if not owned(self.claim).update(**fields):
                raise LeaseLost()
            if "lease_expires_at" in fields:
                Attempt.objects.filter(pk=self.claim.attempt.pk).update(heartbeat_at=timezone.now())
            events.record(
                "task.progress",
                run=self.claim.task.run_id,
                task=self.claim.task,
                actor_name=f"agent:{self.claim.task.agent.name}",
                payload={"progress": fields["progress"], "output_tokens": output_tokens, "chars": len(output)},
            )


def provider_limit(task: TaskRun) -> ProviderLimit | None:
    return ProviderLimit.objects.filter(provider=task.agent.provider, model=task.agent.model).first()


def settle_costs(run: Run, claim: Claim, usage: Usage) -> Decimal:
    """Replace the attempt's worst-case reservation by what it really cost."""
    limit = provider_limit(claim.task)
    cost = (
        limit.cost(
            usage.input_tokens,
            usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
        )
        if limit
        else Decimal("0")
    )
    reserved = Attempt.objects.filter(pk=claim.attempt.pk).values_list("reserved_usd", flat=True).get()
    Run.objects.filter(pk=run.pk).update(
        input_tokens=F("input_tokens") + usage.input_tokens,
        output_tokens=F("output_tokens") + usage.output_tokens,
        cost_usd=F("cost_usd") + cost,
        reserved_usd=F("reserved_usd") - reserved,
    )
    Attempt.objects.filter(pk=claim.attempt.pk).update(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
        cost_usd=cost,
        reserved_usd=0,
    )
    return cost


def complete(claim: Claim, output: str, usage: Usage) -> str:
    task = claim.task
    now = timezone.now()
    with transaction.atomic():
        run = scheduler.lock_run(task.run_id)
        if not owned(claim).exists():
            raise_late = True
        else:
            raise_late = False
            cost = settle_costs(run, claim, usage)
            review = task.subtask.gate == Subtask.Gate.AFTER
            transitions.move_where(
                owned(claim),
                State.AWAITING_REVIEW if review else State.SUCCEEDED,
                from_states=[State.RUNNING],
                output=output,
                summary=context.summarize(output),
                progress=100,
                input_tokens=F("input_tokens") + usage.input_tokens,
                output_tokens=F("output_tokens") + usage.output_tokens,
                cost_usd=F("cost_usd") + cost,
                lease_owner="",
                lease_expires_at=None,
                finished_at=None if review else now,
                error="",
            )
            Attempt.objects.filter(pk=claim.attempt.pk).update(state=Attempt.State.SUCCEEDED, finished_at=now)
            task.refresh_from_db()
            events.record(
                "task.succeeded" if not review else "task.output_ready",
                run=run,
                task=task,
                actor_name=f"agent:{task.agent.name}",
                payload={
                    "attempt": claim.attempt.number,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cost_usd": str(cost),
                },
            )
            if review:
                scheduler.open_gate(task, Checkpoint.Kind.AFTER)
            adaptive.increase(task.agent.provider, task.agent.model, run=run, task=task)
    if raise_late:
        return discard_late(claim, usage, "result arrived after the lease expired")
    return "succeeded"


def backoff_seconds(fault_count: int, retry_after: float | None) -> float:
    """Exponential backoff with full jitter, never sooner than the provider's Retry-After."""
    base = settings.GLASSBOX_RETRY_BASE_S * (2 ** max(0, fault_count - 1))
    delay = random.uniform(0, min(settings.GLASSBOX_RETRY_MAX_S, base))
    return max(delay, retry_after or 0.0)


def fail(
    claim: Claim,
    message: str,
    *,
    error: ProviderError | None = None,
    attempt_state: str = Attempt.State.FAILED,
    usage: Usage | None = None,
) -> str:
    task = claim.task
    with transaction.atomic():
        run = scheduler.lock_run(task.run_id)
        if not owned(claim).exists():
            late = True
        else:
            late = False
            settle_costs(run, claim, usage or Usage())
            Attempt.objects.filter(pk=claim.attempt.pk).update(
                state=attempt_state, finished_at=timezone.now(), error=message[:2000]
            )
            provider_wide = bool(error and error.provider_wide)
            if error is not None and error.provider_wide:
                back_off_provider(run, task, error)
            retryable = error.retryable if error else True
            outcome = schedule_retry_or_fail(
                run,
                task,
                message,
                retryable=retryable,
                own_fault=not provider_wide,
                retry_after=error.retry_after_s if error else None,
            )
    if late:
        return discard_late(claim, usage or Usage(), f"failure reported after the lease expired: {message}")
    return outcome


def back_off_provider(run: Run, task: TaskRun, error: ProviderError) -> None:
    """A 429/529 is not the task's fault: the whole provider waits, every run on it.

    Only the first refusal of a burst halves the effective cap: answers to requests that were
    already in flight when the provider started refusing do not halve it again.
    """
    wait = error.retry_after_s or 1.0
    now = timezone.now()
    until = now + timedelta(seconds=wait)
    ProviderLimit.objects.get_or_create(provider=task.agent.provider, model=task.agent.model)
    limit = ProviderLimit.objects.select_for_update().get(provider=task.agent.provider, model=task.agent.model)
    fresh = not limit.backoff_until or limit.backoff_until <= now
    if not limit.backoff_until or limit.backoff_until < until:
        ProviderLimit.objects.filter(pk=limit.pk).update(backoff_until=until)
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
    if retryable and faults <= max_retries and task.attempt_count < MAX_ATTEMPTS:
        delay = backoff_seconds(faults, retry_after)
        wait = waits.RetryBackoff(delay, message)
        transitions.move(
            task,
            State.READY,
            fault_count=faults,
            not_before=now + timedelta(seconds=delay),
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
    reason = message if not retryable else f"{message} (after {task.attempt_count} attempts)"
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
    scheduler.close_pending_checkpoints(run, f"run stopped: {failed.subtask.key} failed (fail_fast)")
    scheduler.end_run(
        run, Run.Status.FAILED, f"stopped at the first failure (fail_fast): {failed.subtask.key}: {failed.error}"
    )


def cancel_attempt(claim: Claim) -> str:
    with transaction.atomic():
        scheduler.lock_run(claim.task.run_id)
        Attempt.objects.filter(pk=claim.attempt.pk).update(
            state=Attempt.State.CANCELLED, finished_at=timezone.now(), error="run cancelled"
        )
        transitions.move_where(
            TaskRun.objects.filter(pk=claim.task.pk),
            State.CANCELLED,
            from_states=[State.RUNNING, State.CANCELLED],
            lease_owner="",
            lease_expires_at=None,
            finished_at=timezone.now(),
        )
    return "cancelled"


def discard_late(claim: Claim, usage: Usage, why: str) -> str:
    """Keep what a dead attempt says on its own row; never apply it to the task."""
    with transaction.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        Attempt.objects.filter(pk=claim.attempt.pk).update(late_result_discarded=True)
        events.record(
            "attempt.late_result_discarded",
            run=run,
            task=claim.task,
            message=f"attempt {claim.attempt.number}: {why}",
            payload={"attempt": claim.attempt.number, "worker": claim.worker, "output_tokens": usage.output_tokens},
        )
    return "discarded"
