"""Which state may follow which: the one table every TaskRun and Run state change goes through.

The tables say what the engine does today (scheduler, execution, reaper, runs): a move they do
not declare is a bug, refused with an error naming both states rather than written to the
database. Staying in the same state is always allowed (a waiting task whose reason changes, a
review gate opened on a task already awaiting review).

Two ways to move:

* :func:`move` — a task or run loaded under the run's row lock: check, set, save the fields given.
* :func:`move_where` — a conditional update (``filter(state__in=...).update(...)``), the
  concurrency guarantee of claims and late results: the row moves only if it is still in one of
  the states it may move from, and the count says whether it did. The states it may move from
  are checked against the table here too, before any SQL runs.
* :func:`move_tasks` — the same on the hot path (an attempt's success, the tasks a scheduling
  step starts), as a statement of orchestrator/sql.py: conditions as lookups, `sql.Add` for
  ``column + n``, and the rows as moved on request.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from orchestrator import sql
from orchestrator.models import Run, TaskRun

State = TaskRun.State
Status = Run.Status

TASK_MOVES: dict[str, frozenset[str]] = {
    # the ready rule, a before-gate, a cascading skip; a person skips or cancels
    State.PENDING: frozenset({State.READY, State.WAITING_GATE, State.SKIPPED, State.CANCELLED}),
    # the gate is approved or rejected
    State.WAITING_GATE: frozenset({State.READY, State.SKIPPED, State.CANCELLED}),
    # admitted (to the broker's queue, or claimed at once by the agent host whose attempt's end
    # admitted it: dispatch.start_attempts), or held back by the provider's rate budget
    State.READY: frozenset({State.THROTTLED, State.QUEUED, State.RUNNING, State.SKIPPED, State.CANCELLED}),
    State.THROTTLED: frozenset({State.READY, State.QUEUED, State.RUNNING, State.SKIPPED, State.CANCELLED}),
    # a worker claims the attempt
    State.QUEUED: frozenset({State.RUNNING, State.SKIPPED, State.CANCELLED}),
    # the attempt ends: output (reviewed or not), a retry, a failure, or it is stopped
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.AWAITING_REVIEW, State.READY, State.FAILED, State.SKIPPED, State.CANCELLED}
    ),
    # a person reviews the output
    State.AWAITING_REVIEW: frozenset({State.SUCCEEDED, State.FAILED, State.SKIPPED, State.CANCELLED}),
    # a person re-runs from here (engine/reruns.py): the task and its downstream start over
    State.SUCCEEDED: frozenset({State.PENDING}),
    # a person retries or skips a failed task, or re-runs from it
    State.FAILED: frozenset({State.READY, State.SKIPPED, State.PENDING}),
    # a person retries it; work that gave up because of a failure waits for its retry again
    # ... and a rejected plan cancels every task, those a person skipped while it waited included
    State.SKIPPED: frozenset({State.READY, State.PENDING, State.CANCELLED}),
    State.CANCELLED: frozenset({State.READY, State.PENDING}),
}

RUN_MOVES: dict[str, frozenset[str]] = {
    Status.AWAITING_APPROVAL: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.RUNNING: frozenset({Status.PAUSED, Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.OVER_BUDGET}),
    # running tasks finish while paused, so a paused run can end too
    Status.PAUSED: frozenset({Status.RUNNING, Status.SUCCEEDED, Status.FAILED, Status.CANCELLED}),
    # a person's retry (or skip of the failed task) reopens an ended run
    Status.SUCCEEDED: frozenset({Status.RUNNING}),
    Status.FAILED: frozenset({Status.RUNNING}),
    Status.OVER_BUDGET: frozenset({Status.RUNNING}),
    Status.CANCELLED: frozenset(),
}


class IllegalTransition(Exception):
    """A state change the tables do not declare: a bug in the engine, not a person's mistake."""

    def __init__(self, what: str, old: str, new: str):
        self.old, self.new = old, new
        super().__init__(f"{what} cannot move from {old} to {new}")


def allowed(old: str, new: str, *, table: dict[str, frozenset[str]] = TASK_MOVES) -> bool:
    return old == new or new in table[old]


def sources(new: str, *, table: dict[str, frozenset[str]] = TASK_MOVES) -> list[str]:
    """Every state that may move to ``new`` (``new`` itself included)."""
    return [old for old in table if allowed(old, new, table=table)]


def _describe(obj: TaskRun | Run) -> str:
    if isinstance(obj, Run):
        return f"run {obj.pk}"
    return f"task {obj.subtask.key}" if obj.subtask_id else f"task {obj.pk}"


WAIT_FIELDS = ("wait_reason", "wait_code")


def _without_stale_wait(new: str, fields: dict) -> dict:
    """A wait reason belongs to a task waiting for admission: any other state clears it."""
    if new in TaskRun.ADMISSIBLE or any(name in fields for name in WAIT_FIELDS):
        return fields
    return {**fields, "wait_reason": "", "wait_code": ""}


def move(obj: TaskRun | Run, new: str, **fields) -> None:
    """Move a task (or a run) loaded under the run's lock to ``new`` and save it with ``fields``.

    A task leaving the states that wait for admission loses its wait reason and code, so that no
    page shows a finished or retried task still "waiting for" something.
    """
    is_run = isinstance(obj, Run)
    attribute, table = ("status", RUN_MOVES) if is_run else ("state", TASK_MOVES)
    old = getattr(obj, attribute)
    if not allowed(old, new, table=table):
        raise IllegalTransition(_describe(obj), old, new)
    if isinstance(obj, TaskRun) and (obj.wait_reason or obj.wait_code):
        fields = _without_stale_wait(new, fields)
    if isinstance(obj, Run):
        fields = {**_pause_clock(obj, old, new), **fields}
    setattr(obj, attribute, new)
    for name, value in fields.items():
        setattr(obj, name, value)
    obj.save(update_fields=[attribute, *fields])


def _pause_clock(run: Run, old: str, new: str) -> dict:
    """A run's time in which nothing could start, kept by every move: a pause starts its clock,
    whatever ends it (resume, cancel, the last running task ending) adds what it lasted to
    `paused_s`, and a reopening (a person's retry, skip or re-run of an ended run) adds the time
    since its end to `ended_s`."""
    now = timezone.now()
    if new == Status.PAUSED and old != Status.PAUSED:
        return {"paused_at": now}
    if old == Status.PAUSED and new != Status.PAUSED and run.paused_at is not None:
        return {"paused_at": None, "paused_s": run.paused_s + (now - run.paused_at).total_seconds()}
    if old in Run.FINISHED and new not in Run.FINISHED and run.finished_at is not None:
        return {"ended_s": run.ended_s + max(0.0, (now - run.finished_at).total_seconds())}
    return {}


def move_where(
    queryset, new: str, *, from_states: Iterable[str] | None = None, via: str | None = None, **fields
) -> int:
    """Conditionally move the tasks of ``queryset`` that are in ``from_states`` (by default, every
    state the table lets move to ``new``) to ``new``, updating ``fields``. Returns the count moved.

    ``via``: a state some of them pass through on the way, written as one move (a task the
    scheduler finds ready and admits in the same step goes from pending via ready to queued):
    each of ``from_states`` must reach ``new`` directly or through ``via``, as the table says."""
    states = _checked_sources(new, from_states, via)
    return queryset.filter(state__in=states).update(state=new, **_without_stale_wait(new, fields))


def move_tasks(
    new: str,
    *,
    where: dict,
    match: tuple[tuple[str, ...], list[tuple]] | None = None,
    from_states: Iterable[str] | None = None,
    via: str | None = None,
    returning: bool = False,
    **fields,
):
    """`move_where` for the tasks matching the lookups `where` (and `match`: see sql.update), as
    text (orchestrator/sql.py): the count moved, or with `returning` the tasks as moved."""
    states = _checked_sources(new, from_states, via)
    values = {"state": new, **_without_stale_wait(new, fields)}
    return sql.update(TaskRun, values, returning=returning, match=match, state__in=states, **where)


def _checked_sources(new: str, from_states: Iterable[str] | None, via: str | None) -> list[str]:
    states = list(from_states) if from_states is not None else sources(new)
    for old in states:
        if not (allowed(old, new) or (via is not None and allowed(old, via) and allowed(via, new))):
            raise IllegalTransition("tasks", old, new)
    return states
