"""What people do to runs: launch, pause, resume, cancel, retry or skip a task, decide checkpoints.

Each action checks that it makes sense in the current state (raising ActionError with a message
for people), changes the rows and writes its Event in one transaction, then lets the scheduler
move the run on. Permission checks belong to the caller (views, API, commands).
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Count, Q
from django.utils import timezone
from pydantic import ConfigDict, Field

from orchestrator import events, plans, sql, wording
from orchestrator.engine import (
    approvers,
    cost_estimates,
    run_shape,
    scheduler,
    tool_approvals,
    transitions,
    undecided,
    waits,
)
from orchestrator.engine.run_settings import InvalidRunSetting, RunSettings
from orchestrator.governance.audit import record_denial
from orchestrator.models import Checkpoint, Dependency, EventSequence, Plan, Run, TaskRun
from orchestrator.plans import dag
from orchestrator.readmodels import tasks as run_tasks
from orchestrator.readmodels import totals as run_totals
from orchestrator.readmodels.records import RunTotals
from orchestrator.readmodels.snapshot import read_snapshot
from orchestrator.readmodels.tasks import run_tokens

State = TaskRun.State


class ActionError(wording.Refusal):
    """An action that cannot be taken now; the message says why, for people (`sentence` on its own:
    the API's error, the command line's, the run page's and the inbox's)."""


class LaunchRefused(ActionError):
    pass


# --- Launch --------------------------------------------------------------------------------------


def estimate_cost(plan: Plan) -> Decimal:
    """The plan's cost estimate (engine/cost_estimates.py: each agent's median recorded usage once it
    has history, else the worst case of its max output tokens; each subtask's input counts what it
    receives from its upstreams), as the pre-flight shows it."""
    return cost_estimates.plan_estimate(plan).total_usd


def task_ranks(plan: Plan) -> dict[str, float]:
    """Each subtask's longest remaining path to the end of the DAG, weighted by duration."""
    weights = plans.plan_weights(plan)
    keys = list(weights)
    edges = list(Dependency.objects.filter(plan=plan).values_list("upstream__key", "downstream__key"))
    return dag.remaining_path_lengths(keys, edges, weights)


def launch(
    plan: Plan,
    *,
    cap: int | None = None,
    budget_usd: Decimal | str | None = None,
    failure_policy: str = Run.FailurePolicy.CONTINUE,
    launched_by=None,
    actor_name: str = "",
    require_plan_approval: bool = False,
) -> Run:
    """Start a run of a saved plan (or open its plan checkpoint first), or raise LaunchRefused.

    Settings not given are the defaults (`RunSettings`); a run over its budget is refused.
    `actor_name` names who launched it when no user did (the command line: `cli:<os user>`), as in
    `pause` and `decide`: the run's `run.created` and `run.started` events say who.
    """
    try:
        chosen = RunSettings.of(
            cap=cap, budget_usd=budget_usd, failure_policy=failure_policy, require_plan_approval=require_plan_approval
        )
    except InvalidRunSetting as error:
        raise LaunchRefused(str(error)) from None
    cap, budget, failure_policy = chosen.cap, chosen.budget_usd, chosen.failure_policy
    agents = {s.agent for s in plan.subtasks.select_related("agent")}
    problems = [problem for agent in sorted(agents, key=str) for problem in plans.agent_setting_problems(agent)]
    if problems:
        raise LaunchRefused("; ".join(problems))
    estimate = estimate_cost(plan)
    if estimate > budget:
        raise LaunchRefused(
            f"estimated cost {wording.usd(estimate)} is over the budget of {wording.budget(budget)}: "
            f"raise the budget to at least {wording.usd(estimate)} or trim the plan"
        )
    ranks = task_ranks(plan)
    with events.atomic():
        run = Run.objects.create(
            plan=plan,
            cap=cap,
            budget_usd=budget,
            failure_policy=failure_policy,
            launched_by=launched_by,
            estimate_usd=estimate,
            status=Run.Status.AWAITING_APPROVAL if require_plan_approval else Run.Status.RUNNING,
            started_at=None if require_plan_approval else timezone.now(),
        )
        EventSequence.objects.create(run=run)
        # Before the plan's approval every task says what it waits for (cleared when approved).
        held = waits.PlanApproval() if require_plan_approval else None
        sql.insert(  # one statement of text: the run is already started, and a plan may have hundreds
            TaskRun,
            [
                TaskRun(
                    run_id=run.pk,
                    subtask_id=subtask_id,
                    agent_id=agent_id,
                    rank=ranks.get(key, 0.0),
                    wait_code=held.code if held else "",
                    wait_reason=held.message if held else "",
                )
                for subtask_id, key, agent_id in plan.subtasks.values_list("pk", "key", "agent_id")
            ],
        )
        events.record(
            "run.created",
            run=run,
            user=launched_by,
            actor_name=actor_name,
            message=f"run of plan {plan.pk} created: cap {cap}, budget ${budget}, policy {failure_policy}",
            payload={
                "plan": plan.pk,
                "cap": cap,
                "budget_usd": str(budget),
                "estimate_usd": str(estimate),
                "failure_policy": failure_policy,
            },
        )
        if require_plan_approval:
            version = plans.plan_version(plan)
            checkpoint = Checkpoint.objects.create(run=run, kind=Checkpoint.Kind.PLAN, plan_version=version)
            events.record(
                "checkpoint.created",
                run=run,
                message="the plan needs approval before it runs",
                payload={"checkpoint": checkpoint.pk, "kind": Checkpoint.Kind.PLAN, "plan_version": version},
            )
        else:
            events.record("run.started", run=run, user=launched_by, actor_name=actor_name)
            scheduler.advance(run.pk)
    return run


# --- Run controls ----------------------------------------------------------------------------------


def _change_status(run: Run, allowed: str, new: str, verb: str, *, user, actor_name: str) -> Run:
    """Move a run from `allowed` to `new`, recorded as the event `run.<verb>`."""
    with events.atomic():
        locked = scheduler.lock_run(run.pk)
        if locked.is_finished:  # not "run 3 is succeeded"
            raise ActionError(f"{already_ended(locked)}: it cannot be {verb}")
        if locked.status != allowed:
            raise ActionError(f"run {run.pk} is {locked.get_status_display().lower()}: it cannot be {verb}")
        transitions.move(locked, new)
        events.record(f"run.{verb}", run=locked, user=user, actor_name=actor_name, message=f"run {verb}")
    scheduler.advance(run.pk)
    run.refresh_from_db()
    return run


def already_ended(run: Run) -> str:
    """ "run 3 already ended (succeeded)": why nothing can be done to an ended run."""
    return f"run {run.pk} already ended ({run.get_status_display().lower()})"


def pause(run: Run, *, user=None, actor_name: str = "") -> Run:
    """Stop admitting new tasks; running tasks finish. `actor_name` names who did it when no
    user did (the command line: `cli:<os user>`), as in `decide`."""
    return _change_status(run, Run.Status.RUNNING, Run.Status.PAUSED, "paused", user=user, actor_name=actor_name)


def resume(run: Run, *, user=None, actor_name: str = "") -> Run:
    return _change_status(run, Run.Status.PAUSED, Run.Status.RUNNING, "resumed", user=user, actor_name=actor_name)


def cancel(run: Run, *, user=None, actor_name: str = "") -> Run:
    """Stop admitting and cancel everything unfinished; running attempts stop at their next beat."""
    now = timezone.now()
    with events.atomic():
        locked = scheduler.lock_run(run.pk)
        if locked.is_finished:
            raise ActionError(already_ended(locked))
        for task in locked.tasks.exclude(state__in=TaskRun.TERMINAL).select_related("agent"):
            transitions.move(task, State.CANCELLED, error="run cancelled", finished_at=now)
            events.record(
                "task.cancelled", run=locked, task=task, user=user, actor_name=actor_name, message="run cancelled"
            )
        scheduler.close_pending_checkpoints(locked, "the run was cancelled")
        scheduler.end_run(
            locked,
            Run.Status.CANCELLED,
            f"cancelled by {user.get_username() if user else actor_name or 'the command line'}",
        )
    run.refresh_from_db()
    return run


# --- Task controls -------------------------------------------------------------------------------


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
    summary "0 of 5 tasks failed", its other tasks still "run stopped: breaks failed"."""
    return Q(subtask_id__in=downstream_closure(task), state=State.SKIPPED, skip_cascades=True) | Q(
        state=State.CANCELLED, error__endswith="(fail_fast)"
    )


def retry_task(task: TaskRun, *, user=None) -> TaskRun:
    """Run a failed, cancelled or skipped task again; tasks skipped because of it wait again."""
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        task = TaskRun.objects.select_related("run", "subtask", "agent").get(pk=task.pk)
        if task.state not in (State.FAILED, State.CANCELLED, State.SKIPPED):
            raise ActionError(
                f"task {task.key} {wording.task_is(task.state)}: only a failed, cancelled or skipped task can be retried"
            )
        if run.status == Run.Status.CANCELLED:
            raise ActionError(f"run {run.pk} was cancelled: launch it again instead")
        now = timezone.now()
        transitions.move(
            task,
            State.READY,
            fault_count=0,
            skip_cascades=False,
            error="",
            not_before=None,
            ready_at=now,
            finished_at=None,
        )
        events.record("task.retried", run=run, task=task, user=user, message=f"{task.key} retried")
        # Tasks that gave up because of this one wait for it again, and so does work that
        # fail_fast stopped when it failed.
        wait_again(run, given_up_because_of(task), user=user, why=f"{task.key} retried")
        if run.is_finished:
            reopen(run, user=user, why=f"a retry of {task.key}")
    scheduler.advance(task.run_id)
    task.refresh_from_db()
    return task


def skip_task(task: TaskRun, *, user=None, reason: str = "") -> TaskRun:
    """A person decides this task is not needed: downstream tasks go on without it."""
    with events.atomic():
        run = scheduler.lock_run(task.run_id)
        task = TaskRun.objects.select_related("subtask", "agent").get(pk=task.pk)
        if task.is_terminal and task.state != State.FAILED:
            raise ActionError(f"task {task.key} already ended ({task.get_state_display().lower()})")
        if run.is_finished and run.status != Run.Status.FAILED:
            raise ActionError(already_ended(run))
        why = reason or f"skipped by {user.get_username() if user else 'the command line'}"
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
            "task.skipped", run=run, task=task, user=user, message=why, payload={"reason": why, "by_person": True}
        )
        # Tasks skipped because it failed go on without it, and so does work fail_fast stopped.
        wait_again(run, given_up_because_of(task), user=user, why=f"{task.key} skipped by a person")
        if run.is_finished:
            reopen(run, user=user, why=f"a skip of {task.key}")
    scheduler.advance(task.run_id)
    task.refresh_from_db()
    return task


def wait_again(run: Run, which: Q, *, user, why: str) -> None:
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
        events.record("task.reset", run=run, task=moved_task, user=user, message=f"waits again: {why}")


def reopen(run: Run, *, user, why: str) -> None:
    """An ended run starts again because a person retried, skipped or re-ran one of its tasks
    (call under the run's lock): `run.reopened`, saying why. Not `run.resumed`: nothing was paused,
    and the log's filter and the timeline's pauses read that type as the end of a pause."""
    transitions.move(run, Run.Status.RUNNING, finished_at=None, summary="")
    events.record("run.reopened", run=run, user=user, message=f"run reopened by {why}")


# --- Checkpoints ---------------------------------------------------------------------------------


SEPARATION_OF_DUTIES = "separation_of_duties"


def separation_of_duties_refusal(checkpoint: Checkpoint, user) -> str:
    """Why `user` may not approve this checkpoint under separation of duties ("" when they may),
    naming who may (engine/approvers.py). Whoever launched a run cannot also approve its plan
    (they may still reject it, which only stops their own run). Both facts are fixed once the run
    exists, so no lock is needed."""
    if checkpoint.kind != Checkpoint.Kind.PLAN or not getattr(user, "is_authenticated", False):
        return ""
    return approvers.separation_of_duties(checkpoint, Run.objects.get(pk=checkpoint.run_id), user)


def decide(
    checkpoint: Checkpoint,
    *,
    approve: bool,
    user=None,
    actor_name: str = "",
    comment: str = "",
    plan_version: str | None = None,
) -> Checkpoint:
    """Approve or reject a checkpoint; a rejection needs a comment saying why.

    Who decided is `user`, or, when no user does (the command line), `actor_name`
    (`cli:<os user>`): kept on the checkpoint (`decided_by_name`) and its event alike.

    A plan checkpoint's approval is bound to the plan its approver reviewed: `plan_version` is
    the version they saw (the page and the approvals inbox send it; the API takes it; the
    command line, which shows no plan, approves the current one). An edit since then refuses
    the approval, naming both versions: the checkpoint stays pending and must be reviewed
    again. The version decided is recorded on the checkpoint and in its event.
    """
    comment = (comment or "").strip()
    if not approve and not comment:
        raise ActionError("a comment is required to reject: say what is wrong")
    if approve and (refusal := separation_of_duties_refusal(checkpoint, user)):
        # Audited before raising, outside the decision's transaction (which the refusal would
        # roll back), whatever the entry point: page, API, admin, command.
        record_denial(user, SEPARATION_OF_DUTIES, action=f"APPROVE checkpoint {checkpoint.pk}", run=checkpoint.run_id)
        raise ActionError(refusal)
    now = timezone.now()
    with events.atomic():
        run = scheduler.lock_run(checkpoint.run_id)
        checkpoint = Checkpoint.objects.select_related("task_run__subtask", "task_run__agent").get(pk=checkpoint.pk)
        if checkpoint.status != Checkpoint.Status.PENDING:
            by = f" by {checkpoint.decider}" if checkpoint.decider else ""
            raise ActionError(f"checkpoint {checkpoint.pk} was already {checkpoint.outcome}{by}")
        if run.is_finished:
            raise ActionError(already_ended(run))
        if checkpoint.kind == Checkpoint.Kind.PLAN:
            current = plans.plan_version(run.plan)
            if approve and plan_version and plan_version != current:
                raise ActionError(
                    f"the plan was edited after you opened it (you reviewed version {plan_version}, it is now "
                    f"version {current}): review the changes, then approve again"
                )
            checkpoint.plan_version = current
        checkpoint.status = Checkpoint.Status.APPROVED if approve else Checkpoint.Status.REJECTED
        checkpoint.decided_by = user if getattr(user, "is_authenticated", False) else None
        checkpoint.decided_by_name = checkpoint.decided_by.get_username() if checkpoint.decided_by else actor_name
        checkpoint.decided_at, checkpoint.comment = now, comment
        checkpoint.save(
            update_fields=["status", "decided_by", "decided_by_name", "decided_at", "comment", "plan_version"]
        )
        version = {"plan_version": checkpoint.plan_version} if checkpoint.kind == Checkpoint.Kind.PLAN else {}
        what = (
            f"{tool_approvals.describe(checkpoint)}: call {checkpoint.status}"
            if checkpoint.kind == Checkpoint.Kind.TOOL
            else f"{checkpoint.get_kind_display()} checkpoint {checkpoint.status}"
        )
        call = (
            {"call_id": checkpoint.call_id, "tool": tool_approvals.qualified(checkpoint)}
            if checkpoint.kind == Checkpoint.Kind.TOOL
            else {}
        )
        events.record(
            f"checkpoint.{checkpoint.status}",
            run=run,
            task=checkpoint.task_run,
            user=user,
            actor_name=actor_name,
            message=what
            + (f" (plan version {checkpoint.plan_version})" if version else "")
            + (f": {comment}" if comment else ""),
            payload={"checkpoint": checkpoint.pk, "kind": checkpoint.kind, "comment": comment, **version, **call},
        )
        apply_decision(run, checkpoint, now)
    scheduler.advance(run.pk)
    return checkpoint


def decision_in_words(checkpoint: Checkpoint) -> str:
    """A decided checkpoint in a sentence for the person who decided it: "The plan was rejected."

    The status is the checkpoint's own ("approved", "rejected"), never a verb with a suffix.
    """
    key = checkpoint.task_run.subtask.key if checkpoint.task_run is not None else ""
    what = {
        Checkpoint.Kind.PLAN: "The plan",
        Checkpoint.Kind.BEFORE: f"The gate before {key}",
        Checkpoint.Kind.AFTER: f"The output of {key}",
        # The agent makes the call, in its task: "by write" read as if a tool or a person called "write" had.
        Checkpoint.Kind.TOOL: (
            f"The call to {tool_approvals.qualified(checkpoint)} by {(checkpoint.details or {}).get('agent', 'the agent')}"
            f" (task {key})"
        ),
    }[Checkpoint.Kind(checkpoint.kind)]
    return f"{what} was {checkpoint.get_status_display().lower()}."


def apply_decision(run: Run, checkpoint: Checkpoint, now) -> None:
    approved = checkpoint.status == Checkpoint.Status.APPROVED
    task = checkpoint.task_run
    if checkpoint.kind == Checkpoint.Kind.PLAN:
        if approved:
            transitions.move(run, Run.Status.RUNNING, started_at=now)
            run.tasks.filter(wait_code=waits.PlanApproval.code).update(wait_code="", wait_reason="")
            events.record("run.started", run=run, user=checkpoint.decided_by, actor_name=checkpoint.decided_by_name)
        else:
            transitions.move_where(run.tasks.all(), State.CANCELLED, error="plan rejected", finished_at=now)
            scheduler.end_run(run, Run.Status.CANCELLED, f"plan rejected: {checkpoint.comment}")
        return
    if task is None:
        raise ValueError(f"{checkpoint} is a task's checkpoint but belongs to no task")
    if checkpoint.kind == Checkpoint.Kind.TOOL:
        # The waiting call reads the decision (engine/tool_attempt.py); the task stays running.
        tool_approvals.refresh_wait(task)
        return
    if checkpoint.kind == Checkpoint.Kind.BEFORE:
        if approved:
            transitions.move_where(
                TaskRun.objects.filter(pk=task.pk), State.READY, from_states=[State.WAITING_GATE], ready_at=now
            )
            events.record("task.ready", run=run, task=task)
        else:
            task.refresh_from_db(fields=["state"])
            if task.state == State.WAITING_GATE:  # a gate outlived by its task (cancelled, retried) skips nothing
                scheduler.skip_cascading(task, f"rejected at its gate: {checkpoint.comment}")
    else:  # AFTER: a review of the task's output
        if approved:
            transitions.move_where(
                TaskRun.objects.filter(pk=task.pk),
                State.SUCCEEDED,
                from_states=[State.AWAITING_REVIEW],
                finished_at=now,
            )
            events.record("task.succeeded", run=run, task=task, message="output approved")
        else:
            reason = f"output rejected in review: {checkpoint.comment}"
            transitions.move_where(
                TaskRun.objects.filter(pk=task.pk),
                State.FAILED,
                from_states=[State.AWAITING_REVIEW],
                error=reason,
                finished_at=now,
            )
            events.record("task.failed", run=run, task=task, message=reason, payload={"error": reason})


# --- Progress ------------------------------------------------------------------------------------


class RunProgress(RunTotals):
    """A run's totals plus what a watcher follows: its status, summary and open checkpoints."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_id: int
    status: str
    summary: str
    pending_checkpoints: list[Checkpoint] = Field(default_factory=list)
    # `waiting` told apart, in the run page's words: at a gate, and done but in review.
    needs_approval: int = 0
    in_review: int = 0
    # Of the `ready` tasks, those a cap, a pause or a retry delay holds back (the page's "held back").
    held_back: int = 0

    @property
    def ready_now(self) -> int:
        """The ready tasks nothing holds back: `ready` less `held_back`."""
        return self.ready - self.held_back


def progress(run: Run) -> RunProgress:
    """The run's counts, totals and pending checkpoints as of one moment (`read_snapshot`): read
    one query after another, an attempt that stopped between the run's row and the count of
    attempts still stopping read as "none stopping" beside totals without its usage."""
    with read_snapshot():
        return _progress(run)


def _progress(run: Run) -> RunProgress:
    run.refresh_from_db()
    rows = list(
        run.tasks.order_by().values_list("state").annotate(n=Count("pk"), held=Count("pk", filter=run_tasks.HELD_BACK))
    )
    counts = {state: n for state, n, _ in rows}
    end = run.finished_at or timezone.now()
    tokens = run_tokens(run)
    return RunProgress(
        run_id=run.pk,
        status=run.status,
        summary=run.summary,
        total=sum(counts.values()),
        succeeded=counts.get(State.SUCCEEDED, 0),
        failed=counts.get(State.FAILED, 0),
        skipped=counts.get(State.SKIPPED, 0),
        cancelled=counts.get(State.CANCELLED, 0),
        running=counts.get(State.RUNNING, 0),
        queued=counts.get(State.QUEUED, 0),
        ready=counts.get(State.READY, 0),
        throttled=counts.get(State.THROTTLED, 0),
        waiting=counts.get(State.WAITING_GATE, 0) + counts.get(State.AWAITING_REVIEW, 0),
        needs_approval=counts.get(State.WAITING_GATE, 0),
        in_review=counts.get(State.AWAITING_REVIEW, 0),
        held_back=sum(held for *_, held in rows),
        pending=counts.get(State.PENDING, 0),
        done=sum(counts.get(s, 0) for s in TaskRun.TERMINAL),
        elapsed_s=(end - run.started_at).total_seconds() if run.started_at else 0.0,
        cost_usd=run.cost_usd,
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        input_tokens_so_far=tokens.input_so_far,
        streaming_tokens=tokens.streaming,
        pending_checkpoints=list(
            run.checkpoints.filter(status=Checkpoint.Status.PENDING).select_related("task_run__subtask")
        ),
        attempts_stopping=run_totals.attempts_stopping(run) if run.is_finished else 0,
    )
