"""One typed serialiser per model: `<model>_to_dict(obj) -> <Model>Dict` (a TypedDict).

The JSON download of a run, the JSON API and anything else that turns rows into JSON use these
functions, so every consumer sees the same field names and formats: money as a decimal string
(never a float: "0.001234"), times as ISO 8601 in UTC or None, foreign keys as the other row's
natural key (agent name, subtask key, user name).

`run_export(run)` is the whole record of one run (plan, tasks with their attempts,
checkpoints); `run_markdown(run)` is the same result as a Markdown document for people.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict

from orchestrator.models import Agent, Attempt, Checkpoint, Dependency, Event, Plan, Run, Subtask, TaskRun

EXPORT_FORMAT = "glassbox.run/1"


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _money(value: Decimal | None) -> str:
    return format(value if value is not None else Decimal("0"), "f")


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


# --- Agent ----------------------------------------------------------------------------------------


class AgentDict(TypedDict):
    name: str
    role: str
    capabilities: list
    provider: str
    model: str
    status: str
    max_concurrency: int
    timeout_s: int
    max_retries: int
    max_output_tokens: int


def agent_to_dict(agent: Agent) -> AgentDict:
    return AgentDict(
        name=agent.name,
        role=agent.role,
        capabilities=list(agent.capabilities or []),
        provider=agent.provider,
        model=agent.model,
        status=agent.status,
        max_concurrency=agent.max_concurrency,
        timeout_s=agent.timeout_s,
        max_retries=agent.max_retries,
        max_output_tokens=agent.max_output_tokens,
    )


# --- Plan, Subtask, Dependency ------------------------------------------------------------------


class EstimateDict(TypedDict):
    input_tokens: int
    output_tokens: int


class SubtaskDict(TypedDict):
    key: str
    title: str
    instructions: str
    agent: str
    depends_on: list[str]
    gate: str
    priority: int
    timeout_s: int | None
    max_retries: int | None
    estimate: EstimateDict


def subtask_to_dict(subtask: Subtask, depends_on: list[str] | None = None) -> SubtaskDict:
    """`depends_on` may be given by a caller that already read the edges (saves a query)."""
    if depends_on is None:
        depends_on = list(
            subtask.upstream_edges.order_by("upstream__position").values_list("upstream__key", flat=True)
        )
    return SubtaskDict(
        key=subtask.key,
        title=subtask.title,
        instructions=subtask.instructions,
        agent=subtask.agent.name,
        depends_on=depends_on,
        gate=subtask.gate,
        priority=subtask.priority,
        timeout_s=subtask.timeout_s,
        max_retries=subtask.max_retries,
        estimate=EstimateDict(
            input_tokens=subtask.estimated_input_tokens, output_tokens=subtask.estimated_output_tokens
        ),
    )


class DependencyDict(TypedDict):
    upstream: str
    downstream: str


def dependency_to_dict(dependency: Dependency) -> DependencyDict:
    return DependencyDict(upstream=dependency.upstream.key, downstream=dependency.downstream.key)


class PlanDict(TypedDict):
    id: int
    goal: str
    source: str
    source_name: str
    created_by: str | None
    created_at: str | None
    subtasks: list[SubtaskDict]
    dependencies: list[DependencyDict]


def plan_to_dict(plan: Plan) -> PlanDict:
    """The plan in the shape of a plan file (subtasks with depends_on) plus its edge list."""
    subtasks = list(plan.subtasks.select_related("agent").order_by("position"))
    edges = list(plan.dependencies.select_related("upstream", "downstream").order_by("id"))
    ups: dict[int, list[str]] = {s.pk: [] for s in subtasks}
    for edge in edges:
        ups.setdefault(edge.downstream_id, []).append(edge.upstream.key)
    return PlanDict(
        id=plan.pk,
        goal=plan.goal,
        source=plan.source,
        source_name=plan.source_name,
        created_by=_username(plan.created_by),
        created_at=_time(plan.created_at),
        subtasks=[subtask_to_dict(s, ups.get(s.pk, [])) for s in subtasks],
        dependencies=[dependency_to_dict(e) for e in edges],
    )


# --- Run, TaskRun, Attempt ----------------------------------------------------------------------


class RunDict(TypedDict):
    id: int
    plan: int
    goal: str
    status: str
    summary: str
    cap: int
    budget_usd: str
    failure_policy: str
    launched_by: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: str
    reserved_usd: str
    peak_running: int
    last_event_seq: int


def run_to_dict(run: Run) -> RunDict:
    return RunDict(
        id=run.pk,
        plan=run.plan_id,
        goal=run.plan.goal,
        status=run.status,
        summary=run.summary,
        cap=run.cap,
        budget_usd=_money(run.budget_usd),
        failure_policy=run.failure_policy,
        launched_by=_username(run.launched_by),
        created_at=_time(run.created_at),
        started_at=_time(run.started_at),
        finished_at=_time(run.finished_at),
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cost_usd=_money(run.cost_usd),
        reserved_usd=_money(run.reserved_usd),
        peak_running=run.peak_running,
        last_event_seq=run.last_event_seq,
    )


class AttemptDict(TypedDict):
    number: int
    state: str
    worker: str
    queued_at: str | None
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: str
    error: str
    late_result_discarded: bool


def attempt_to_dict(attempt: Attempt) -> AttemptDict:
    duration = None
    if attempt.started_at and attempt.finished_at:
        duration = round((attempt.finished_at - attempt.started_at).total_seconds(), 3)
    return AttemptDict(
        number=attempt.number,
        state=attempt.state,
        worker=attempt.worker,
        queued_at=_time(attempt.queued_at),
        started_at=_time(attempt.started_at),
        finished_at=_time(attempt.finished_at),
        duration_s=duration,
        input_tokens=attempt.input_tokens,
        output_tokens=attempt.output_tokens,
        cost_usd=_money(attempt.cost_usd),
        error=attempt.error,
        late_result_discarded=attempt.late_result_discarded,
    )


class TaskRunDict(TypedDict):
    id: int
    key: str
    title: str
    agent: str
    state: str
    wait_reason: str
    progress: int
    output: str
    summary: str
    error: str
    input_tokens: int
    output_tokens: int
    cost_usd: str
    attempt_count: int
    ready_at: str | None
    started_at: str | None
    finished_at: str | None
    attempts: list[AttemptDict]


def task_run_to_dict(task: TaskRun, attempts: list[Attempt] | None = None) -> TaskRunDict:
    """`attempts` may be given by a caller that prefetched them (saves a query per task)."""
    if attempts is None:
        attempts = list(task.attempts.order_by("number"))
    return TaskRunDict(
        id=task.pk,
        key=task.subtask.key,
        title=task.subtask.title,
        agent=task.agent.name,
        state=task.state,
        wait_reason=task.wait_reason,
        progress=task.progress,
        output=task.output,
        summary=task.summary,
        error=task.error,
        input_tokens=task.input_tokens,
        output_tokens=task.output_tokens,
        cost_usd=_money(task.cost_usd),
        attempt_count=task.attempt_count,
        ready_at=_time(task.ready_at),
        started_at=_time(task.started_at),
        finished_at=_time(task.finished_at),
        attempts=[attempt_to_dict(a) for a in attempts],
    )


# --- Checkpoint, Event ----------------------------------------------------------------------------


class CheckpointDict(TypedDict):
    id: int
    kind: str
    task: str | None
    status: str
    created_at: str | None
    decided_by: str | None
    decided_at: str | None
    comment: str


def checkpoint_to_dict(checkpoint: Checkpoint) -> CheckpointDict:
    return CheckpointDict(
        id=checkpoint.pk,
        kind=checkpoint.kind,
        task=checkpoint.task_run.subtask.key if checkpoint.task_run_id else None,
        status=checkpoint.status,
        created_at=_time(checkpoint.created_at),
        decided_by=_username(checkpoint.decided_by),
        decided_at=_time(checkpoint.decided_at),
        comment=checkpoint.comment,
    )


class EventDict(TypedDict):
    id: int
    run: int | None
    seq: int | None
    type: str
    actor_kind: str
    actor: str
    task: str | None
    agent: str | None
    message: str
    payload: dict[str, Any]
    created_at: str | None


def event_to_dict(event: Event) -> EventDict:
    return EventDict(
        id=event.pk,
        run=event.run_id,
        seq=event.seq,
        type=event.type,
        actor_kind=event.actor_kind,
        actor=event.actor_name,
        task=event.task_run.subtask.key if event.task_run_id else None,
        agent=event.agent.name if event.agent_id else None,
        message=event.message,
        payload=dict(event.payload or {}),
        created_at=_time(event.created_at),
    )


# --- A whole run --------------------------------------------------------------------------------


class RunExportDict(TypedDict):
    format: str
    run: RunDict
    plan: PlanDict
    agents: list[AgentDict]
    tasks: list[TaskRunDict]
    final_tasks: list[str]
    checkpoints: list[CheckpointDict]


def run_tasks(run: Run) -> list[TaskRun]:
    return list(
        run.tasks.select_related("subtask", "agent").prefetch_related("attempts").order_by("subtask__position")
    )


def final_task_keys(run: Run) -> list[str]:
    """Keys of the plan's sinks (no downstream task): the fan-in result of the run."""
    with_downstream = set(run.plan.dependencies.values_list("upstream_id", flat=True))
    return [
        key
        for sid, key in run.plan.subtasks.order_by("position").values_list("id", "key")
        if sid not in with_downstream
    ]


def run_export(run: Run) -> RunExportDict:
    run = Run.objects.select_related("plan", "launched_by").get(pk=run.pk)
    tasks = run_tasks(run)
    agents = {t.agent.pk: t.agent for t in tasks}
    return RunExportDict(
        format=EXPORT_FORMAT,
        run=run_to_dict(run),
        plan=plan_to_dict(run.plan),
        agents=[agent_to_dict(a) for a in sorted(agents.values(), key=lambda a: a.name)],
        tasks=[task_run_to_dict(t, sorted(t.attempts.all(), key=lambda a: a.number)) for t in tasks],
        final_tasks=final_task_keys(run),
        checkpoints=[
            checkpoint_to_dict(c)
            for c in run.checkpoints.select_related("task_run__subtask", "decided_by").order_by("created_at", "pk")
        ],
    )


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def run_markdown(run: Run) -> str:
    """The run's result as a Markdown document: the final output first, then every task's.

    Agent output is copied as written (it is Markdown already); titles and the goal are put
    on one line so that they cannot break the document's headings.
    """
    data = run_export(run)
    r = data["run"]
    finals = set(data["final_tasks"])
    lines = [
        f"# Run {r['id']}: {_one_line(r['goal'])}",
        "",
        f"- Status: {r['status']}" + (f" ({_one_line(r['summary'])})" if r["summary"] else ""),
        f"- Started: {r['started_at'] or 'not started'}; finished: {r['finished_at'] or 'not finished'}",
        f"- Cost: ${Decimal(r['cost_usd']):.4f} of a ${Decimal(r['budget_usd']):.2f} budget; "
        f"tokens: {r['input_tokens']:,} in, {r['output_tokens']:,} out",
        f"- Tasks: {len(data['tasks'])}",
        "",
    ]
    ordered = [t for t in data["tasks"] if t["key"] in finals] + [t for t in data["tasks"] if t["key"] not in finals]
    if ordered and ordered[0]["key"] in finals:
        lines += ["## Result", ""]
    for index, task in enumerate(ordered):
        if index == len(finals) and finals:
            lines += ["## Every task", ""]
        level = "###"
        lines.append(f"{level} {_one_line(task['title'])} (`{task['key']}`, {task['agent']}, {task['state']})")
        lines.append("")
        if task["output"]:
            lines += [task["output"].rstrip(), ""]
        elif task["error"]:
            lines += [f"_No output: {_one_line(task['error'])}_", ""]
        else:
            lines += ["_No output._", ""]
    return "\n".join(lines).rstrip() + "\n"
