"""What an attempt used, and what it may still use: usage, cost and the provider's budgets (DESIGN §9).

Two ledgers hold an attempt to account. The run's cost budget: admission reserves one call's
worst-case cost on the attempt and the run; the attempt's end settles its real cost and gives the
reservation back. The provider's per-minute budgets (requests, input tokens, output tokens): kept
as Anthropic keeps them — a request is charged its `max_tokens` of output when it starts and
corrected to its real use when it ends — so our limiter says what the provider will say.

- **Settlement** (`settle`, or `settlement` + `apply_settlement` inside an end that updates the
  task row itself; `settlements` + `apply_settlements` for several ends in one transaction): however an attempt ends, its usage and cost are written on it and added to the
  task's and the run's totals once (a late result adds only what it reports beyond that), the
  run's reservation is released, and the token budgets admission took are corrected to the real
  use, in the minute window they were taken from (`correct_token_budgets`).
- **Each further model call** of an agent that uses tools (engine/tool_attempt.py): the run must
  cover its worst case (`reserve_call`), it takes its own share of the per-minute budgets or says
  how long to wait (`take_call_rate`), and that share is corrected when its usage arrives
  (`settle_call_rate`).

The ends of an attempt (engine/attempt_ends.py) call it inside their own transactions, which record
the state change and the event; nothing here does either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from orchestrator import ratelimit, sql
from orchestrator.engine import admission, waits
from orchestrator.models import Attempt, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import Usage

if TYPE_CHECKING:
    from orchestrator.engine.execution import Claim


# --- An attempt's settlement ---------------------------------------------------------------------


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
        """The task's totals, as fields of an UPDATE of the task row (orchestrator/sql.py)."""
        return {
            "input_tokens": sql.Add(self.more_input),
            "output_tokens": sql.Add(self.more_output),
            "cost_usd": sql.Add(self.more_cost),
        }


def settlement(attempt_id: int, usage: Usage, limit: ProviderLimit | None, *, lock: bool = False) -> Settlement:
    """What settling `attempt_id` with `usage` will add (one read of the attempt row; with `lock`,
    the row is locked: a transaction that changes the task next must hold its attempt first, as
    every transaction changing both does, or it deadlocks with the host's lease renewal)."""
    return settlements([(attempt_id, usage, limit)], lock=lock)[0]


def settlements(ends: Sequence[tuple[int, Usage, ProviderLimit | None]], *, lock: bool = False) -> list[Settlement]:
    """`settlement` of several attempts (attempt id, usage, limit) in one read, in their order;
    with `lock` their rows are locked in the order of their ids, as every lock of several is."""
    names = (
        "pk",
        "finished_at",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "reserved_usd",
        "reserved_input_tokens",
        "reserved_output_tokens",
        "rate_window",
    )
    rows = sql.select(
        Attempt, names, order_by=("pk",) if lock else (), lock=lock, pk__in=[attempt_id for attempt_id, _, _ in ends]
    )
    by_id = {row[0]: dict(zip(names, row, strict=True)) for row in rows}
    return [_settlement(attempt_id, usage, limit, by_id[attempt_id]) for attempt_id, usage, limit in ends]


def _settlement(attempt_id: int, usage: Usage, limit: ProviderLimit | None, row: Mapping[str, Any]) -> Settlement:
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
    apply_settlements([s], run_id=run_id, **attempt_fields)


def apply_settlements(settled: Sequence[Settlement], *, run_id: int, **attempt_fields) -> None:
    """`apply_settlement` of several attempts of run `run_id`: a statement per attempt, one for
    the run's totals and one for its throttled tasks."""
    budget_came_back = False
    for s in settled:
        usage = s.usage
        sql.update(
            Attempt,
            {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_creation_tokens": usage.cache_creation_tokens,
                "cost_usd": s.cost,
                "reserved_usd": Decimal("0"),
                "reserved_input_tokens": usage.input_tokens if s.rate_window is not None else 0,
                "reserved_output_tokens": usage.output_tokens if s.rate_window is not None else 0,
                **attempt_fields,
            },
            pk=s.attempt_id,
        )
        if s.rate_window is not None and s.limit is not None:
            input_delta = usage.input_tokens - s.reserved_input_tokens
            output_delta = usage.output_tokens - s.reserved_output_tokens
            correct_token_budgets(s.limit, s.rate_window, input_delta=input_delta, output_delta=output_delta)
            budget_came_back = budget_came_back or input_delta < 0 or output_delta < 0
    if any(s.counts or s.reserved_usd for s in settled):
        sql.update(
            Run,
            {
                "input_tokens": sql.Add(sum(s.more_input for s in settled)),
                "output_tokens": sql.Add(sum(s.more_output for s in settled)),
                "cost_usd": sql.Add(sum((s.more_cost for s in settled), Decimal("0"))),
                "reserved_usd": sql.Add(-sum((s.reserved_usd for s in settled), Decimal("0"))),
            },
            pk=run_id,
        )
    if budget_came_back:
        # Budget came back: the run's tasks throttled on it are looked at by the next step at
        # once, not at their next recheck (other runs' at theirs, within THROTTLE_RECHECK_S).
        TaskRun.objects.filter(run_id=run_id, state=TaskRun.State.THROTTLED).update(not_before=None)


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
        sql.update(TaskRun, s.task_totals(), pk=task_id)
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


# --- Each further model call of an attempt that uses tools ----------------------------------------


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


def take_call_rate(claim: Claim, input_tokens: int) -> tuple[waits.Wait | None, float, admission.TokenReservation]:
    """Before another model call of an agent that uses tools: take that call's share of the
    provider's per-minute budgets (requests, input tokens, its max_tokens of output), as admission
    took the first call's — every call is a request to the provider. Returns (None, 0, what was
    taken), or (why, seconds to wait, nothing taken) when a budget or the provider's backoff holds
    it: `why` says which (waits.RateLimitRequests, …, waits.ProviderBackoff)."""
    limit = admission.provider_limit(claim.task.agent)  # as it is now (a backoff may have started since the claim)
    why, wait_s, taken = admission.rate_limit_wait(claim.task.agent, limit, timezone.now(), input_tokens)
    return why, (max(wait_s, admission.MIN_CALL_WAIT_S) if why is not None else 0.0), taken


def settle_call_rate(claim: Claim, taken: admission.TokenReservation, used: Usage) -> None:
    """After such a call: correct what it took to what it used, in the window it was taken from,
    and count its use as reserved on the attempt, so that the attempt's settlement corrects only
    what admission took for the first call (`apply_settlement`: used minus reserved)."""
    if taken.window is None:
        return
    limit = admission.provider_limit(claim.task.agent)
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
