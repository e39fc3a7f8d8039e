"""What never changes about a running run: its DAG and its subtasks, cached per process.

A scheduling step used to read the plan's dependencies, subtasks and goal from the database on
every call (and a count of each task's upstreams for its prompt's bound): a dozen statements and
most of the step's CPU on a large run (docs/benchmarks.md). None of it can change once the run has
left its plan checkpoint — plan edits happen only before (engine/plan_edits.py), and a re-run
resets task states, not the graph — so each process reads it once per run and keeps it.
The scheduler never asks for the shape of a run awaiting its plan's approval.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS

from orchestrator.models import Dependency, Run, Subtask, TaskRun

CACHED_RUNS = 256


@dataclass(frozen=True)
class SubtaskShape:
    subtask_id: int
    task_id: int
    key: str
    title: str
    gate: str
    priority: int
    inputs: str
    estimated_input_tokens: int
    instructions: str
    upstreams: tuple[int, ...]  # subtask ids
    downstreams: tuple[int, ...]  # subtask ids
    downstream_agents: frozenset[int]  # the agents of its direct downstream tasks (ids)

    @property
    def has_downstream(self) -> bool:
        return bool(self.downstream_agents)


SUBTASK_FIELDS = tuple(f.attname for f in Subtask._meta.concrete_fields)


@dataclass(frozen=True)
class RunShape:
    run_id: int
    created_at: datetime  # with the id, the run's identity (a restored or test database reuses ids)
    goal: str
    subtasks: dict[int, SubtaskShape]  # by subtask id
    by_task: dict[int, SubtaskShape]  # by task id
    subtask_rows: dict[int, tuple]  # every field of each Subtask row (SUBTASK_FIELDS), by subtask id

    def subtask(self, subtask_id: int) -> Subtask:
        """A Subtask instance of the run, as the database holds it, without a query (a new one each
        time: nothing is shared between the tasks that get one)."""
        return Subtask.from_db(DEFAULT_DB_ALIAS, SUBTASK_FIELDS, self.subtask_rows[subtask_id])


_cache: OrderedDict[int, RunShape] = OrderedDict()
_lock = threading.Lock()


def of(run: Run, task_ids: set[int] | None = None) -> RunShape:
    """The run's shape (two queries the first time in this process, none after).

    A cached shape is used only for the same run — same id and creation time (a restored database,
    or tests' rolled-back transactions, reuse ids) — with the same tasks (`task_ids`, as the caller
    just read them).
    """
    with _lock:
        shape = _cache.get(run.pk)
        if (
            shape is not None
            and shape.created_at == run.created_at
            and (task_ids is None or task_ids == shape.by_task.keys())
        ):
            _cache.move_to_end(run.pk)
            return shape
    shape = read(run)
    with _lock:
        _cache[run.pk] = shape
        while len(_cache) > CACHED_RUNS:
            _cache.popitem(last=False)
    return shape


def read(run: Run) -> RunShape:
    """The shape from the database: the run's tasks with their subtasks, and the plan's dependencies."""
    rows = list(
        TaskRun.objects.filter(run_id=run.pk).values_list(
            "pk",
            "subtask_id",
            "subtask__key",
            "subtask__title",
            "subtask__gate",
            "subtask__priority",
            "subtask__inputs",
            "subtask__estimated_input_tokens",
            "subtask__instructions",
            "agent_id",
            "run__plan__goal",
        )
    )
    ups: dict[int, list[int]] = {row[1]: [] for row in rows}
    agent_of = {row[1]: row[-2] for row in rows}
    downs: dict[int, list[int]] = {sid: [] for sid in ups}
    down_agents: dict[int, set[int]] = {sid: set() for sid in ups}
    for up, down in Dependency.objects.filter(plan_id=run.plan_id).values_list("upstream_id", "downstream_id"):
        if down in ups and up in ups:
            ups[down].append(up)
            downs[up].append(down)
            down_agents[up].add(agent_of[down])
    subtasks = {
        sid: SubtaskShape(
            sid,
            pk,
            key,
            title,
            gate,
            priority,
            inputs,
            estimate,
            instructions,
            tuple(ups[sid]),
            tuple(downs[sid]),
            frozenset(down_agents[sid]),
        )
        for pk, sid, key, title, gate, priority, inputs, estimate, instructions, _, _ in rows
    }
    goal = rows[0][-1] if rows else ""
    subtask_rows = {row[0]: row for row in Subtask.objects.filter(pk__in=list(ups)).values_list(*SUBTASK_FIELDS)}
    return RunShape(run.pk, run.created_at, goal, subtasks, {s.task_id: s for s in subtasks.values()}, subtask_rows)


def downstream_agents(task: TaskRun) -> frozenset[int] | None:
    """The ids of the agents of `task`'s direct downstream tasks, from its run's shape when the
    task came with its run loaded (every claim loads it); None when knowing would take a query."""
    if not TaskRun.run.is_cached(task):
        return None
    subtask = of(task.run).subtasks.get(task.subtask_id)
    return subtask.downstream_agents if subtask is not None else None


def forget(run_id: int) -> None:
    """Drop a run's shape from this process (tests; a run whose plan changed before it started)."""
    with _lock:
        _cache.pop(run_id, None)
