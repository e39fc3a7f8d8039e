"""An attempt's records: claim, saved progress, result, failure, cancellation, hand-back (DESIGN §3).

The synchronous database steps of one attempt. The agent host of a worker process
(orchestrator/engine/host.py) runs them on its database threads for the attempts it hosts, and
orchestrator/engine/agent_runner.py decides which to take as the attempt goes.

- **Claim**: a conditional update (attempt and task queued → running, with a lease owned by this
  process). It does not lock the run row: a cancelled task is simply no longer queued.
- **Saved progress**: the output, progress and usage so far of all of a host's running attempts,
  in one transaction every few seconds, each conditional on its lease. No run row, no event: what
  viewers see live travels apart (orchestrator/engine/live.py).
- **The end** (succeeded, failed, timed out, cancelled, handed back, or a result that came too
  late): one transaction with the state change, the usage, the cost and the event. Whatever the
  end, the attempt keeps the tokens the provider reported and their cost, and the task and the run
  count them (`settle`), and the provider's per-minute token budgets are corrected from what
  admission reserved to what was used.

Every write of an attempt's outcome is conditional on still holding the lease: once the reaper has
declared an attempt lost, whatever that attempt says later is kept on its Attempt row and never
applied to the task.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from orchestrator import events, ratelimit, wording
from orchestrator.engine import adaptive, admission, attempt_requests, context, run_shape, scheduler, transitions, waits
from orchestrator.models import Attempt, Checkpoint, ProviderLimit, Run, Subtask, TaskRun, ToolGrant
from orchestrator.providers.base import AgentRequest, ProviderError, Usage

log = logging.getLogger(__name__)

State = TaskRun.State
# Bound on attempts whatever their cause, so a provider that never recovers cannot loop forever.
MAX_ATTEMPTS = 50


def worker_name() -> str:
    """This process, as lease owner and as the Attempt's worker: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Claim:
    task: TaskRun
    attempt: Attempt
    worker: str
    limit: ProviderLimit | None = None  # the agent's provider limit as it was when claimed (prices)
    request: AgentRequest | None = None  # what the attempt asks its provider (kept on the attempt)
    # Set by `complete`: it advanced the run in its own transaction, and these admitted attempts
    # were kept for the caller and claimed by it already (scheduler.advance's `keep`, `claim_for`).
    advanced: bool = False
    kept: list[Claim] = field(default_factory=list)
    # Whether its agent holds tool grants, read with the claim (None: not read): an agent without
    # any takes the plain path without a look-up of its own before it starts (agent_runner).
    has_tool_grants: bool | None = None


@dataclass
class Progress:
    """What a running attempt has produced so far."""

    output: str = ""
    progress: int = 0
    usage: Usage = field(default_factory=Usage)


def owned(claim: Claim):
    """The task row as long as this attempt still holds its lease."""
    return TaskRun.objects.filter(
        pk=claim.task.pk, state=State.RUNNING, attempt_count=claim.attempt.number, lease_owner=claim.worker
    )


def provider_limit(task: TaskRun) -> ProviderLimit | None:
    return ProviderLimit.objects.filter(provider=task.agent.provider, model=task.agent.model).first()


def claim_attempt(attempt_id: int, worker: str) -> Claim | None:
    """queued → running with a lease, or None if the attempt is not ours to run.

    The request is built here, from the task's upstream results, and kept on the attempt in the
    same statement that claims it (engine/attempt_requests.py): a failed or lost attempt shows
    what it was asked too. The attempt row is changed before the task row, as everywhere.
    """
    now = timezone.now()
    with events.atomic():
        attempt = (
            Attempt.objects.filter(pk=attempt_id, state=Attempt.State.QUEUED)
            .select_related("task_run__subtask", "task_run__agent", "task_run__run__plan")
            .annotate(has_tool_grants=tool_grants_of("task_run__agent_id"))
            .first()
        )
        if attempt is None:
            return None
        task = attempt.task_run
        request = build_request(task, attempt.number)
        took = Attempt.objects.filter(pk=attempt_id, state=Attempt.State.QUEUED).update(
            state=Attempt.State.RUNNING,
            worker=worker,
            started_at=now,
            heartbeat_at=now,
            request=attempt_requests.as_record(request),
        )
        fields = scheduler.execution_lease(worker, now)
        moved = took and transitions.move_where(
            TaskRun.objects.filter(pk=task.pk, attempt_count=attempt.number),
            State.RUNNING,
            from_states=[State.QUEUED],
            **fields,
        )
        if not moved:
            transaction.set_rollback(True)
            return None
        task.state = State.RUNNING
        for name, value in fields.items():
            setattr(task, name, value)
        attempt.state, attempt.worker, attempt.started_at = Attempt.State.RUNNING, worker, now
        events.record(
            "task.started",
            run=task.run_id,
            task=task,
            actor_name=f"agent:{task.agent.name}",
            payload={"attempt": attempt.number, "worker": worker},
        )
    return Claim(task, attempt, worker, provider_limit(task), request, has_tool_grants=attempt.has_tool_grants)


def tool_grants_of(agent_field: str) -> Exists:
    """Whether the agent that `agent_field` names holds any tool grant: a column read with a claim."""
    return Exists(ToolGrant.objects.filter(agent_id=OuterRef(agent_field)))


def build_request(task: TaskRun, attempt_number: int, upstreams: list[TaskRun] | None = None) -> AgentRequest:
    """The attempt's request. `upstreams`: the task's direct upstreams in plan order, when the
    caller read them already (many claims at once read them in one query)."""
    agent = task.agent
    shape = run_shape.of(task.run)
    return AgentRequest(
        agent_name=agent.name,
        provider=agent.provider,
        model=agent.model,
        system_prompt=agent.system_prompt,
        prompt=context.build_prompt(task, shape.subtasks.get(task.subtask_id), goal=shape.goal, upstreams=upstreams),
        max_tokens=agent.max_output_tokens,
        timeout_s=float(task.subtask.timeout_s or agent.timeout_s),  # the task's agent, loaded with it
        seed=f"{task.run.plan_id}:{task.subtask.key}",
        attempt=attempt_number,
        options=dict(agent.provider_options or {}),
    )


# --- Leases and saved progress ---------------------------------------------------------------


def renew_leases(worker: str, task_ids: list[int]) -> None:
    """Extend the leases of this process's running attempts (a statement for all of them).

    Attempts before tasks, as in every transaction that changes both (the reaper, a claim, an
    attempt's end), so that none of them can deadlock with another on PostgreSQL.
    """
    if not task_ids:
        return
    now = timezone.now()
    with transaction.atomic():
        Attempt.objects.filter(task_run_id__in=task_ids, state=Attempt.State.RUNNING, worker=worker).update(
            heartbeat_at=now
        )
        TaskRun.objects.filter(pk__in=task_ids, state=State.RUNNING, lease_owner=worker).update(
            lease_expires_at=now + timedelta(seconds=settings.GLASSBOX_LEASE_S)
        )


def still_ours(claims: list[Claim]) -> dict[int, str]:
    """For each claim whose task is no longer this attempt's, why: "cancelled" (a person or the
    run's end cancelled it) or "lost" (the reaper gave it to another attempt). One query."""
    if not claims:
        return {}
    rows = TaskRun.objects.filter(pk__in=[c.task.pk for c in claims]).values_list(
        "pk", "state", "attempt_count", "lease_owner"
    )
    now_state = {pk: (state, count, owner) for pk, state, count, owner in rows}
    gone: dict[int, str] = {}
    for claim in claims:
        state, count, owner = now_state.get(claim.task.pk, (State.CANCELLED, 0, ""))
        if state == State.RUNNING and count == claim.attempt.number and owner == claim.worker:
            continue
        stopped = state in TaskRun.TERMINAL and count == claim.attempt.number  # cancelled or skipped
        gone[claim.task.pk] = "cancelled" if stopped else "lost"
    return gone


def save_progress(items: list[tuple[Claim, Progress]]) -> None:
    """Save the output, progress and usage so far of running attempts, in one transaction, each
    only while its attempt holds the lease. A reconnecting viewer reads the output from the row;
    a lost attempt's usage so far is kept (see `settle`). No event, no run row."""
    if not items:
        return
    now = timezone.now()
    with transaction.atomic():
        for claim, progress in items:  # the attempt first, then the task (see renew_leases)
            if Attempt.objects.filter(pk=claim.attempt.pk, state=Attempt.State.RUNNING, worker=claim.worker).update(
                input_tokens=progress.usage.input_tokens,
                output_tokens=progress.usage.output_tokens,
                cache_read_tokens=progress.usage.cache_read_tokens,
                cache_creation_tokens=progress.usage.cache_creation_tokens,
            ):
                owned(claim).update(output=progress.output, progress=progress.progress, progress_at=now)


# --- Usage, cost and the provider's budgets ---------------------------------------------------------


@dataclass
class Settlement:
    """What settling an attempt adds: its usage and cost beyond what was already counted, and the
    reservations it gives back (see `settle`)."""

    attempt_id: int
    usage: Usage
    limit: ProviderLimit | None
    cost: Decimal
    more_input: int
    more_output: int
    more_cost: Decimal
    reserved_usd: Decimal
    reserved_input_tokens: int
    reserved_output_tokens: int
    rate_window: int | None

    @property
    def counts(self) -> bool:
        return bool(self.more_input or self.more_output or self.more_cost)

    def task_totals(self) -> dict:
        """The task's totals, as fields of an UPDATE of the task row."""
        return {
            "input_tokens": F("input_tokens") + self.more_input,
            "output_tokens": F("output_tokens") + self.more_output,
            "cost_usd": F("cost_usd") + self.more_cost,
        }


def settlement(attempt_id: int, usage: Usage, limit: ProviderLimit | None, *, lock: bool = False) -> Settlement:
    """What settling `attempt_id` with `usage` will add (one read of the attempt row; with `lock`,
    the row is locked: a transaction that changes the task next must hold its attempt first, as
    every transaction changing both does, or it deadlocks with the host's lease renewal)."""
    rows = Attempt.objects.filter(pk=attempt_id)
    if lock:
        rows = rows.select_for_update(no_key=True)
    row = rows.values(
        "finished_at",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "reserved_usd",
        "reserved_input_tokens",
        "reserved_output_tokens",
        "rate_window",
    )[0]
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
    first = row["finished_at"] is None
    return Settlement(
        attempt_id=attempt_id,
        usage=usage,
        limit=limit,
        cost=cost,
        more_input=usage.input_tokens - (0 if first else row["input_tokens"]),
        more_output=usage.output_tokens - (0 if first else row["output_tokens"]),
        more_cost=cost - (Decimal("0") if first else row["cost_usd"]),
        reserved_usd=row["reserved_usd"],
        reserved_input_tokens=row["reserved_input_tokens"],
        reserved_output_tokens=row["reserved_output_tokens"],
        rate_window=row["rate_window"],
    )


def apply_settlement(s: Settlement, *, run_id: int, **attempt_fields) -> None:
    """Write a settlement on the attempt (with `attempt_fields`, e.g. its end state, in the same
    statement) and the run, and correct the provider's token budgets. The task's totals are the
    caller's: `s.task_totals()` folds them into the caller's own update of the task row."""
    usage = s.usage
    Attempt.objects.filter(pk=s.attempt_id).update(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
        cost_usd=s.cost,
        reserved_usd=0,
        reserved_input_tokens=usage.input_tokens if s.rate_window is not None else 0,
        reserved_output_tokens=usage.output_tokens if s.rate_window is not None else 0,
        **attempt_fields,
    )
    if s.counts or s.reserved_usd:
        Run.objects.filter(pk=run_id).update(
            input_tokens=F("input_tokens") + s.more_input,
            output_tokens=F("output_tokens") + s.more_output,
            cost_usd=F("cost_usd") + s.more_cost,
            reserved_usd=F("reserved_usd") - s.reserved_usd,
        )
    if s.rate_window is not None and s.limit is not None:
        input_delta = usage.input_tokens - s.reserved_input_tokens
        output_delta = usage.output_tokens - s.reserved_output_tokens
        correct_token_budgets(s.limit, s.rate_window, input_delta=input_delta, output_delta=output_delta)
        if input_delta < 0 or output_delta < 0:
            # Budget came back: the run's tasks throttled on it are looked at by the next step at
            # once, not at their next recheck (other runs' at theirs, within THROTTLE_RECHECK_S).
            TaskRun.objects.filter(run_id=run_id, state=State.THROTTLED).update(not_before=None)


def settle(
    attempt_id: int, usage: Usage, limit: ProviderLimit | None, *, run_id: int, task_id: int, **attempt_fields
) -> Decimal:
    """Record what an attempt used, however it ended; returns its cost.

    The first settlement of an attempt adds its whole usage and cost to the task's and the run's
    totals and releases the run's reservation; a later one (a result arriving after the attempt
    was declared lost) adds only what it reports beyond that. The provider's per-minute token
    budgets get back what admission reserved beyond the real use (or are charged the excess).
    """
    s = settlement(attempt_id, usage, limit)
    apply_settlement(s, run_id=run_id, **attempt_fields)
    if s.counts:
        TaskRun.objects.filter(pk=task_id).update(**s.task_totals())
    return s.cost


def correct_token_budgets(limit: ProviderLimit, window: int, *, input_delta: int, output_delta: int) -> None:
    """Anthropic's accounting (DESIGN §9): what admission reserved from the input and output token
    budgets is corrected to what the call used, in the minute window it was taken from."""
    for suffix, delta, per_minute in (
        ("itpm", input_delta, limit.input_tokens_per_minute),
        ("otpm", output_delta, limit.output_tokens_per_minute),
    ):
        if delta and per_minute:
            ratelimit.correct(admission.admission_key(limit.provider, limit.model, suffix), window, delta)


def reserve_call(claim: Claim, input_tokens: int, used: Usage) -> bool:
    """Before another model call of an agent that uses tools: make the run hold enough for it.

    Admission reserved one call's worst case (`admission.worst_case_cost`) on the attempt and the
    run. Before each further call the attempt's reservation is raised to what it has used so far
    plus the next call's worst case (its conversation's `input_tokens`, the agent's max output),
    taking the difference from the run's budget in one conditional statement; settling the
    attempt gives it all back, as for any attempt. False when the budget cannot cover it (or
    the run ended): the loop then stops (``budget``). No price, nothing to reserve.
    """
    limit, agent = claim.limit, claim.task.agent
    worst = admission.worst_case_cost(input_tokens, agent, limit)
    if limit is None or not worst:
        return True
    spent = limit.cost(
        used.input_tokens,
        used.output_tokens,
        cache_read_tokens=used.cache_read_tokens,
        cache_creation_tokens=used.cache_creation_tokens,
    )
    with transaction.atomic():
        held = Attempt.objects.filter(pk=claim.attempt.pk).values_list("reserved_usd", flat=True).first()
        if held is None:
            return False
        more = spent + worst - held
        if more <= 0:
            return True
        # The run first, then the attempt, as an attempt's end locks them (`complete`).
        took = Run.objects.filter(
            pk=claim.task.run_id,
            status__in=[Run.Status.RUNNING, Run.Status.PAUSED],
            budget_usd__gte=F("cost_usd") + F("reserved_usd") + more,
        ).update(reserved_usd=F("reserved_usd") + more)
        if not took or not Attempt.objects.filter(pk=claim.attempt.pk, state=Attempt.State.RUNNING).update(
            reserved_usd=F("reserved_usd") + more
        ):
            transaction.set_rollback(True)
            return False
    return True


def take_call_rate(claim: Claim, input_tokens: int) -> tuple[float, admission.TokenReservation]:
    """Before another model call of an agent that uses tools: take that call's share of the
    provider's per-minute budgets (requests, input tokens, its max_tokens of output), as admission
    took the first call's — every call is a request to the provider. Returns (0, what was taken),
    or (seconds to wait, nothing taken) when a budget or the provider's backoff holds it."""
    limit = provider_limit(claim.task)  # as it is now (a backoff may have started since the claim)
    wait, wait_s, taken = admission.rate_limit_wait(claim.task.agent, limit, timezone.now(), input_tokens)
    return (max(wait_s, admission.MIN_CALL_WAIT_S) if wait is not None else 0.0), taken


def settle_call_rate(claim: Claim, taken: admission.TokenReservation, used: Usage) -> None:
    """After such a call: correct what it took to what it used, in the window it was taken from,
    and count its use as reserved on the attempt, so that the attempt's settlement corrects only
    what admission took for the first call (`apply_settlement`: used minus reserved)."""
    if taken.window is None:
        return
    limit = provider_limit(claim.task)
    if limit is not None:
        correct_token_budgets(
            limit,
            taken.window,
            input_delta=used.input_tokens - taken.input_tokens,
            output_delta=used.output_tokens - taken.output_tokens,
        )
    Attempt.objects.filter(pk=claim.attempt.pk, state=Attempt.State.RUNNING).update(
        reserved_input_tokens=F("reserved_input_tokens") + used.input_tokens,
        reserved_output_tokens=F("reserved_output_tokens") + used.output_tokens,
    )


# --- How an attempt ends ------------------------------------------------------------------------


def complete(claim: Claim, output: str, usage: Usage, *, keep: int = 0, advance: bool = True) -> str:
    """Record a successful attempt and, in the same transaction, advance its run (its downstream
    may start at once); up to `keep` of the attempts admitted are left for the caller to run
    (`claim.kept`). Without `advance` the run's step is the caller's to take (an agent host
    whose other attempts of the run are ending too takes one step for all of them)."""
    task = claim.task
    # Bounded as its downstream agents' providers count tokens (for Claude, maybe a request):
    # before the transaction, which then holds its locks no longer than it must.
    summary = context.summary_for(task, output)
    review = task.subtask.gate == Subtask.Gate.AFTER
    now = timezone.now()
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        s = settlement(claim.attempt.pk, usage, claim.limit, lock=True)
        # The task's end, its output and its totals in one statement, on condition of the lease.
        moved = transitions.move_where(
            owned(claim),
            State.AWAITING_REVIEW if review else State.SUCCEEDED,
            from_states=[State.RUNNING],
            output=output,
            summary=summary,
            progress=100,
            progress_at=now,
            lease_owner="",
            lease_expires_at=None,
            finished_at=None if review else now,
            error="",
            **s.task_totals(),
        )
        if moved:
            apply_settlement(s, run_id=run.pk, state=Attempt.State.SUCCEEDED, finished_at=now)
            task.state = State.AWAITING_REVIEW if review else State.SUCCEEDED
            task.output, task.summary = output, summary  # as saved: the step quotes them downstream
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
            if advance:
                step = scheduler.advance_locked(run, keep=keep, claim_for=claim.worker, ended=task)
                claim.advanced, claim.kept = True, step.claims
    if not moved:
        return late_or_cancelled(claim, usage, "result arrived after the lease expired")
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
    usage = usage or Usage()
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        if not owned(claim).exists():
            late = True
        else:
            late = False
            settle(claim.attempt.pk, usage, claim.limit, run_id=run.pk, task_id=task.pk)
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
        return late_or_cancelled(claim, usage, f"failure reported after the lease expired: {message}")
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
    limit = ProviderLimit.objects.select_for_update(no_key=True).get(
        provider=task.agent.provider, model=task.agent.model
    )
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
    reason = message if not retryable else f"{message} (after {wording.counted(task.attempt_count, 'attempt')})"
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


def cancel_attempt(claim: Claim, usage: Usage | None = None) -> str:
    """The task was cancelled while this attempt ran (a person, the run's end, fail_fast)."""
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        settle(claim.attempt.pk, usage or Usage(), claim.limit, run_id=run.pk, task_id=claim.task.pk)
        Attempt.objects.filter(pk=claim.attempt.pk).update(
            state=Attempt.State.CANCELLED, finished_at=timezone.now(), error="run cancelled"
        )
        transitions.move_where(
            TaskRun.objects.filter(pk=claim.task.pk, attempt_count=claim.attempt.number),
            State.CANCELLED,
            from_states=[State.RUNNING, State.CANCELLED],
            lease_owner="",
            lease_expires_at=None,
            finished_at=timezone.now(),
        )
    return "cancelled"


def hand_back(claim: Claim, usage: Usage | None = None, why: str = "the worker is shutting down") -> str:
    """Give a running attempt up without blaming the task (graceful shutdown): the attempt ends
    ``handed_back`` with what it used, the task is ready again at once and spends no retry."""
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        if not owned(claim).exists():
            return discard_late(claim, usage or Usage(), f"handed back after the lease expired ({why})")
        settle(claim.attempt.pk, usage or Usage(), claim.limit, run_id=run.pk, task_id=claim.task.pk)
        now = timezone.now()
        Attempt.objects.filter(pk=claim.attempt.pk).update(
            state=Attempt.State.HANDED_BACK, finished_at=now, error=f"handed back: {why}"
        )
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


def late_or_cancelled(claim: Claim, usage: Usage, why_late: str) -> str:
    """An end that found the task no longer this attempt's. Cancelled meanwhile (the run or the
    task, before the host's next heartbeat said so): the attempt ends cancelled, as it would have
    at that heartbeat. Otherwise its lease was lost: what it says is kept aside (`discard_late`)."""
    cancelled = TaskRun.objects.filter(pk=claim.task.pk, attempt_count=claim.attempt.number, state=State.CANCELLED)
    if cancelled.exists():
        return cancel_attempt(claim, usage)
    return discard_late(claim, usage, why_late)


def discard_late(claim: Claim, usage: Usage, why: str) -> str:
    """Keep what a dead attempt says on its own row (and count what it used); never apply it."""
    with events.atomic():
        run = scheduler.lock_run(claim.task.run_id)
        settle(claim.attempt.pk, usage, claim.limit, run_id=run.pk, task_id=claim.task.pk)
        Attempt.objects.filter(pk=claim.attempt.pk, state=Attempt.State.RUNNING).update(
            state=Attempt.State.LOST, finished_at=timezone.now(), error=why[:2000]
        )
        Attempt.objects.filter(pk=claim.attempt.pk).update(late_result_discarded=True)
        events.record(
            "attempt.late_result_discarded",
            run=run,
            task=claim.task,
            message=f"attempt {claim.attempt.number}: {why}",
            payload={"attempt": claim.attempt.number, "worker": claim.worker, "output_tokens": usage.output_tokens},
        )
    return "discarded"
