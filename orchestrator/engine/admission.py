"""Admission: which ready tasks of a run may start now, under every cap at once (DESIGN §3, §9).

Read under the locks the scheduling step takes (run, then agents, then provider limits): the run's
cap, each agent's `max_concurrency` counted across all runs, the provider's in-flight cap, its
backoff and per-minute budgets (taken here, as the provider counts them when a request starts),
and the run's cost budget. It decides and spends budgets; the step (engine/scheduler.py) writes
what it decided: the attempts, and why the others wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING

from django.db.models import Count, Q

from orchestrator import ratelimit, sql
from orchestrator.engine import context, run_shape, waits
from orchestrator.models import Agent, ProviderLimit, Run, TaskRun, ToolGrant

if TYPE_CHECKING:
    from orchestrator.engine.scheduler import TaskRow


@dataclass
class Capacity:
    """Slots left under every cap, read once under lock and spent as tasks are admitted."""

    run_slots: int
    agents: dict[int, Agent]
    agent_slots: dict[int, int]
    provider_slots: dict[tuple[str, str], int | None]
    limits: dict[tuple[str, str], ProviderLimit]
    budget_left: Decimal

    def pair(self, agent_id: int) -> tuple[str, str]:
        agent = self.agents[agent_id]
        return agent.provider, agent.model


def admission_order(row: TaskRow, shape: run_shape.RunShape) -> tuple:
    """Longest remaining path first, then priority, then age (never-ready-before last), then id."""
    return (-row.rank, -shape.subtasks[row.subtask_id].priority, row.ready_at is None, row.ready_at or 0, row.pk)


def read_capacity(run: Run, rows: dict[int, TaskRow], agent_ids) -> Capacity:
    """Slots left under every cap for the given agents, read under their locks.

    Lock order: run (held), agents, provider limits — held to commit, so admission is serial per
    agent and provider across runs, processes and clusters. On every step that admits, so its
    statements are text (orchestrator/sql.py): the locked agents, the locked limits, the agents'
    active tasks (and, under an in-flight cap, the provider's).
    """
    agent_ids = sorted(set(agent_ids))
    agents = {
        a.pk: a
        for a in sql.objects(
            Agent, lock=True, order_by=("pk",), pk__in=agent_ids, extra={"has_tool_grants": holds_tool_grants()}
        )
    }
    pairs = sorted({(a.provider, a.model) for a in agents.values()})
    limits = {
        (pl.provider, pl.model): pl
        for pl in sql.objects(ProviderLimit, lock=True, order_by=("pk",), match=(("provider", "model"), pairs))
    }
    agent_busy = active_counts(agent_ids)
    capped = {
        pair for pair in pairs if (limit := limits.get(pair)) and (limit.effective_in_flight or limit.max_in_flight)
    }
    provider_busy: dict[tuple[str, str], int] = {}
    if capped:
        provider_q = Q(pk__in=[])
        for provider, model in capped:
            provider_q |= Q(agent__provider=provider, agent__model=model)
        active = TaskRun.objects.filter(state__in=TaskRun.ACTIVE).order_by()
        for provider, model, busy in (
            active.filter(provider_q).values_list("agent__provider", "agent__model").annotate(n=Count("pk"))
        ):
            provider_busy[(provider, model)] = busy
    provider_slots: dict[tuple[str, str], int | None] = {pair: None for pair in pairs}
    for pair in capped:
        provider_slots[pair] = (
            limits[pair].effective_in_flight or limits[pair].max_in_flight or 0
        ) - provider_busy.get(pair, 0)
    running_here = sum(1 for row in rows.values() if row.state in TaskRun.ACTIVE)
    return Capacity(
        run_slots=run.cap - running_here,
        agents=agents,
        agent_slots={aid: agents[aid].max_concurrency - agent_busy.get(aid, 0) for aid in agents},
        provider_slots=provider_slots,
        limits=limits,
        budget_left=run.budget_usd - run.cost_usd - run.reserved_usd,
    )


def holds_tool_grants() -> str:
    """An agent row's column saying whether the agent holds any tool grant (read with its lock, for
    the attempts a step claims: engine/dispatch.py)."""
    grant, agent = sql.quote(ToolGrant._meta.db_table), sql.quote(Agent._meta.db_table)
    return f"EXISTS (SELECT 1 FROM {grant} WHERE {grant}.agent_id = {agent}.id)"


def active_counts(agent_ids: list[int]) -> dict[int, int]:
    """How many tasks of each agent are queued or running, in every run (one statement)."""
    if not agent_ids:
        return {}
    table, states = sql.quote(TaskRun._meta.db_table), list(TaskRun.ACTIVE)
    of_agents, agent_params = sql.one_of("agent_id", TaskRun._meta.get_field("agent"), agent_ids)
    rows = sql.fetch(
        f"SELECT agent_id, COUNT(*) FROM {table} WHERE state IN ({sql.in_list(states)}) "
        f"AND {of_agents} GROUP BY agent_id",
        [*states, *agent_params],
    )
    return {agent_id: count for agent_id, count in rows}


def input_estimate(shape: run_shape.SubtaskShape, goal: str, agent: Agent) -> int:
    """The input tokens admission counts for an attempt: the plan's estimate, or the prompt's
    bound when that is larger (the plan's numbers must not let a large prompt through)."""
    bound = context.subtask_token_bound(
        goal=goal,
        title=shape.title,
        instructions=shape.instructions,
        system_prompt=agent.system_prompt,
        inputs=shape.inputs,
        upstreams=len(shape.upstreams),
        has_downstream=shape.has_downstream,
    )
    return max(shape.estimated_input_tokens, bound)


def provider_limit(agent: Agent) -> ProviderLimit | None:
    """The agent's provider limit as it is now (prices, budgets, backoff), unlocked: a claim keeps
    it for the attempt's prices, a later model call reads it again for its budgets."""
    return ProviderLimit.objects.filter(provider=agent.provider, model=agent.model).first()


def worst_case_cost(input_tokens: int, agent: Agent, limit: ProviderLimit | None) -> Decimal:
    """The most one attempt can cost: reserved at admission, settled with the real usage."""
    if limit is None or not limit.is_priced:
        return Decimal("0")
    return limit.cost(input_tokens, agent.max_output_tokens)


# A throttled task is looked at again after at most this long (the tick's pace), even if the
# whole budget frees later: one request's worth usually frees sooner.
THROTTLE_RECHECK_S = 1.0
# A tool-using attempt's next model call held by a budget is tried again after at least this long.
MIN_CALL_WAIT_S = 0.05


def admission_key(provider: str, model: str, suffix: str) -> str:
    """The scheduler's shared per-minute budget for one provider, model and unit (rpm, itpm, otpm)."""
    return f"admit:{provider}:{model}:{suffix}"


@dataclass(frozen=True)
class TokenReservation:
    """What admission took from a provider's token budgets for one attempt, and in which minute
    window: kept on the Attempt, corrected to the real usage when it ends (settlement.settle)."""

    input_tokens: int = 0
    output_tokens: int = 0
    window: int | None = None


def rate_limit_wait(
    agent: Agent, limit: ProviderLimit | None, now, input_tokens: int
) -> tuple[waits.Wait | None, float, TokenReservation]:
    """Take one attempt's share of the provider's per-minute budgets, or say why and how long to wait.

    Requests count one per call; input tokens the prompt's estimate; output tokens the call's
    max_tokens, as the provider itself counts them when a request starts (DESIGN §9) — the
    surplus is given back when the attempt ends. Nothing is kept of a taking that fails half-way.
    """
    if limit is None:
        return None, 0.0, TokenReservation()
    held = provider_backoff(limit, now)
    if held is not None:
        return *held, TokenReservation()
    taken: dict[str, ratelimit.Reservation] = {}
    for suffix, amount, per_minute, wait in budgets_of(agent, limit, input_tokens):
        reservation = ratelimit.reserve(admission_key(limit.provider, limit.model, suffix), amount, per_minute)
        if not reservation.granted:
            give_back(limit, taken)
            return wait(str(limit)), reservation.wait_s, TokenReservation()
        taken[suffix] = reservation
    return None, 0.0, token_reservation(taken)


def provider_backoff(limit: ProviderLimit, now) -> tuple[waits.Wait, float] | None:
    """The provider's backoff after a 429/529, and the seconds it has left (None when over)."""
    if limit.backoff_until and limit.backoff_until > now:
        return waits.ProviderBackoff(str(limit), limit.backoff_until), (limit.backoff_until - now).total_seconds()
    return None


UNITS = (
    ("rpm", "requests_per_minute", waits.RateLimitRequests),
    ("itpm", "input_tokens_per_minute", waits.RateLimitInput),
    ("otpm", "output_tokens_per_minute", waits.RateLimitOutput),
)


def budgets_of(
    agent: Agent, limit: ProviderLimit, input_tokens: int
) -> list[tuple[str, int, int, Callable[[str], waits.Wait]]]:
    """(unit, amount one call takes, per-minute budget, the wait it causes) for each budget in force
    (ProviderLimit.per_minute): a request counts one, input tokens the prompt's estimate, output
    tokens max_tokens."""
    amounts = {"rpm": 1, "itpm": input_tokens, "otpm": agent.max_output_tokens}
    return [
        (suffix, amounts[suffix], per_minute, learned_wait if suffix == "rpm" and limit.rate_is_learned else wait)
        for suffix, field, wait in UNITS
        if (per_minute := limit.per_minute(field))
    ]


def learned_wait(provider: str) -> waits.Wait:
    return waits.RateLimitRequests(provider, " (a rate learned from its 429s)")


def give_back(limit: ProviderLimit, taken: dict[str, ratelimit.Reservation]) -> None:
    for suffix, got in taken.items():
        if got.window is not None:
            ratelimit.correct(admission_key(limit.provider, limit.model, suffix), got.window, -got.taken)


def token_reservation(taken: dict[str, ratelimit.Reservation], share: dict[str, int] | None = None) -> TokenReservation:
    """What one attempt holds of `taken`: all of it, or its `share` of a taking for several."""
    windows = [got.window for got in taken.values() if got.window is not None]
    held = share if share is not None else {suffix: got.taken for suffix, got in taken.items()}
    return TokenReservation(
        input_tokens=held.get("itpm", 0) if "itpm" in taken else 0,
        output_tokens=held.get("otpm", 0) if "otpm" in taken else 0,
        window=windows[0] if windows else None,
    )


def take_together(
    limit: ProviderLimit, admissions: list[tuple[Agent, int]]
) -> tuple[dict[str, ratelimit.Reservation], list[TokenReservation]] | None:
    """Take the shares of several admissions (agent, input tokens) on one provider in one taking
    per budget: what was taken, and each attempt's TokenReservation; None, with nothing taken,
    when the sums do not fit.

    One round trip per budget instead of one per admitted task: a launch at cap 64 made 64 Redis
    calls in its step.
    """
    shares = [{suffix: amount for suffix, amount, _, _ in budgets_of(agent, limit, n)} for agent, n in admissions]
    taken: dict[str, ratelimit.Reservation] = {}
    for suffix, field, _ in UNITS:
        per_minute = limit.per_minute(field)
        if not per_minute:
            continue
        total = sum(share[suffix] for share in shares)
        key = admission_key(limit.provider, limit.model, suffix)
        # Above the budget reserve() would charge the whole budget, and might grant it: never fits.
        got = ratelimit.reserve(key, total, per_minute) if total <= per_minute else None
        if got is None or not got.granted:
            give_back(limit, taken)
            return None
        taken[suffix] = got
    return taken, [token_reservation(taken, share) for share in shares]


def admission_block(row: TaskRow, run: Run, cap: Capacity, cost: Decimal) -> waits.Wait | None:
    """Why the task cannot start now (None when it can), spending nothing."""
    agent = cap.agents[row.agent_id]
    if not agent.is_schedulable:
        return waits.AgentInactive(agent.name, agent.status)
    if cap.run_slots <= 0:
        return waits.RunCap(run.cap)
    if cap.agent_slots[row.agent_id] <= 0:
        return waits.AgentLimit(agent.name, agent.max_concurrency)
    pair = cap.pair(row.agent_id)
    slots = cap.provider_slots[pair]
    if slots is not None and slots <= 0:
        return waits.ProviderInFlight(*pair)
    if cost > cap.budget_left:
        return waits.Budget()
    return None


@dataclass
class Admission:
    """One task admitted in this step: what its attempt reserves."""

    row: TaskRow
    reserve: Decimal
    tokens: TokenReservation


@dataclass
class Decision:
    """One step's admission: what starts, what waits and why, and the capacity left."""

    admitted: list[Admission]
    waiting: list[tuple[TaskRow, waits.Wait, float]]  # (task, why, how long it is throttled for)
    capacity: Capacity
    budget_blocked: bool  # a task waits for the run's cost budget


def decide(run: Run, shape: run_shape.RunShape, rows: dict[int, TaskRow], now) -> Decision | None:
    """Admit ready tasks in order while every cap holds; say why every other one waits (None when
    no task is ready).

    Once the run's cap is reached, the remaining candidates all wait for it: those already showing
    that reason are left out of `waiting`, so a run with hundreds of ready tasks writes nothing
    for them on every step.

    The provider's per-minute budgets are first taken for all of a step's admissions at once (one
    taking per provider and budget); when the sums do not fit, the step admits again, taking each
    task's share alone, so that exactly as many start as fit.
    """
    candidates = sorted(
        (
            row
            for row in rows.values()
            if row.state in TaskRun.ADMISSIBLE and (row.not_before is None or row.not_before <= now)
        ),
        key=lambda row: admission_order(row, shape),
    )
    if not candidates:
        return None
    capacity = read_capacity(run, rows, [row.agent_id for row in candidates])
    together = admit(
        run,
        shape,
        candidates,
        replace(capacity, agent_slots=dict(capacity.agent_slots), provider_slots=dict(capacity.provider_slots)),
        now,
        together=True,
    )
    return together if together is not None else admit(run, shape, candidates, capacity, now, together=False)


def admit(
    run: Run, shape: run_shape.RunShape, candidates: list[TaskRow], capacity: Capacity, now, *, together: bool
) -> Decision | None:
    """One pass over the candidates in order. `together`: the rate budgets are taken after the
    pass, for every admission of a provider at once (None when they do not fit, nothing taken);
    otherwise each admission takes its own share as it is admitted."""
    decision = Decision([], [], capacity, False)
    shares: dict[tuple[str, str], list[tuple[Admission, int]]] = {}  # by provider: (admission, input tokens)
    for row in candidates:
        if capacity.run_slots <= 0 and row.state == TaskRun.State.READY and row.wait_code == waits.RunCap.code:
            if capacity.agents[row.agent_id].is_schedulable:
                continue  # already says so: nothing to write
        agent = capacity.agents[row.agent_id]
        pair = capacity.pair(row.agent_id)
        limit = capacity.limits.get(pair)
        input_tokens = input_estimate(shape.subtasks[row.subtask_id], shape.goal, agent)
        cost = worst_case_cost(input_tokens, agent, limit)
        reason = admission_block(row, run, capacity, cost)
        wait_s = 0.0
        tokens = TokenReservation()
        if reason is None and limit is not None and together:
            reason, wait_s = provider_backoff(limit, now) or (None, 0.0)
        elif reason is None:
            reason, wait_s, tokens = rate_limit_wait(agent, limit, now, input_tokens)
        if reason is not None:
            decision.budget_blocked |= reason.code == waits.Budget.code
            decision.waiting.append((row, reason, wait_s))
            continue
        admission = Admission(row, cost, tokens)
        decision.admitted.append(admission)
        if together and limit is not None and budgets_of(agent, limit, input_tokens):
            shares.setdefault(pair, []).append((admission, input_tokens))
        capacity.run_slots -= 1
        capacity.agent_slots[row.agent_id] -= 1
        provider_slots = capacity.provider_slots[pair]
        if provider_slots is not None:
            capacity.provider_slots[pair] = provider_slots - 1
        capacity.budget_left -= cost
    taken: list[tuple[ProviderLimit, dict[str, ratelimit.Reservation]]] = []
    for pair, admitted in shares.items():
        limit = capacity.limits[pair]
        got = take_together(limit, [(capacity.agents[a.row.agent_id], n) for a, n in admitted])
        if got is None:
            for earlier_limit, earlier in taken:
                give_back(earlier_limit, earlier)
            return None
        taken.append((limit, got[0]))
        for (admission, _), tokens in zip(admitted, got[1], strict=True):
            admission.tokens = tokens
    return decision
