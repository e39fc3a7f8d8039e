"""A run's budget after launch: a person changes it, and a retry checks it before anything moves.

A run stops over budget when nothing runs and the next task's worst case would take it past its
budget (scheduler.stop_over_budget). Its message said "raise the budget and retry" while nothing
could raise it, and a retry reopened the run, cancelled the task again in the same second and
ended it once more, the dead time counted in its Elapsed. Now a person with the run-control
permission changes the budget (`change_budget`, under the run's lock, with the launch's checks
and an event naming who changed it from what to what), and a retry the budget cannot cover is
refused up front with the numbers (`refuse_uncovered_retry`).
"""

from __future__ import annotations

from decimal import Decimal

from orchestrator import events, wording
from orchestrator.engine import admission, run_shape, scheduler
from orchestrator.engine.action_errors import ActionError, already_ended
from orchestrator.engine.run_settings import InvalidRunSetting, least_budget_for, parse_budget
from orchestrator.models import Run, TaskRun

# A run ended so is over for good; one stopped over budget goes on once its budget is raised.
ENDED_FOR_GOOD = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED)


def change_budget(run: Run, budget_usd, *, user=None, actor_name: str = "") -> Run:
    """Set the run's budget to `budget_usd` (checked as at launch: `parse_budget`), recorded as
    `run.budget_changed` naming who changed it from what to what. Never below what the run has
    spent and holds for its running tasks: that money is gone or promised. A running run's tasks
    that waited for the budget start at once; a run stopped over budget stays stopped until a
    person retries a task (task_controls.retry_task). `actor_name`: the command line's user."""
    try:
        amount = parse_budget(budget_usd)
    except InvalidRunSetting as error:
        raise ActionError(str(error)) from None
    with events.atomic():
        locked = scheduler.lock_run(run.pk)
        if locked.status in ENDED_FOR_GOOD:
            raise ActionError(f"{already_ended(locked)}: its budget can no longer be changed")
        old = locked.budget_usd
        if amount == old:
            raise ActionError(f"run {run.pk}'s budget is already {wording.budget(old)}")
        committed = locked.cost_usd + locked.reserved_usd
        if amount < committed:
            raise ActionError(
                f"budget {wording.budget(amount)} is below the {wording.usd(committed)} run {run.pk} has spent "
                "and holds for its running tasks"
            )
        Run.objects.filter(pk=locked.pk).update(budget_usd=amount)
        locked.budget_usd = amount
        who = wording.who(user, actor_name)
        events.record(
            "run.budget_changed",
            run=locked,
            user=user,
            actor_name=actor_name,
            message=f"budget changed from {wording.budget(old)} to {wording.budget(amount)} by {who}",
            payload={"from_usd": str(old), "to_usd": str(amount)},
        )
    scheduler.advance(run.pk)
    run.refresh_from_db()
    return run


def changed(run: Run) -> str:
    """What a person reads once the budget changed, and what to do next where the run stopped."""
    said = f"Run {run.pk}'s budget is now {wording.budget(run.budget_usd)}."
    if run.status == Run.Status.OVER_BUDGET:
        said += " It stays stopped until you retry a cancelled task."
    return said


def worst_case_cost(task: TaskRun) -> Decimal:
    """What admission would reserve for the task's next attempt (its worst case, as at admission)."""
    run = task.run
    shape = run_shape.of(run)
    agent = task.agent
    tokens = admission.input_estimate(shape.subtasks[task.subtask_id], shape.goal, agent)
    return admission.worst_case_cost(tokens, agent, admission.provider_limit(agent))


def refuse_uncovered_retry(run: Run, task: TaskRun) -> None:
    """Raise ActionError when the run's budget cannot cover the task's next attempt (call under
    the run's lock). Left is the budget less what the run spent: money held for running attempts
    may come back when they settle, so only a task that could never fit is refused here."""
    reserve = worst_case_cost(task)
    left = run.budget_usd - run.cost_usd
    if reserve <= left:
        return
    raise ActionError(
        f"task {task.subtask.key} may cost up to {wording.usd(reserve)} and run {run.pk} has "
        f"{wording.usd(max(left, Decimal(0)))} of its budget of {wording.budget(run.budget_usd)} left "
        f"({wording.usd(run.cost_usd)} spent): raise the budget to at least "
        f"{wording.budget(least_budget_for(run.cost_usd + reserve))} first"
    )
