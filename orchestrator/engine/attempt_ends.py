"""How an attempt ends: success, failure, time-out, cancellation, hand-back, a late result (DESIGN §3).

Each end is one transaction with the state change, the usage, the cost and the event; a success
also takes its run's step in it (its downstream may start at once), and an agent host records the
successes of one run that end together in one transaction (`complete_all`). Whatever the end, the
attempt keeps the tokens the provider reported and their cost, the task and the run count them,
and the provider's per-minute token budgets are corrected from what admission reserved to what was
used (engine/settlement.py). What a failure leads to (a retry, the task failed, the provider
backing off) is engine/retries.py.

Every write of an outcome is conditional on the attempt still holding its lease
(`execution.owned`): once the reaper has declared an attempt lost, whatever that attempt says
later is kept on its Attempt row and never applied to the task (`discard_late`).

An end without success keeps the text the attempt wrote (`output`, as its host holds it at the
end): on the task, as its partial output ("Partial output of attempt 2 (cancelled)"), or for a
lost attempt on its own row. The host's progress saves come every second or two and stop once the
task is no longer the attempt's, so the text since the last save (all of it, for an attempt
stopped before its first save) was kept nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from orchestrator import events
from orchestrator.engine import adaptive, context, retries, scheduler, settlement, transitions
from orchestrator.engine.execution import Claim, owned, owned_lookups
from orchestrator.models import Attempt, Checkpoint, Run, Subtask, TaskRun
from orchestrator.providers.base import ProviderError, Usage

State = TaskRun.State


@dataclass
class Success:
    """An attempt's successful end, as its host reports it: what it wrote and what it used."""

    claim: Claim
    output: str
    usage: Usage


def complete(claim: Claim, output: str, usage: Usage, *, keep: int = 0, advance: bool = True) -> str:
    """Record a successful attempt and, in the same transaction, advance its run (its downstream
    may start at once); up to `keep` of the attempts admitted are left for the caller to run
    (`claim.kept`). Without `advance` the run's step is the caller's to take."""
    (outcome,), step = _complete(claim.task.run_id, [Success(claim, output, usage)], keep, claim.worker, advance)
    if step is not None:
        claim.advanced, claim.kept = True, step.claims
    return outcome


def complete_all(run_id: int, successes: Sequence[Success], *, keep: int = 0, claim_for: str = ""):
    """Record the successes of several attempts of run `run_id` and take the run's scheduling step,
    all in one transaction: one wait for the run's row and one step for them all, where each
    success in a transaction of its own waited on the row for every other's (an agent host
    whose attempts of one run end together: a fan-out's wave). Returns the outcome of each, in
    order, and the step (scheduler.AdvanceResult; `claim_for` claims what it kept, `keep`)."""
    return _complete(run_id, successes, keep, claim_for, True)


def _complete(run_id: int, successes: Sequence[Success], keep: int, claim_for: str, advance: bool):
    # Bounded as their downstream agents' providers count tokens (for Claude, maybe a request):
    # before the transaction, which then holds its locks no longer than it must.
    summaries = [context.summary_for(s.claim.task, s.output) for s in successes]
    now = timezone.now()
    step = None
    with events.atomic():
        run = scheduler.lock_run(run_id)
        moved = _record_successes(run, successes, summaries, now)
        if advance:
            ended = [s.claim.task for s, done in zip(successes, moved, strict=True) if done]
            step = scheduler.advance_locked(run, keep=keep, claim_for=claim_for, ended=ended)
    outcomes = [
        "succeeded"
        if done
        else late_or_cancelled(s.claim, s.usage, "result arrived after the lease expired", output=s.output)
        for s, done in zip(successes, moved, strict=True)
    ]
    return outcomes, step


def _record_successes(run: Run, successes: Sequence[Success], summaries: list[str], now) -> list[bool]:
    """The successes, inside the transaction holding `run`'s lock (its counters kept up to date, as
    the step that follows reads them): their attempts read and locked in one statement, a statement
    per task and per attempt, one for the run. False for a task no longer its attempt's."""
    settled = settlement.settlements([(s.claim.attempt.pk, s.usage, s.claim.limit) for s in successes], lock=True)
    moved = []
    for success, summary, s in zip(successes, summaries, settled, strict=True):
        task = success.claim.task
        review = task.subtask.gate == Subtask.Gate.AFTER
        # The task's end, its output and its totals in one statement, on condition of the lease.
        moved.append(
            bool(
                transitions.move_tasks(
                    State.AWAITING_REVIEW if review else State.SUCCEEDED,
                    where=owned_lookups(success.claim),
                    from_states=[State.RUNNING],
                    output=success.output,
                    summary=summary,
                    progress=100,
                    progress_at=now,
                    lease_owner="",
                    lease_expires_at=None,
                    finished_at=None if review else now,
                    error="",
                    **s.task_totals(),
                )
            )
        )
    done = [
        (success, summary, s) for success, summary, s, m in zip(successes, summaries, settled, moved, strict=True) if m
    ]
    settlement.apply_settlements([s for _, _, s in done], run_id=run.pk, state=Attempt.State.SUCCEEDED, finished_at=now)
    for success, summary, s in done:
        claim, task, usage = success.claim, success.claim.task, success.usage
        review = task.subtask.gate == Subtask.Gate.AFTER
        task.state = State.AWAITING_REVIEW if review else State.SUCCEEDED
        task.output, task.summary = success.output, summary  # as saved: the step quotes them downstream
        events.record(
            "task.succeeded" if not review else "task.output_ready",
            run=run,
            task=task,
            actor_name=f"agent:{task.agent.name}",
            payload={
                "attempt": claim.attempt.number,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost_usd": str(s.cost),
            },
        )
        if review:
            scheduler.open_gate(task, Checkpoint.Kind.AFTER)
        if claim.limit is not None and claim.limit.effective_in_flight is not None:
            adaptive.increase(task.agent.provider, task.agent.model, run=run, task=task)
        run.cost_usd += s.more_cost  # as the UPDATE just made them: the step below reads them
        run.reserved_usd -= s.reserved_usd
        run.input_tokens += s.more_input
        run.output_tokens += s.more_output
    return moved


def fail(
    claim: Claim,
    message: str,
    *,
    error: ProviderError | None = None,
    attempt_state: str = Attempt.State.FAILED,
    usage: Usage | None = None,
    output: str = "",
) -> str:
    """The attempt failed or timed out (`attempt_state`) with `message`: a retry or the task
    failed (engine/retries.py), the text it wrote (`output`) kept as the task's partial output."""
    task = claim.task
    usage = usage or Usage()
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        if not owned(claim).exists():
            late = True
        else:
            late = False
            settlement.settle(claim.attempt.pk, usage, claim.limit, run_id=run.pk, task_id=task.pk)
            Attempt.objects.filter(pk=claim.attempt.pk).update(
                state=attempt_state, finished_at=timezone.now(), error=message[:2000]
            )
            _keep_output(owned(claim), output)
            provider_wide = bool(error and error.provider_wide)
            if error is not None and error.provider_wide:
                retries.back_off_provider(run, task, error)
            retryable = error.retryable if error else True
            outcome = retries.schedule_retry_or_fail(
                run,
                task,
                message,
                retryable=retryable,
                own_fault=not provider_wide,
                retry_after=error.retry_after_s if error else None,
            )
    if late:
        why = f"failure reported after the lease expired: {message}"
        return late_or_cancelled(claim, usage, why, output=output)
    return outcome


def cancel_attempt(claim: Claim, usage: Usage | None = None, output: str = "") -> str:
    """The task was cancelled or skipped while this attempt ran (a person, the run's end,
    fail_fast): the attempt ends cancelled with what it used and the task's reason ("run
    cancelled", "skipped by ann", "run stopped: a failed (fail_fast)"), the text it wrote
    (`output`) kept as the task's partial output, and an event says so, so that viewers see its
    end and the run's totals with its usage in them (the cancellation itself came before both)."""
    usage = usage or Usage()
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        cost = settlement.settle(claim.attempt.pk, usage, claim.limit, run_id=run.pk, task_id=claim.task.pk)
        state, reason = TaskRun.objects.filter(pk=claim.task.pk).values_list("state", "error").get()
        ended = "skipped" if state == State.SKIPPED else "cancelled"
        Attempt.objects.filter(pk=claim.attempt.pk).update(
            state=Attempt.State.CANCELLED, finished_at=timezone.now(), error=reason or f"its task was {ended}"
        )
        _keep_output(TaskRun.objects.filter(pk=claim.task.pk, attempt_count=claim.attempt.number), output)
        transitions.move_where(
            TaskRun.objects.filter(pk=claim.task.pk, attempt_count=claim.attempt.number),
            State.CANCELLED,
            from_states=[State.RUNNING, State.CANCELLED],
            lease_owner="",
            lease_expires_at=None,
            finished_at=timezone.now(),
        )
        events.record(
            "attempt.cancelled",
            run=run,
            task=claim.task,
            message=f"attempt {claim.attempt.number} stopped: its task was {ended}",
            payload={
                "attempt": claim.attempt.number,
                "worker": claim.worker,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost_usd": str(cost),
            },
        )
    return "cancelled"


def hand_back(
    claim: Claim, usage: Usage | None = None, why: str = "the worker is shutting down", output: str = ""
) -> str:
    """Give a running attempt up without blaming the task (graceful shutdown): the attempt ends
    ``handed_back`` with what it used, the task is ready again at once and spends no retry; the
    text it wrote (`output`) stays the task's partial output until the next attempt starts."""
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        if not owned(claim).exists():
            return discard_late(claim, usage or Usage(), f"handed back after the lease expired ({why})", output)
        settlement.settle(claim.attempt.pk, usage or Usage(), claim.limit, run_id=run.pk, task_id=claim.task.pk)
        now = timezone.now()
        Attempt.objects.filter(pk=claim.attempt.pk).update(
            state=Attempt.State.HANDED_BACK, finished_at=now, error=f"handed back: {why}"
        )
        _keep_output(owned(claim), output)
        transitions.move_where(
            owned(claim),
            State.READY,
            from_states=[State.RUNNING],
            lease_owner="",
            lease_expires_at=None,
            not_before=None,
            ready_at=now,
        )
        events.record(
            "attempt.handed_back",
            run=run,
            task=claim.task,
            message=f"attempt {claim.attempt.number} handed back: {why}",
            payload={"attempt": claim.attempt.number, "worker": claim.worker},
        )
    return "handed back"


def late_or_cancelled(claim: Claim, usage: Usage, why_late: str, output: str = "") -> str:
    """An end that found the task no longer this attempt's. Cancelled meanwhile (the run or the
    task, before the host's next heartbeat said so): the attempt ends cancelled, as it would have
    at that heartbeat. Otherwise its lease was lost: what it says is kept aside (`discard_late`)."""
    cancelled = TaskRun.objects.filter(pk=claim.task.pk, attempt_count=claim.attempt.number, state=State.CANCELLED)
    if cancelled.exists():
        return cancel_attempt(claim, usage, output)
    return discard_late(claim, usage, why_late, output)


def discard_late(claim: Claim, usage: Usage, why: str, output: str = "") -> str:
    """Keep what a dead attempt says on its own row (what it used, counted, and the text it wrote,
    `output`, shown with the attempt); never apply it: the task may be another attempt's now."""
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        settlement.settle(claim.attempt.pk, usage, claim.limit, run_id=run.pk, task_id=claim.task.pk)
        Attempt.objects.filter(pk=claim.attempt.pk, state=Attempt.State.RUNNING).update(
            state=Attempt.State.LOST, finished_at=timezone.now(), error=why[:2000]
        )
        kept = {"output": output} if output else {}  # nothing written leaves what the row holds
        Attempt.objects.filter(pk=claim.attempt.pk).update(late_result_discarded=True, **kept)
        events.record(
            "attempt.late_result_discarded",
            run=run,
            task=claim.task,
            message=f"attempt {claim.attempt.number}: {why}",
            payload={"attempt": claim.attempt.number, "worker": claim.worker, "output_tokens": usage.output_tokens},
        )
    return "discarded"


def _keep_output(task: QuerySet[TaskRun], output: str) -> None:
    """Keep the text an attempt wrote before it ended without success as its task's (partial)
    output, on `task` (the task while it is still this attempt's). Nothing written leaves what the
    host saved (nothing, or what an earlier end kept)."""
    if output:
        task.update(output=output)
