"""History and re-runs: launch a run again with the same settings, or re-run part of a run.

- `launch_again(run)`: a new run of the same plan (the approver's edited copy, when the plan
  was edited for that run) with the same cap, budget, failure policy and plan approval.
- `rerun_from(task)`: a finished or failed task and everything below it in the DAG start over
  in the same run; the tasks above keep their results, so their summaries feed the new attempts.
  Outputs being cleared are first kept on the attempt that produced them (`Attempt.output`), so
  a re-run never loses an earlier answer. Tokens and cost already spent stay counted (the task's
  and the run's), and the task keeps them apart as spent before the re-run (`earlier_*`), so that
  its row shows what this start spends.

Both check the state and write their events in one transaction under the run's lock, like
every action of `runs`.
"""

from __future__ import annotations

from django.db import transaction

from orchestrator import events, wording
from orchestrator.engine import run_budget, run_launch, scheduler, task_controls, transitions
from orchestrator.engine.action_errors import ActionError
from orchestrator.models import Attempt, Checkpoint, Run, TaskRun

State = TaskRun.State

# Where a re-run may start: a task that has finished one way or another.
RERUNNABLE = (State.SUCCEEDED, State.FAILED, State.SKIPPED, State.CANCELLED)
# The run must not be doing anything to these tasks while they are reset.
BUSY = (State.QUEUED, State.RUNNING, State.AWAITING_REVIEW)


def launch_again(run: Run, *, user=None) -> Run:
    """A new run of `run`'s plan with its settings; refused (ActionError) like any launch."""
    inactive = sorted({s.agent.name for s in run.plan.subtasks.select_related("agent") if not s.agent.is_schedulable})
    if inactive:
        raise ActionError(
            f"agent{'s' if len(inactive) > 1 else ''} {', '.join(inactive)} "
            f"{'are' if len(inactive) > 1 else 'is'} no longer active: activate "
            f"{'them' if len(inactive) > 1 else 'it'} in the admin, or launch another plan"
        )
    return run_launch.launch(
        run.plan,
        cap=run.cap,
        budget_usd=run.budget_usd,
        failure_policy=run.failure_policy,
        launched_by=user,
        require_plan_approval=run.checkpoints.filter(kind=Checkpoint.Kind.PLAN).exists(),
    )


def rerun_from(task: TaskRun, *, user=None, actor_name: str = "") -> list[str]:
    """Start `task` and its downstream over; returns the keys of the tasks reset, `task` first.
    `actor_name`: who, when no user did it (the command line)."""
    with transaction.atomic():
        run = scheduler.lock_run(task.run_id)
        task = TaskRun.objects.select_related("subtask", "agent", "run").get(pk=task.pk)
        if run.status == Run.Status.CANCELLED:
            raise ActionError(f"run {run.pk} was cancelled: launch it again instead")
        if run.status == Run.Status.AWAITING_APPROVAL:
            raise ActionError(f"run {run.pk} has not started: its plan waits for approval")
        if task.state not in RERUNNABLE:
            raise ActionError(
                f"task {task.key} {wording.task_is(task.state)}: only a task that has finished "
                "(succeeded, failed, skipped or cancelled) can be re-run"
            )
        below = task_controls.downstream_closure(task)
        resets = list(
            run.tasks.filter(subtask_id__in=[task.subtask_id, *below])
            .select_related("subtask")
            .order_by("subtask__position")
        )
        busy = [t.key for t in resets if t.state in BUSY]
        if busy:
            raise ActionError(
                f"{', '.join(busy)} below {task.key} {'is' if len(busy) == 1 else 'are'} still at work: "
                "wait until it ends, or pause the run and let it finish, then re-run"
            )
        stopping = sorted(
            {
                key
                for key in Attempt.objects.filter(
                    task_run__in=resets, state__in=(Attempt.State.QUEUED, Attempt.State.RUNNING)
                ).values_list("task_run__subtask__key", flat=True)
            }
        )
        if stopping:
            # Its usage is settled on the task when it ends: after the reset it would read as the
            # new start's spend.
            raise ActionError(
                f"an attempt of {', '.join(stopping)} is still stopping (a cancel or a skip reaches it at "
                "its next heartbeat, within seconds): re-run once it has ended"
            )
        # What it spent stays spent: a re-run the budget left cannot cover would reopen the run only
        # to stop it over budget again in the same second.
        run_budget.refuse_uncovered_retry(run, task)
        resets.sort(key=lambda t: t.pk != task.pk)  # the task first, then its downstream in plan order
        keep_outputs(resets)
        for reset in resets:
            # What it spent so far stays in its totals and the run's, set apart as before the re-run.
            spent = {
                "earlier_attempts": reset.attempt_count,
                "earlier_tokens": reset.input_tokens + reset.output_tokens,
                "earlier_cost_usd": reset.cost_usd,
            }
            if reset.state == State.PENDING:
                TaskRun.objects.filter(pk=reset.pk).update(**spent)
            else:
                transitions.move(
                    reset,
                    State.PENDING,
                    **spent,
                    output="",
                    summary="",
                    error="",
                    progress=0,
                    fault_count=0,
                    lost_count=0,
                    skip_cascades=False,
                    not_before=None,
                    ready_at=None,
                    started_at=None,
                    finished_at=None,
                    lease_owner="",
                    lease_expires_at=None,
                )
        keys = [t.key for t in resets]
        events.record(
            "task.rerun",
            run=run,
            task=task,
            user=user,
            actor_name=actor_name,
            message=f"re-run from {task.key}: {wording.counted(len(keys), 'task')} start over",
            payload={"reset": keys},
        )
        for reset in resets[1:]:
            events.record(
                "task.reset",
                run=run,
                task=reset,
                user=user,
                actor_name=actor_name,
                message=f"starts over: re-run from {task.key}",
            )
        if run.is_finished:
            task_controls.reopen(run, user=user, actor_name=actor_name, why=f"a re-run from {task.key}")
    scheduler.advance(run.pk)
    return keys


def keep_outputs(tasks: list[TaskRun]) -> None:
    """Copy each task's current output onto the attempt that produced it, its latest: a succeeded
    one's answer, or the partial text a failed, timed-out or cancelled one wrote (which the task
    shows until the re-run resets it)."""
    for task in tasks:
        if not task.output:
            continue
        attempt = Attempt.objects.filter(task_run=task).order_by("-number").first()
        if attempt is not None and not attempt.output:
            Attempt.objects.filter(pk=attempt.pk).update(output=task.output)
