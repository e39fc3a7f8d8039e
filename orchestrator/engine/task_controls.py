"""A person retries or skips a task: the tasks that gave up because of it wait for it again (or
stay skipped, naming what still blocks them), and an ended run reopens.
"""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from orchestrator import events, wording
from orchestrator.engine import run_budget, run_shape, scheduler, transitions, undecided
from orchestrator.engine.action_errors import ActionError, already_ended
from orchestrator.models import Dependency, Run, TaskRun
from orchestrator.plans import dag

State = TaskRun.State


def downstream_closure(task: TaskRun) -> list[int]:
    """Subtask ids of every task below `task` in the DAG."""
    edges = Dependency.objects.filter(plan_id=task.run.plan_id).values_list("upstream_id", "downstream_id")
    below: dict[int, list[int]] = {}
    for up, down in edges:
        below.setdefault(up, []).append(down)
    seen, stack = set(), [task.subtask_id]
    while stack:
        for child in below.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return list(seen)


def given_up_because_of(task: TaskRun) -> Q:
    """The tasks that gave up because `task` failed: those skipped below it, and the work fail_fast
    stopped when it failed. A person's retry or skip of it sends them back to wait (wait_again). A
    skip left the fail_fast stop in place: the run reopened and ended at once, "failed" with the
    summary "0 of 5 tasks failed", its other tasks still "run stopped: breaks failed".

    In a run stopped over budget, also the work the stop cancelled: once a person raised the
    budget, a retry goes on with the whole run, not with the retried task alone."""
    given_up = Q(subtask_id__in=downstream_closure(task), state=State.SKIPPED, skip_cascades=True) | Q(
        state=State.CANCELLED, error__endswith="(fail_fast)"
    )
    if task.run.status == Run.Status.OVER_BUDGET:
        given_up |= Q(state=State.CANCELLED, error=scheduler.OVER_BUDGET_ERROR)
    return given_up


def retry_task(task: TaskRun, *, user=None, actor_name: str = "") -> TaskRun:
    """Run a failed, cancelled or skipped task again; tasks skipped because of it wait again.
    `actor_name`: who, when no user did it (the command line, `console.cli_actor`)."""
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        task = TaskRun.objects.select_related("run", "subtask", "agent").get(pk=task.pk)
        if task.state not in (State.FAILED, State.CANCELLED, State.SKIPPED):
            raise ActionError(
                f"task {task.key} {wording.task_is(task.state)}: only a failed, cancelled or skipped task can be retried"
            )
        if run.status == Run.Status.CANCELLED:
            raise ActionError(f"run {run.pk} was cancelled: launch it again instead")
        run_budget.refuse_uncovered_retry(run, task)
        now = timezone.now()
        transitions.move(
            task,
            State.READY,
            fault_count=0,
            lost_count=0,
            skip_cascades=False,
            error="",
            not_before=None,
            ready_at=now,
            finished_at=None,
        )
        events.record(
            "task.retried", run=run, task=task, user=user, actor_name=actor_name, message=f"{task.key} retried"
        )
        go_on_after(
            run, task, user=user, actor_name=actor_name, why=f"{task.key} retried", reopened_by=f"a retry of {task.key}"
        )
    scheduler.advance(task.run_id)
    task.refresh_from_db()
    return task


def skip_task(task: TaskRun, *, user=None, actor_name: str = "", reason: str = "") -> TaskRun:
    """A person decides this task is not needed: downstream tasks go on without it."""
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        task = TaskRun.objects.select_related("subtask", "agent").get(pk=task.pk)
        if task.is_terminal and task.state != State.FAILED:
            raise ActionError(f"task {task.key} already ended ({task.get_state_display().lower()})")
        if run.is_finished and run.status != Run.Status.FAILED:
            raise ActionError(already_ended(run))
        why = reason or f"skipped by {wording.who(user, actor_name)}"
        transitions.move(
            task,
            State.SKIPPED,
            skip_cascades=False,
            error=why,
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires_at=None,
        )
        undecided.close_undecided(
            task.checkpoints.all(), f"the task was skipped: {reason}" if reason else f"the task was {why}"
        )
        events.record(
            "task.skipped",
            run=run,
            task=task,
            user=user,
            actor_name=actor_name,
            message=why,
            payload={"reason": why, "by_person": True},
        )
        go_on_after(
            run,
            task,
            user=user,
            actor_name=actor_name,
            why=f"{task.key} skipped by a person",
            reopened_by=f"a skip of {task.key}",
        )
    scheduler.advance(task.run_id)
    task.refresh_from_db()
    return task


def go_on_after(run: Run, task: TaskRun, *, user, why: str, reopened_by: str, actor_name: str = "") -> None:
    """After a person retried or skipped `task`: the tasks that gave up because of it wait for it
    again (a skip: go on without it), and so does work fail_fast stopped when it failed; an ended
    run reopens."""
    wait_again(run, given_up_because_of(task), user=user, actor_name=actor_name, why=why)
    if run.is_finished:
        reopen(run, user=user, actor_name=actor_name, why=reopened_by)


def wait_again(run: Run, which: Q, *, user, why: str, actor_name: str = "") -> None:
    """Send the run's tasks matching `which` (skipped or cancelled because of a task a person now
    retried or skipped) back to pending, each with its own `task.reset` event saying why ("waits
    again: b retried"), as a re-run's reset tasks have theirs: the event log says what happened
    to them, and the live view redraws the rows of the tasks its events name (dashboard/frames.py).

    Only those the ready rule would not skip again at once: a task below another upstream still
    failed (or cancelled, or skipped below a failure) stays skipped. Sent back, it was skipped again
    by the next step, and the log said "waits again: s skipped by a person" then "upstream c did
    not succeed" in the same second. Decided in dependency order, each on its upstreams as they
    will be (those sent back count as waiting, those kept as they are).

    A task that stays skipped names the upstreams that still block it where its reason named one
    a person has now skipped or retried (scheduler.restate_blockers)."""
    which_ids = dict(run.tasks.filter(which).values_list("subtask_id", "pk"))
    if not which_ids:
        return
    rows = scheduler.read_tasks(run)
    shape = run_shape.of(run, {row.pk for row in rows.values()})
    edges = [(up, sid) for sid, sub in shape.subtasks.items() for up in sub.upstreams]
    back, kept = [], {}
    for layer in dag.layers(list(shape.subtasks), edges):
        for sid in layer:
            if sid not in which_ids:
                continue
            blockers = scheduler.ready_rule(rows, shape.subtasks[sid].upstreams)[0]
            if not blockers:
                rows[sid].state, rows[sid].skip_cascades = State.PENDING, False
                back.append(which_ids[sid])
            elif rows[sid].state == State.SKIPPED:
                kept[which_ids[sid]] = [shape.subtasks[u].key for u in blockers]
    scheduler.restate_blockers(run, kept, user=user)
    moved = list(TaskRun.objects.filter(pk__in=back).order_by("subtask__position").select_related("subtask"))
    if not moved:
        return
    transitions.move_where(
        TaskRun.objects.filter(pk__in=[t.pk for t in moved]),
        State.PENDING,
        from_states=[State.SKIPPED, State.CANCELLED],
        skip_cascades=False,
        error="",
        finished_at=None,
    )
    for moved_task in moved:
        events.record(
            "task.reset", run=run, task=moved_task, user=user, actor_name=actor_name, message=f"waits again: {why}"
        )


def reopen(run: Run, *, user, why: str, actor_name: str = "") -> None:
    """An ended run starts again because a person retried, skipped or re-ran one of its tasks
    (call under the run's lock): `run.reopened`, saying why. Not `run.resumed`: nothing was paused,
    and the log's filter and the timeline's pauses read that type as the end of a pause."""
    transitions.move(run, Run.Status.RUNNING, finished_at=None, summary="")
    events.record("run.reopened", run=run, user=user, actor_name=actor_name, message=f"run reopened by {why}")
