"""What people do to runs, in one place for the callers (views, API, commands, admin): launch,
pause, resume, cancel, change a run's budget, retry or skip a task, decide checkpoints, follow its progress.

Each action checks that it makes sense in the current state (raising ActionError with a message
for people), changes the rows and writes its Event in one transaction, then lets the scheduler
move the run on. Permission checks belong to the caller. Each job has its module:
run_launch.py, run_controls.py, task_controls.py, decisions.py; a run's progress is a read model
(readmodels/run_progress.py).
"""

from __future__ import annotations

from orchestrator.engine.action_errors import ActionError, already_ended
from orchestrator.engine.decisions import decide, decision_in_words
from orchestrator.engine.run_budget import change_budget
from orchestrator.engine.run_controls import cancel, pause, resume
from orchestrator.engine.run_launch import LaunchRefused, estimate_cost, launch, task_ranks
from orchestrator.engine.task_controls import downstream_closure, reopen, retry_task, skip_task, wait_again
from orchestrator.readmodels.run_progress import RunProgress, progress

__all__ = [
    "ActionError",
    "LaunchRefused",
    "RunProgress",
    "already_ended",
    "cancel",
    "change_budget",
    "decide",
    "decision_in_words",
    "downstream_closure",
    "estimate_cost",
    "launch",
    "pause",
    "progress",
    "reopen",
    "resume",
    "retry_task",
    "skip_task",
    "task_ranks",
    "wait_again",
]
