"""Pausing, resuming and cancelling a run: each checks the run's status under its lock, moves it
and writes its event in one transaction, then lets the scheduler move the run on.
"""

from __future__ import annotations

from django.utils import timezone

from orchestrator import events, wording
from orchestrator.engine import scheduler, transitions
from orchestrator.engine.action_errors import ActionError, already_ended
from orchestrator.models import Run, TaskRun

State = TaskRun.State


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
            f"cancelled by {wording.who(user, actor_name)}",
            user=user,
            actor_name=actor_name,
        )
    run.refresh_from_db()
    return run
