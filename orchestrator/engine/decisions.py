"""A person approves or rejects a checkpoint (the plan, a gate, a review of an output, a tool
call): separation of duties checked (and a refusal audited), the plan version they reviewed
bound, the decision recorded and applied to the run or its task, in words for whoever decided.
"""

from __future__ import annotations

from django.utils import timezone

from orchestrator import events, plans
from orchestrator.engine import approvers, scheduler, tool_approvals, transitions, waits
from orchestrator.engine.action_errors import ActionError, already_ended
from orchestrator.governance.audit import record_denial
from orchestrator.models import Checkpoint, Run, TaskRun

State = TaskRun.State


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
            scheduler.end_run(
                run,
                Run.Status.CANCELLED,
                f"plan rejected: {checkpoint.comment}",
                user=checkpoint.decided_by,
                actor_name=checkpoint.decided_by_name,
            )
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
