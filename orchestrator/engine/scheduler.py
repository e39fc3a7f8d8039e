"""The scheduler step, `advance(run_id)` (DESIGN §3).

One call, one transaction: promote pending tasks whose upstreams are done (the ready rule),
open gates, cascade skips below failures, finish the run when nothing is left, and admit ready
tasks while every cap holds at once — the run's cap, each agent's `max_concurrency` counted
across all runs, the provider's in-flight cap, backoff and per-minute budgets, and the run's
cost budget. Admitted tasks get a new Attempt and one django-q2 task each, enqueued after commit.

Every decision reads the database under row locks taken in one fixed order (run, provider
limits, agents), so several worker processes and several clusters can call `advance` at once
and nothing is admitted twice. On SQLite the immediate transaction serialises writers anyway.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from orchestrator import events, ratelimit
from orchestrator.engine import context, transitions, waits
from orchestrator.models import Agent, Attempt, Checkpoint, Dependency, ProviderLimit, Run, Subtask, TaskRun

log = logging.getLogger(__name__)

State = TaskRun.State


@dataclass
class AdvanceResult:
    run_id: int
    promoted: int = 0
    admitted: list[int] = field(default_factory=list)  # attempt ids admitted (all enqueued but `kept`)
    finished: bool = False
    kept: int | None = None  # with keep_one: the admitted attempt left for the caller to run


def lock_run(run_id: int) -> Run:
    """Take the run's row lock: the first lock of every engine transaction that changes a run."""
    return Run.objects.select_for_update().get(pk=run_id)


def advance(run_id: int, *, keep_one: bool = False) -> AdvanceResult:
    """Move a run forward as far as it can go now. Idempotent: a second call admits nothing new.

    ``keep_one``: the caller, a worker that has just finished a task of this run, runs the first
    admitted attempt itself (``result.kept``), so that attempt is not handed to the broker: no
    queue round trip, and no second delivery that would find it claimed and take a transaction
    to say so. If the caller dies before claiming it, the reaper hands it to the broker once its
    queue lease (GLASSBOX_QUEUED_GRACE_S) expires, as for any attempt lost between commit and
    enqueue.
    """
    result = AdvanceResult(run_id)
    with transaction.atomic():
        run = lock_run(run_id)
        if run.is_finished or run.status == Run.Status.AWAITING_APPROVAL:
            return result
        result.promoted = promote_pending(run)
        if finish_if_done(run):
            result.finished = True
            return result
        if run.status == Run.Status.RUNNING:
            result.admitted = admit(run, keep_one=keep_one)
            if keep_one and result.admitted:
                result.kept = result.admitted[0]
    return result


# --- The ready rule ---------------------------------------------------------------------------


def upstream_map(run: Run, subtask_ids) -> dict[int, list[int]]:
    ups: dict[int, list[int]] = {sid: [] for sid in subtask_ids}
    for up, down in Dependency.objects.filter(plan_id=run.plan_id, downstream_id__in=subtask_ids).values_list(
        "upstream_id", "downstream_id"
    ):
        ups[down].append(up)
    return ups


def promote_pending(run: Run) -> int:
    """Apply the ready rule to every pending task; cascade skips below failed branches.

    The decisions are made on (state, skip_cascades) pairs read in one query; only the tasks
    whose fate is decided now are loaded as rows. A large run has hundreds of pending tasks of
    which one or two change per call, and loading them all (with subtask and agent) made this
    step cost tens of milliseconds of CPU per call (docs/benchmarks.md).
    """
    rows = list(run.tasks.values_list("subtask_id", "state", "skip_cascades", "subtask__gate"))
    pending = [sid for sid, state, _, _ in rows if state == State.PENDING]
    if not pending:
        return 0
    status = {sid: (state, cascades) for sid, state, cascades, _ in rows}
    gates = {sid: gate for sid, _, _, gate in rows}
    ups = upstream_map(run, pending)
    decided: list[tuple[int, str, list[int]]] = []  # (subtask id, new state, blockers), in decision order
    progress = True
    while progress:  # a skip can unblock the decision of a task further down: repeat until stable
        progress = False
        for sid in list(pending):
            blockers = [u for u in ups[sid] if blocks(*status[u])]
            if blockers:
                decided.append((sid, State.SKIPPED, blockers))
                status[sid] = (State.SKIPPED, True)
            elif all(satisfies(*status[u]) for u in ups[sid]):
                promoted = State.WAITING_GATE if gates[sid] == Subtask.Gate.BEFORE else State.READY
                decided.append((sid, promoted, []))
                status[sid] = (promoted, False)
            else:
                continue
            pending.remove(sid)
            progress = True
    if not decided:
        return 0
    tasks = {
        t.subtask_id: t
        for t in run.tasks.filter(subtask_id__in=[d[0] for d in decided]).select_related("subtask", "agent")
    }
    blocker_ids = {u for _, _, blockers in decided for u in blockers}
    keys = dict(Subtask.objects.filter(pk__in=blocker_ids).values_list("id", "key")) if blocker_ids else {}
    now = timezone.now()
    for sid, new, blockers in decided:
        task = tasks[sid]
        if new == State.SKIPPED:
            skip_cascading(task, f"upstream {', '.join(keys[u] for u in blockers)} did not succeed")
        elif new == State.WAITING_GATE:
            open_gate(task, Checkpoint.Kind.BEFORE)
        else:
            transitions.move(task, State.READY, ready_at=now)
            events.record("task.ready", run=run, task=task)
    return len(decided)


def satisfies(state: str, skip_cascades: bool) -> bool:
    return state == State.SUCCEEDED or (state == State.SKIPPED and not skip_cascades)


def blocks(state: str, skip_cascades: bool) -> bool:
    return state in (State.FAILED, State.CANCELLED) or (state == State.SKIPPED and skip_cascades)


def skip_cascading(task: TaskRun, reason: str) -> None:
    transitions.move(task, State.SKIPPED, skip_cascades=True, error=reason, finished_at=timezone.now())
    events.record("task.skipped", run=task.run_id, task=task, message=reason, payload={"reason": reason})


def open_gate(task: TaskRun, kind: str) -> Checkpoint:
    """Hold a task at a human checkpoint: before it starts, or after it produced its output."""
    transitions.move(task, State.WAITING_GATE if kind == Checkpoint.Kind.BEFORE else State.AWAITING_REVIEW)
    checkpoint, created = Checkpoint.objects.get_or_create(
        run_id=task.run_id, task_run=task, kind=kind, defaults={"status": Checkpoint.Status.PENDING}
    )
    reopened = not created and checkpoint.status != Checkpoint.Status.PENDING
    if reopened:
        # A retried task asks again: one checkpoint per task and kind, its earlier decision kept in
        # the event log. Without this the task would wait on a decision already taken, forever.
        checkpoint.status, checkpoint.decided_by, checkpoint.decided_at, checkpoint.comment = (
            Checkpoint.Status.PENDING,
            None,
            None,
            "",
        )
        checkpoint.save(update_fields=["status", "decided_by", "decided_at", "comment"])
    events.record(
        "checkpoint.created",
        run=task.run_id,
        task=task,
        message=f"{task.subtask.title}: approval needed {'before it starts' if kind == 'before' else 'of its output'}",
        payload={"checkpoint": checkpoint.pk, "kind": kind, "reopened": reopened},
    )
    return checkpoint


# --- Finishing ----------------------------------------------------------------------------------


def finish_if_done(run: Run) -> bool:
    """End the run when every task is terminal, with a summary a person can read."""
    counts = Counter(run.tasks.values_list("state", flat=True))
    if any(state not in TaskRun.TERMINAL for state in counts):
        return False
    failed = list(run.tasks.filter(state=State.FAILED).select_related("subtask"))
    cascaded = run.tasks.filter(state=State.SKIPPED, skip_cascades=True).count()
    if run.status == Run.Status.CANCELLED:
        return True
    if failed or cascaded or counts.get(State.CANCELLED):
        parts = [f"{t.subtask.key} ({t.error or 'failed'})" for t in failed[:10]]
        summary = f"{len(failed)} of {sum(counts.values())} tasks failed"
        if parts:
            summary += ": " + "; ".join(parts)
        if cascaded:
            summary += f"; {cascaded} skipped because an upstream task did not succeed"
        end_run(run, Run.Status.FAILED, summary)
    else:
        done = counts.get(State.SUCCEEDED, 0)
        skipped = counts.get(State.SKIPPED, 0)
        summary = f"all {done} tasks succeeded" + (f", {skipped} skipped by a person" if skipped else "")
        end_run(run, Run.Status.SUCCEEDED, summary)
    return True


def end_run(run: Run, status: str, summary: str) -> None:
    transitions.move(run, status, summary=summary, finished_at=timezone.now())
    events.record(f"run.{status}", run=run, message=summary, payload={"status": status, "summary": summary})


# --- Admission -------------------------------------------------------------------------------------


@dataclass
class Capacity:
    """Slots left under every cap, read once under lock and spent as tasks are admitted."""

    run_slots: int
    agent_slots: dict[int, int]
    provider_slots: dict[tuple[str, str], int | None]
    limits: dict[tuple[str, str], ProviderLimit]
    budget_left: Decimal


def ready_queryset(run: Run, now):
    """Ready tasks in admission order: longest remaining path first, then priority, then age."""
    return (
        run.tasks.filter(state__in=TaskRun.ADMISSIBLE)
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .select_related("subtask", "agent")
        .order_by("-rank", "-subtask__priority", "ready_at", "pk")
    )


def read_capacity(run: Run, agent_ids, pairs) -> Capacity:
    """Slots left under every cap, for the given agents and (provider, model) pairs."""
    agent_ids = sorted(set(agent_ids))
    pairs = sorted(set(pairs))
    # Lock order: run (held), provider limits, agents. Held to commit: admission is serial per agent.
    limit_q = Q(pk__in=[])
    for provider, model in pairs:
        limit_q |= Q(provider=provider, model=model)
    limits = {
        (pl.provider, pl.model): pl for pl in ProviderLimit.objects.select_for_update().filter(limit_q).order_by("pk")
    }
    agents = {a.pk: a for a in Agent.objects.select_for_update().filter(pk__in=agent_ids).order_by("pk")}
    active = TaskRun.objects.filter(state__in=TaskRun.ACTIVE)
    agent_busy = dict(active.filter(agent_id__in=agent_ids).order_by().values_list("agent_id").annotate(n=Count("pk")))
    provider_slots: dict[tuple[str, str], int | None] = {}
    for pair in pairs:
        limit = limits.get(pair)
        cap = limit and (limit.effective_in_flight or limit.max_in_flight)
        if cap:
            busy = active.filter(agent__provider=pair[0], agent__model=pair[1]).count()
            provider_slots[pair] = cap - busy
        else:
            provider_slots[pair] = None
    return Capacity(
        run_slots=run.cap - run.tasks.filter(state__in=TaskRun.ACTIVE).count(),
        agent_slots={aid: agents[aid].max_concurrency - agent_busy.get(aid, 0) for aid in agent_ids},
        provider_slots=provider_slots,
        limits=limits,
        budget_left=run.budget_usd - run.cost_usd - run.reserved_usd,
    )


def worst_case_cost(task: TaskRun, limit: ProviderLimit | None) -> Decimal:
    """The most one attempt can cost: reserved at admission, settled with the real usage."""
    if limit is None or not (limit.input_price_per_mtok or limit.output_price_per_mtok):
        return Decimal("0")
    input_tokens = max(task.subtask.estimated_input_tokens, context.prompt_token_bound(task))
    return limit.cost(input_tokens, task.agent.max_output_tokens)


# A throttled task is looked at again after at most this long (the tick's pace), even if the
# whole budget frees later: one request's worth usually frees sooner.
THROTTLE_RECHECK_S = 1.0


def admission_key(provider: str, model: str, suffix: str) -> str:
    """The scheduler's shared per-minute budget for one provider, model and unit (rpm, itpm, otpm)."""
    return f"admit:{provider}:{model}:{suffix}"


def rate_limit_wait(task: TaskRun, limit: ProviderLimit | None, now) -> tuple[waits.Wait | None, float]:
    """Take this task's share of the provider's per-minute budgets, or say why and how long to wait."""
    if limit is None:
        return None, 0.0
    if limit.backoff_until and limit.backoff_until > now:
        return waits.ProviderBackoff(str(limit), limit.backoff_until), (limit.backoff_until - now).total_seconds()
    configured = [
        ("rpm", 1, limit.requests_per_minute, waits.RateLimitRequests),
        ("itpm", task.subtask.estimated_input_tokens, limit.input_tokens_per_minute, waits.RateLimitInput),
        ("otpm", task.agent.max_output_tokens, limit.output_tokens_per_minute, waits.RateLimitOutput),
    ]
    budgets = [(suffix, amount, per_minute, wait) for suffix, amount, per_minute, wait in configured if per_minute]
    for suffix, amount, per_minute, wait in budgets:
        remaining, reset_s = ratelimit.peek(admission_key(limit.provider, limit.model, suffix), per_minute)
        if remaining < min(amount, per_minute):
            return wait(str(limit)), reset_s
    for suffix, amount, per_minute, wait in budgets:
        wait_s = ratelimit.acquire(admission_key(limit.provider, limit.model, suffix), amount, per_minute)
        if wait_s:
            return wait(str(limit)), wait_s
    return None, 0.0


def admission_block(task: TaskRun, cap: Capacity, now) -> waits.Wait | None:
    """Why `task` cannot start now (None when it can), spending nothing."""
    if not task.agent.is_schedulable:
        return waits.AgentInactive(task.agent.name, task.agent.status)
    if cap.run_slots <= 0:
        return waits.RunCap(task.run.cap)
    if cap.agent_slots[task.agent_id] <= 0:
        return waits.AgentLimit(task.agent.name, task.agent.max_concurrency)
    pair = (task.agent.provider, task.agent.model)
    slots = cap.provider_slots[pair]
    if slots is not None and slots <= 0:
        return waits.ProviderInFlight(*pair)
    if worst_case_cost(task, cap.limits.get(pair)) > cap.budget_left:
        return waits.Budget()
    return None


# Ready tasks are read in pages of (free run slots + ADMIT_PAGE) while run slots are left.
ADMIT_PAGE = 4


def admit(run: Run, *, keep_one: bool = False) -> list[int]:
    """Admit ready tasks in order while every cap holds; show every other ready task why it waits.

    Candidates are read page by page only while run slots are left. Once the run's cap is
    reached, the remaining candidates all wait for it: only those not already showing that
    reason (newly ready or throttled ones, or whose agent is no longer active) are loaded and
    noted, so a run with hundreds of ready tasks does not load them all on every call.
    """
    now = timezone.now()
    ready = ready_queryset(run, now)
    groups = list(ready.order_by().values_list("agent_id", "agent__provider", "agent__model").distinct())
    if not groups:
        return []
    capacity = read_capacity(run, [g[0] for g in groups], [(g[1], g[2]) for g in groups])
    admitted: list[int] = []
    seen: list[int] = []
    budget_blocked = False

    def consider(task: TaskRun) -> None:
        nonlocal budget_blocked
        task.run = run
        seen.append(task.pk)
        reason = admission_block(task, capacity, now)
        pair = (task.agent.provider, task.agent.model)
        limit = capacity.limits.get(pair)
        wait_s = 0.0
        if reason is None:
            reason, wait_s = rate_limit_wait(task, limit, now)
        if reason is not None:
            budget_blocked |= reason.code == waits.Budget.code
            note_waiting(task, reason, throttled_for=wait_s, now=now)
            return
        reserve = worst_case_cost(task, limit)
        admitted.append(dispatch(task, reserve, now, enqueue=not (keep_one and not admitted)).pk)
        capacity.run_slots -= 1
        capacity.agent_slots[task.agent_id] -= 1
        provider_slots = capacity.provider_slots[pair]
        if provider_slots is not None:
            capacity.provider_slots[pair] = provider_slots - 1
        capacity.budget_left -= reserve
        run.reserved_usd += reserve

    while capacity.run_slots > 0:
        page = list(ready.exclude(pk__in=seen)[: capacity.run_slots + ADMIT_PAGE])
        if not page:
            break
        for task in page:
            if capacity.run_slots <= 0:
                break  # the rest of the page is noted below with every other task held by the cap
            consider(task)
    if capacity.run_slots <= 0:
        holding = ready.exclude(pk__in=seen).exclude(
            state=State.READY, wait_code=waits.RunCap.code, agent__status=Agent.Status.ACTIVE
        )
        for task in holding:
            consider(task)
    active = run.tasks.filter(state__in=TaskRun.ACTIVE).count()
    run.peak_running = max(run.peak_running, active)
    run.save(update_fields=["reserved_usd", "peak_running"])
    if budget_blocked and active == 0:
        stop_over_budget(run)
    return admitted


def note_waiting(task: TaskRun, reason: waits.Wait, *, throttled_for: float = 0.0, now=None) -> None:
    """Show why a ready task waits; an event only when the reason changes.

    A task held back by the provider's rate budget is THROTTLED and not looked at again until
    the budget may have freed (at most THROTTLE_RECHECK_S later); a task held by a cap stays
    READY and is admitted as soon as a slot frees. The sentence takes part in "changes" only
    because it is what people see: a new one (another backoff deadline) must reach the page.
    """
    state = State.THROTTLED if throttled_for else State.READY
    if throttled_for:
        task.not_before = (now or timezone.now()) + timedelta(seconds=min(throttled_for, THROTTLE_RECHECK_S))
        task.save(update_fields=["not_before"])
    if task.wait_code == reason.code and task.wait_reason == reason.message and task.state == state:
        return
    transitions.move(task, state, wait_code=reason.code, wait_reason=reason.message)
    events.record(
        "task.throttled" if throttled_for else "task.waiting",
        run=task.run_id,
        task=task,
        message=reason.message,
        payload={"reason": reason.message, "code": reason.code, "state": state},
    )


def dispatch(task: TaskRun, reserve: Decimal, now, *, enqueue: bool = True) -> Attempt:
    """Admit one task: a new Attempt, the task queued, one q2 task enqueued after commit
    (unless the worker that called `advance` runs it itself: see advance's keep_one)."""
    transitions.move(
        task,
        State.QUEUED,
        attempt_count=task.attempt_count + 1,
        wait_reason="",
        wait_code="",
        lease_owner="",
        lease_expires_at=now + timedelta(seconds=settings.GLASSBOX_QUEUED_GRACE_S),
    )
    attempt = Attempt.objects.create(task_run=task, number=task.attempt_count, reserved_usd=reserve)
    events.record(
        "task.queued",
        run=task.run_id,
        task=task,
        payload={
            "attempt": attempt.number,
            "latency_ms": int((now - task.ready_at).total_seconds() * 1000) if task.ready_at else None,
        },
    )
    if enqueue:
        transaction.on_commit(lambda: enqueue_attempt(attempt.pk))
    return attempt


def enqueue_attempt(attempt_id: int) -> None:
    """Hand an admitted attempt to the broker. If the broker is down, the reaper hands it over again
    after GLASSBOX_QUEUED_GRACE_S: the attempt row is the record, the broker only delivers."""
    from django_q.tasks import async_task

    try:
        async_task("orchestrator.tasks.execute_attempt", attempt_id, task_name=f"attempt-{attempt_id}", save=False)
    except Exception as exc:  # a broker outage must not break the commit callbacks after this one
        log.warning(
            "attempt %s not handed to the broker (%s: %s); the reaper will retry", attempt_id, type(exc).__name__, exc
        )


def stop_over_budget(run: Run) -> None:
    """Nothing is running and the next task would pass the budget: the run cannot go on."""
    spent = run.cost_usd
    message = (
        f"stopped: the budget of ${run.budget_usd:.2f} does not cover the next task "
        f"(spent ${spent:.4f}); raise the budget and retry"
    )
    for task in run.tasks.filter(state__in=[State.PENDING, *TaskRun.ADMISSIBLE, State.WAITING_GATE]):
        transitions.move(task, State.CANCELLED, error="run over budget", finished_at=timezone.now())
        events.record("task.cancelled", run=run, task=task, message="run over budget")
    close_pending_checkpoints(run, "run over budget")
    end_run(run, Run.Status.OVER_BUDGET, message)


def close_pending_checkpoints(run: Run, why: str) -> None:
    """A run that stops leaves no question open: its pending checkpoints are closed as rejected,
    with the reason, so nobody decides a gate whose task was already cancelled."""
    run.checkpoints.filter(status=Checkpoint.Status.PENDING).update(
        status=Checkpoint.Status.REJECTED, decided_at=timezone.now(), comment=why
    )
