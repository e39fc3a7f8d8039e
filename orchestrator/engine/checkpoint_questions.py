"""What a pending checkpoint asks a person, in one wording for the run page, the approvals inbox
and the command line.

Each place wrote its own sentence and they drifted apart (the page asked "Gate: may Design
start?", the inbox "May “Design” start?", the command line said 'before "design" (Design)'). The
question comes in parts so that the run page can make the task's title a link while the inbox
and a terminal quote it: `lead`, the task's title, `tail`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.engine import tool_approvals
from orchestrator.engine.task_controls import downstream_closure
from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.wording import counted


@dataclass(frozen=True)
class Question:
    """A checkpoint's question: `lead`, then the task's `title` when it names one, then `tail`."""

    lead: str
    title: str = ""
    tail: str = ""

    def text(self) -> str:
        """The question as plain text, the task's title in quotes: "Gate: may “Design” start?"."""
        return f"{self.lead}“{self.title}”{self.tail}" if self.title else f"{self.lead}{self.tail}"


def question(checkpoint: Checkpoint) -> Question:
    """What `checkpoint` asks: approve the plan, let a task start (a gate before it), review a
    task's output (after it), or let an agent make a tool call."""
    if checkpoint.kind == Checkpoint.Kind.PLAN:
        return Question("Approve the plan before anything runs")
    if checkpoint.kind == Checkpoint.Kind.TOOL:
        return Question(f"{tool_approvals.describe(checkpoint)} — may it?")
    task = checkpoint.task_run
    if task is None:
        raise ValueError(f"checkpoint {checkpoint.pk} ({checkpoint.kind}) has no task to name")
    if checkpoint.kind == Checkpoint.Kind.BEFORE:
        return Question("Gate: may ", task.subtask.title, " start?")
    return Question("Review the output of ", task.subtask.title)


def holds_up(checkpoint: Checkpoint) -> str:
    """What else waits while a task's checkpoint (a gate, a review, a tool call) waits for its
    decision, for "task X waits; …".

    Only the task waits for the person; whether the rest of the run goes on meanwhile is the run's
    state: nothing new starts in a paused run, and the tasks below the waiting one wait for it
    whatever is decided. The page said "the rest of the run goes on" in every case, and the inbox
    said nothing of a gate's or a review's run being paused: approving there looked as if the
    tasks after it would start.
    """
    run, task = checkpoint.run, checkpoint.task_run
    if run.status == Run.Status.PAUSED:
        return "the run is paused: nothing new starts until it is resumed"
    if task is None:
        return "the rest of the run goes on"
    unfinished = TaskRun.objects.filter(run=run).exclude(pk=task.pk).exclude(state__in=TaskRun.TERMINAL)
    below = unfinished.filter(subtask_id__in=downstream_closure(task)).count()
    if unfinished.count() > below:
        return "the rest of the run goes on"
    if below:
        return f"{counted(below, 'task')} after it {'waits' if below == 1 else 'wait'} for it"
    return "no other task of the run is left"
