"""What the run page's Result says of each final task: its result, the partial text of the attempt
that ended without one (headed as the downloads and the API head it, `PartialOutputRecord`), why it
has no output at all, or that it has not finished yet. The page said "No output: simulated failure"
of a failed task whose Markdown download gave the 795 characters its attempt wrote."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from orchestrator.models import Attempt, TaskRun

from .records import PartialOutputRecord, is_partial_output

# The states whose output is the task's result (in review: the result the review decides on).
RESULT_STATES = (TaskRun.State.SUCCEEDED, TaskRun.State.AWAITING_REVIEW)


class ResultOutput(NamedTuple):
    """`kind`: "result" (its output is its result, or in review), "partial" (`partial`: the text of
    an attempt that ended without a result), "none" (`note`: it ended with nothing written, and why),
    "pending" (it has not finished)."""

    kind: Literal["result", "partial", "none", "pending"]
    partial: PartialOutputRecord | None = None
    note: str = ""


def result_outputs(tasks: Iterable[TaskRun]) -> dict[int, ResultOutput]:
    """Each task's ResultOutput by its id; one query for the last attempts of those with partial text."""
    tasks = list(tasks)
    partial_ids = [t.pk for t in tasks if is_partial_output(t)]
    last: dict[int, Attempt] = {}
    for attempt in (
        Attempt.objects.filter(task_run_id__in=partial_ids).defer("output").order_by("task_run_id", "number")
    ):
        last[attempt.task_run_id] = attempt
    return {t.pk: result_output(t, last.get(t.pk)) for t in tasks}


def result_output(task: TaskRun, last_attempt: Attempt | None) -> ResultOutput:
    """What the Result says of `task`; `last_attempt`: its highest-numbered attempt."""
    if task.state in RESULT_STATES:
        return ResultOutput("result")
    if partial := PartialOutputRecord.of(task, last_attempt):
        return ResultOutput("partial", partial=partial)
    if task.is_terminal:
        return ResultOutput("none", note=f"No output: {task.error or task.get_state_display().lower()}")
    return ResultOutput("pending")


def never_ran(task: TaskRun) -> bool:
    """No attempt of the task ever started (in this start or before a re-run): it wrote nothing."""
    return task.started_at is None and not task.earlier_attempts


class OtherOutputs(NamedTuple):
    """The Result's "Every task's output" beyond the final tasks: `listed`, the tasks whose output
    may be opened; `never_ran`, how many an ended run left that never started (a rejected plan's
    run, a run cancelled or failed early): they were listed, each opening on nothing."""

    listed: list[TaskRun]
    never_ran: int


def other_outputs(run_is_finished: bool, tasks: Iterable[TaskRun]) -> OtherOutputs:
    """While the run goes on every task is listed (the list is drawn again when the run ends)."""
    tasks = list(tasks)
    if not run_is_finished:
        return OtherOutputs(tasks, 0)
    listed = [t for t in tasks if not never_ran(t)]
    return OtherOutputs(listed, len(tasks) - len(listed))
