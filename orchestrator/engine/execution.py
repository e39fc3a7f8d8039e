"""An attempt's records while it runs: claim, request, lease, saved progress (DESIGN §3).

The synchronous database steps of one attempt before its end. The agent host of a worker process
(orchestrator/engine/host.py) runs them on its database threads for the attempts it hosts, and
orchestrator/engine/agent_runner.py decides which to take as the attempt goes. How an attempt ends
(succeeded, failed, timed out, cancelled, handed back, a result that came too late) is
orchestrator/engine/attempt_ends.py; every end is conditional on the lease this module's `owned`
names.

- **Claim**: a conditional update (attempt and task queued → running, with a lease owned by this
  process). It does not lock the run row: a cancelled task is simply no longer queued.
- **Saved progress**: the output, progress and usage so far of all of a host's running attempts,
  in one transaction every few seconds, each conditional on its lease. No run row, no event: what
  viewers see live travels apart (orchestrator/engine/live.py).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from orchestrator import events, sql
from orchestrator.engine import (
    admission,
    attempt_requests,
    context,
    dispatch,
    review_feedback,
    run_shape,
    transitions,
)
from orchestrator.models import Agent, Attempt, ProviderLimit, Run, TaskRun, ToolGrant
from orchestrator.providers.base import AgentRequest, Usage

log = logging.getLogger(__name__)

State = TaskRun.State


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
    # Set by `attempt_ends.complete`: it advanced the run in its own transaction, and these admitted attempts
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
    return TaskRun.objects.filter(state=State.RUNNING, **owned_lookups(claim))


def owned_lookups(claim: Claim) -> dict:
    """`owned`'s conditions but the state, as lookups (transitions.move_tasks)."""
    return {"pk": claim.task.pk, "attempt_count": claim.attempt.number, "lease_owner": claim.worker}


def claim_attempt(attempt_id: int, worker: str) -> Claim | None:
    """queued → running with a lease, or None if the attempt is not ours to run (`claim_attempts`)."""
    return claim_attempts([attempt_id], worker).get(attempt_id)


def claim_attempts(
    attempt_ids: list[int], worker: str, *, more: int = 0, pending: Collection[int] = ()
) -> dict[int, Claim]:
    """Claim every attempt of `attempt_ids` that is still ours to run, and up to `more` other
    attempts queued in the same runs (oldest first; not those of `pending`, delivered to the
    caller already and waiting for a claim of their own); the claims by attempt id.

    Many at once in one transaction: a run's first wave reaches a worker as dozens of broker
    deliveries, one at a time through django-q2's worker loop (on SQLite most of a second for 64,
    the broker's writes queuing with the engine's), and a transaction each kept the last of them
    waiting for the others' (docs/benchmarks.md). So the first delivery of a wave takes as much of
    it as the host has room for (`more`), and so does every delivery while the host has room; the
    broker's later deliveries of those attempts find them running and are dropped. The attempt row
    is the record, the broker only delivers.

    The attempt rows are locked first, as everywhere; should any task have moved meanwhile (a
    cancellation), or the batch fail in the database, it is rolled back and each delivered
    attempt is claimed on its own, exactly as one delivery would be.
    """
    ids = list(dict.fromkeys(attempt_ids))
    if len(ids) > 1 or more > 0:
        try:
            claims = _claim(ids, worker, more, pending)
        except DatabaseError as exc:  # e.g. a deadlock with a cancellation: not a reason to fail them all
            log.warning("claiming %s attempts together failed (%s); claiming each alone", len(ids), exc)
            claims = None
        if claims is not None:
            return claims
    return {attempt_id: claim for attempt_id in ids if (claim := (_claim([attempt_id], worker) or {}).get(attempt_id))}


def _claim(
    attempt_ids: list[int], worker: str, more: int = 0, pending: Collection[int] = ()
) -> dict[int, Claim] | None:
    """queued → running with a lease, for the attempts of `attempt_ids` still queued and up to
    `more` others queued in their runs, in one transaction; None (nothing written) when a task
    did not move with its attempt.

    Each request is built here, from its task's upstream results, and kept on the attempt in the
    statement that claims it (engine/attempt_requests.py): a failed or lost attempt shows what it
    was asked too. The attempt rows are locked and changed before the task rows, as everywhere.
    Statements as text (orchestrator/sql.py): every broker delivery takes this path.
    """
    now = timezone.now()
    with events.atomic():
        attempts = sql.objects(Attempt, lock=True, order_by=("pk",), pk__in=attempt_ids, state=Attempt.State.QUEUED)
        if more > 0:
            # Their runs, even when what was delivered was claimed meanwhile (by another host's
            # first delivery of the wave): the rest of the wave is then still this host's to take.
            task_ids = [a.task_run_id for a in attempts] or [
                task_id for (task_id,) in sql.select(Attempt, ("task_run_id",), pk__in=attempt_ids)
            ]
            exclude = [*attempt_ids, *pending]
            others = queued_in_runs_of(task_ids, exclude=exclude, limit=more) if task_ids else []
            attempts += sql.objects(Attempt, order_by=("pk",), pk__in=others)  # locked by queued_in_runs_of
        if not attempts:
            return {}
        tasks = _claimed_tasks(attempts)
        requests = _requests_of(attempts)
        sql.update(
            Attempt,
            {
                "state": Attempt.State.RUNNING,
                "worker": worker,
                "started_at": now,
                "heartbeat_at": now,
                "request": sql.PerRow({a.pk: attempt_requests.as_record(requests[a.pk]) for a in attempts}),
            },
            pk__in=[a.pk for a in attempts],
        )
        fields = dispatch.execution_lease(worker, now)
        moved = transitions.move_tasks(
            State.RUNNING,
            where={},
            match=(("pk", "attempt_count"), [(a.task_run_id, a.number) for a in attempts]),
            from_states=[State.QUEUED],
            **fields,
        )
        if moved != len(attempts):
            transaction.set_rollback(True)
            return None
        for attempt in attempts:
            mark_started(attempt, worker, now, fields)
        # Read before the commit: a failure here rolls the claims back, so the fallback (each
        # delivery alone) finds them queued still, rather than running with nobody to run them.
        limits: dict[tuple[str, str], ProviderLimit | None] = {}
        for task in tasks.values():
            pair = (task.agent.provider, task.agent.model)
            if pair not in limits:
                limits[pair] = admission.provider_limit(task.agent)
        with_grants = agents_with_tool_grants({task.agent_id for task in tasks.values()})
    return {
        a.pk: Claim(
            a.task_run,
            a,
            worker,
            limits[(a.task_run.agent.provider, a.task_run.agent.model)],
            requests[a.pk],
            has_tool_grants=a.task_run.agent_id in with_grants,
        )
        for a in attempts
    }


def queued_in_runs_of(task_ids: list[int], *, exclude: list[int], limit: int) -> list[int]:
    """Up to `limit` attempts queued in the runs of `task_ids` (not `exclude`), oldest first (the
    order admission queued them in), each its task's current attempt, locked: on PostgreSQL those
    another claim holds are passed over (SKIP LOCKED), so two hosts never wait on each other."""
    attempt, task = sql.quote(Attempt._meta.db_table), sql.quote(TaskRun._meta.db_table)
    lock = " FOR NO KEY UPDATE OF a SKIP LOCKED" if sql.lock_clause() else ""
    of_tasks, task_params = sql.one_of("id", TaskRun._meta.pk, task_ids)
    excluded, excluded_params = sql.one_of("a.id", Attempt._meta.pk, exclude)
    rows = sql.fetch(
        f"SELECT a.id FROM {attempt} a JOIN {task} t ON t.id = a.task_run_id "
        f"WHERE a.state = %s AND t.state = %s AND a.number = t.attempt_count "
        f"AND t.run_id IN (SELECT run_id FROM {task} WHERE {of_tasks}) "
        f"AND NOT ({excluded}) ORDER BY a.id LIMIT %s{lock}",
        [Attempt.State.QUEUED, State.QUEUED, *task_params, *excluded_params, limit],
    )
    return [attempt_id for (attempt_id,) in rows]


def _claimed_tasks(attempts: Sequence[Attempt]) -> dict[int, TaskRun]:
    """The tasks of attempts being claimed, by task id, each with its run, agent and subtask (the
    subtask from its run's shape), set on its attempt too: three reads for the whole batch."""
    tasks = {t.pk: t for t in sql.objects(TaskRun, pk__in=sorted({a.task_run_id for a in attempts}))}
    runs = {r.pk: r for r in sql.objects(Run, pk__in=sorted({t.run_id for t in tasks.values()}))}
    agents = {a.pk: a for a in sql.objects(Agent, pk__in=sorted({t.agent_id for t in tasks.values()}))}
    for task in tasks.values():
        task.run = runs[task.run_id]
        task.agent = agents[task.agent_id]
        task.subtask = run_shape.of(task.run).subtask(task.subtask_id)
    for attempt in attempts:
        attempt.task_run = tasks[attempt.task_run_id]
    return tasks


def _requests_of(attempts: Sequence[Attempt]) -> dict[int, AgentRequest]:
    """The requests of attempts being claimed together, by attempt id (one upstream read per run)."""
    by_run: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        by_run.setdefault(attempt.task_run.run_id, []).append(attempt)
    requests: dict[int, AgentRequest] = {}
    for of_run in by_run.values():
        of_tasks = requests_for(of_run[0].task_run.run, [(a.task_run, a.number) for a in of_run])
        requests.update((a.pk, of_tasks[a.task_run_id]) for a in of_run)
    return requests


def requests_for(
    run: Run, claimed: Sequence[tuple[TaskRun, int]], known: Sequence[TaskRun] = ()
) -> dict[int, AgentRequest]:
    """The requests of tasks of one run claimed together, (task, attempt number) each, by task id:
    their upstreams read in one query (a fan-out's tasks share theirs). `known`: tasks held as they
    now are, not read again (the one whose success takes the step)."""
    shape = run_shape.of(run)
    upstreams = context.upstream_tasks_of(
        run.pk,
        {task.subtask_id: shape.subtasks[task.subtask_id].upstreams for task, _ in claimed},
        known=known,
        shape=shape,
    )
    rejected = review_feedback.rejections(task.pk for task, number in claimed if number > 1)
    return {
        task.pk: build_request(task, number, upstreams[task.subtask_id], rejected.get(task.pk))
        for task, number in claimed
    }


def mark_started(attempt: Attempt, worker: str, now, fields: dict) -> None:
    """A claim just written: the attempt and its task as now saved, and its `task.started` event."""
    task = attempt.task_run
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


def agents_with_tool_grants(agent_ids: Collection[int]) -> set[int]:
    """Which of the agents hold any tool grant (one statement: a scheduling step's claims)."""
    if not agent_ids:
        return set()
    return {agent_id for (agent_id,) in sql.select(ToolGrant, ("agent_id",), agent_id__in=sorted(agent_ids))}


def build_request(
    task: TaskRun,
    attempt_number: int,
    upstreams: list[TaskRun] | None = None,
    rejection: review_feedback.Rejection | None = None,
) -> AgentRequest:
    """The attempt's request. `upstreams`: the task's direct upstreams in plan order, when the
    caller read them already (many claims at once read them in one query). `rejection`: the review
    that rejected the task's previous output, told to the agent (`requests_for` looks it up)."""
    agent = task.agent
    shape = run_shape.of(task.run)
    return AgentRequest(
        agent_name=agent.name,
        provider=agent.provider,
        model=agent.model,
        system_prompt=agent.system_prompt,
        prompt=context.build_prompt(
            task, shape.subtasks.get(task.subtask_id), goal=shape.goal, upstreams=upstreams, rejection=rejection
        ),
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
    a lost attempt's usage so far is kept (see `settlement.settle`). No event, no run row.

    Two statements for all of them (orchestrator/sql.py: a value per row): the attempts that are
    still this worker's, then their tasks that still hold the lease. A host saves every second or
    two for everything it runs, and a statement each held their rows (and, on SQLite, the
    database) long enough to delay the successes behind them."""
    if not items:
        return
    now = timezone.now()
    latest = {claim.attempt.pk: (claim, progress) for claim, progress in items}
    usage = {pk: progress.usage for pk, (_, progress) in latest.items()}
    with transaction.atomic():
        saved = sql.update(  # the attempts first, then the tasks (see renew_leases)
            Attempt,
            {
                "input_tokens": sql.PerRow({pk: u.input_tokens for pk, u in usage.items()}),
                "output_tokens": sql.PerRow({pk: u.output_tokens for pk, u in usage.items()}),
                "cache_read_tokens": sql.PerRow({pk: u.cache_read_tokens for pk, u in usage.items()}),
                "cache_creation_tokens": sql.PerRow({pk: u.cache_creation_tokens for pk, u in usage.items()}),
            },
            returning=("pk",),
            match=(("pk", "worker"), [(pk, claim.worker) for pk, (claim, _) in latest.items()]),
            state=Attempt.State.RUNNING,
        )
        ours = [latest[pk] for (pk,) in saved]
        if ours:
            sql.update(
                TaskRun,
                {
                    "output": sql.PerRow({c.task.pk: p.output for c, p in ours}),
                    "progress": sql.PerRow({c.task.pk: p.progress for c, p in ours}),
                    "progress_at": now,
                },
                match=(
                    ("pk", "attempt_count", "lease_owner"),
                    [(c.task.pk, c.attempt.number, c.worker) for c, _ in ours],
                ),
                state=State.RUNNING,
            )
