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
from orchestrator.models import Checkpoint


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
