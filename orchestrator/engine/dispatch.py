"""Dispatch: how the tasks a scheduling step admitted start (DESIGN §3, §9).

Each admitted task gets a new Attempt, in the step's own transaction. The host whose attempt's
success took the step keeps as many as it has room for (`kept_share`): they are claimed for it
right here — running, leased, their requests built — and start without a broker round trip. The
others are queued and handed to django-q2 after commit (`enqueue_attempt`), through one broker
per process; a worker's host claims each on delivery (execution.claim_attempts). The attempt row
is the record, the broker only delivers: an attempt the broker lost is handed over again by the
reaper.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Collection, Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, OuterRef, Subquery

from orchestrator import events, sql
from orchestrator.engine import admission, attempt_requests, run_shape, transitions
from orchestrator.models import Agent, Attempt, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import AgentRequest

log = logging.getLogger(__name__)

State = TaskRun.State


def kept_share(admitted: int, at_most: int) -> int:
    """How many of `admitted` attempts the host that called `advance` keeps, when it has room for
    `at_most`: all it has room for. The host is an event loop with many slots, so what it keeps
    starts at once, claimed in the step's own transaction; each attempt handed to the broker
    instead waits for a delivery and takes a claim of its own (a transaction of its own on the
    database the whole cluster writes to). The benchmark measured both rules: keeping a share per
    worker process spread a fan-out no faster and made a layered DAG at cap 64 slower (13.2 s
    against 12.7 s on SQLite, docs/benchmarks.md). What it has no room for goes to the broker."""
    if at_most <= 0 or admitted <= 0:
        return 0
    return min(at_most, admitted)


def start_attempts(
    run: Run,
    admitted: list[admission.Admission],
    now,
    *,
    keep: int = 0,
    claim_for: str = "",
    limits: dict[tuple[str, str], ProviderLimit] | None = None,
    agents: dict[int, Agent] | None = None,
    ended: Sequence[TaskRun] = (),
    fresh: Collection[int] = (),
) -> tuple[list[int], list]:
    """Start the admitted tasks, each with a new Attempt: the ones the caller keeps (`kept_share`
    of `keep`) claimed at once by `claim_for` when given (running, leased), else queued for it; the
    others queued and handed to the broker after commit. Returns the attempt ids, and the claims
    of those claimed here (execution.Claim). `agents`: the admitted tasks' agents as admission
    read them under lock (else the claims read them). `fresh`: ids of tasks this step found ready,
    still pending in the database: they move straight on, their ready time written with them."""
    if not admitted:
        return [], []
    keep_earlier_outputs([a.row.pk for a in admitted if a.row.attempt_count])
    kept = kept_share(len(admitted), keep)
    claimed, queued = (admitted[:kept], admitted[kept:]) if claim_for else ([], admitted)
    lease = {"lease_expires_at": now + timedelta(seconds=settings.GLASSBOX_QUEUED_GRACE_S)}
    claimed_tasks: list[TaskRun] = []
    for group, state, fields in (
        (queued, State.QUEUED, {"lease_owner": "", **lease}),
        (claimed, State.RUNNING, execution_lease(claim_for, now)),
    ):
        if not group:
            continue
        newly = [a.row for a in group if a.row.pk in fresh]
        if newly:
            ready_at = newly[0].ready_at  # when this step found them ready (all alike)
            fields = {
                **fields,
                "ready_at": sql.PerRow({row.pk: ready_at for row in newly}) if len(newly) < len(group) else ready_at,
            }
        result = transitions.move_tasks(
            state,
            where={"pk__in": [a.row.pk for a in group]},
            from_states=[*TaskRun.ADMISSIBLE, State.PENDING] if newly else list(TaskRun.ADMISSIBLE),
            via=State.READY,
            returning=group is claimed,  # the claimed tasks as they now are: their requests are built from them
            attempt_count=sql.Add(1),
            wait_reason="",
            wait_code="",
            **fields,
        )
        if isinstance(result, list):
            claimed_tasks = result
        moved = len(result) if isinstance(result, list) else result
        if moved != len(group):
            raise RuntimeError(f"run {run.pk}: {len(group)} tasks admitted but {moved} moved to {state}")
    requests = claimed_requests(run, claimed_tasks, agents, ended)
    attempts = [
        Attempt(
            task_run_id=a.row.pk,
            number=a.row.attempt_count + 1,
            queued_at=now,
            reserved_usd=a.reserve,
            reserved_input_tokens=a.tokens.input_tokens,
            reserved_output_tokens=a.tokens.output_tokens,
            rate_window=a.tokens.window,
            **(
                {
                    "state": Attempt.State.RUNNING,
                    "worker": claim_for,
                    "started_at": now,
                    "heartbeat_at": now,
                    "request": attempt_requests.as_record(requests[a.row.pk][1]),
                }
                if a.row.pk in requests
                else {}
            ),
        )
        for a in claimed + queued
    ]
    sql.insert(Attempt, attempts)
    claims = []
    for a, attempt in zip(claimed + queued, attempts, strict=True):
        a.row.attempt_count, a.row.wait_code, a.row.wait_reason = attempt.number, "", ""
        a.row.state = State.RUNNING if a.row.pk in requests else State.QUEUED
        events.record(
            "task.queued",
            run=run,
            task=a.row,
            payload={
                "attempt": attempt.number,
                "latency_ms": int((now - a.row.ready_at).total_seconds() * 1000) if a.row.ready_at else None,
            },
        )
        if a.row.pk in requests:
            task, request, has_tool_grants = requests[a.row.pk]
            events.record(
                "task.started",
                run=run,
                task=task,
                actor_name=f"agent:{task.agent.name}",
                payload={"attempt": attempt.number, "worker": claim_for},
            )
            claims.append(make_claim(task, attempt, claim_for, limits, request, has_tool_grants))
    ids = [attempt.pk for attempt in attempts]
    if not claim_for:
        for attempt_id in ids[kept:]:
            transaction.on_commit(functools.partial(enqueue_attempt, attempt_id))
    else:
        for attempt_id in ids[len(claimed) :]:
            transaction.on_commit(functools.partial(enqueue_attempt, attempt_id))
    return ids, claims


def keep_earlier_outputs(task_ids: list[int]) -> None:
    """Copy the text each of these tasks holds onto the attempt that wrote it, its latest, before
    a new attempt of the task starts and its claim clears the text: a retry (automatic or a
    person's) threw away the partial output of the attempt before it, which its page then said
    was "not kept". Nothing for a task's first attempt (the chain's hot path reads nothing more);
    an attempt that already keeps a text (a lost one's, a re-run's) keeps its own."""
    if not task_ids:
        return
    latest = Attempt.objects.filter(task_run_id__in=task_ids, number=F("task_run__attempt_count"), output="").exclude(
        task_run__output=""
    )
    latest.update(output=Subquery(TaskRun.objects.filter(pk=OuterRef("task_run_id")).values("output")[:1]))


def execution_lease(worker: str, now) -> dict:
    """The fields of a task a worker has claimed (as execution.claim_attempt sets them)."""
    return {
        "lease_owner": worker,
        "lease_expires_at": now + timedelta(seconds=settings.GLASSBOX_LEASE_S),
        "started_at": now,
        "progress": 0,
        "progress_at": None,
        "output": "",
    }


def claimed_requests(
    run: Run,
    tasks: list[TaskRun],
    agents: dict[int, Agent] | None = None,
    ended: Sequence[TaskRun] = (),
) -> dict[int, tuple[TaskRun, AgentRequest, bool]]:
    """The tasks claimed at admission (as their UPDATE returned them), given what their requests
    need, the requests (execution.build_request) and whether their agents hold tool grants, by
    task id. Their subtasks come from the run's shape and their agents from `agents` (admission's
    locked rows, read in this transaction): no read of the tasks again. `ended`: the tasks whose
    successes take the step (advance_locked), whose outputs their requests quote."""
    if not tasks:
        return {}
    from orchestrator.engine import execution  # below it in the engine's flow; imports the scheduler

    known = dict(agents or {})
    missing = {task.agent_id for task in tasks} - known.keys()
    if missing:
        known.update((agent.pk, agent) for agent in sql.objects(Agent, pk__in=sorted(missing)))
    shape = run_shape.of(run)
    for task in tasks:
        task.run = run  # as locked by this step (its plan's goal comes from the run's shape)
        task.agent = known[task.agent_id]
        task.subtask = shape.subtask(task.subtask_id)
    agents_of_tasks = {task.agent_id: task.agent for task in tasks}.values()
    if all(hasattr(agent, "has_tool_grants") for agent in agents_of_tasks):  # read with admission's lock
        with_grants = {agent.pk for agent in agents_of_tasks if getattr(agent, "has_tool_grants")}  # noqa: B009
    else:
        with_grants = execution.agents_with_tool_grants({agent.pk for agent in agents_of_tasks})
    requests = execution.requests_for(run, [(task, task.attempt_count) for task in tasks], known=ended)
    return {task.pk: (task, requests[task.pk], task.agent_id in with_grants) for task in tasks}


def make_claim(task: TaskRun, attempt: Attempt, worker: str, limits, request, has_tool_grants: bool):
    from orchestrator.engine import execution

    limit = (limits or {}).get((task.agent.provider, task.agent.model))
    return execution.Claim(task, attempt, worker, limit, request, has_tool_grants=has_tool_grants)


def enqueue_attempt(attempt_id: int) -> None:
    """Hand an admitted attempt to the broker. If the broker is down, the reaper hands it over again
    after GLASSBOX_QUEUED_GRACE_S: the attempt row is the record, the broker only delivers."""
    from django_q.tasks import async_task

    try:
        async_task(
            "orchestrator.tasks.execute_attempt",
            attempt_id,
            task_name=f"attempt-{attempt_id}",
            save=False,
            broker=process_broker(),
        )
    except Exception as exc:  # a broker outage must not break the commit callbacks after this one
        log.warning(
            "attempt %s not handed to the broker (%s: %s); the reaper will retry", attempt_id, type(exc).__name__, exc
        )


_broker: tuple[int, object] | None = None  # (pid, broker) of this process


def process_broker():
    """This process's django-q2 broker, made once. `async_task` without one makes a broker per
    call, and the Redis broker's is a new client: a connection set up and torn down for every
    attempt handed over (15 of them in a fan-out's first step, ~2 ms each). Its client is
    thread-safe and pools its connections, dropping them in a forked child (redis-py checks the
    pid); the pid here makes a forked worker build its own all the same."""
    global _broker
    from django_q.brokers import get_broker

    pid = os.getpid()
    if _broker is None or _broker[0] != pid:
        _broker = (pid, get_broker())
    return _broker[1]
