"""What running attempts have used so far, before it is settled into their tasks' tokens.

A running attempt's host saves its input (known from the stream's start) and the output it has
streamed on the attempt; the attempt's end settles both into its task's totals. Until then the
task rows, lanes and panel (`tasks.TaskView`), the run's Tokens card (`tasks.run_tokens`) and the
API's and downloads' task records (`records.TaskRunRecord`) add them from here, so each says the
same. Both `tasks` and `records` read it; it reads neither.

An attempt runs on after its task stops running when a person or its run stops it (cancelled,
skipped: its host hears of it at its next beat, and its end settles what it used). Its tokens so
far are counted until then: counting only running tasks' attempts, a cancel took them off the
Tokens card until they settled (3,001 → 2,634 → 3,115), a count going back with nothing undone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from orchestrator.models import Attempt, TaskRun

from .steps import Attempted


class LiveTokens(NamedTuple):
    """What a running attempt has used so far, as its host last saved it on the attempt
    (`live_tokens` reads it): not yet settled into its task's tokens."""

    input: int
    output: int


NO_LIVE_TOKENS = LiveTokens(0, 0)

# A task whose current attempt cannot be running: queued (its current attempt has not started), or
# moved on by its attempt's end, in the transaction that ended it (or later, by a decision on its
# output). In any other state, a task that has started an attempt may have it running still: a
# cancelled or skipped one until its host hears of it, and one a person retried or re-ran meanwhile.
NOT_RUNNING_ON = (
    TaskRun.State.QUEUED,
    TaskRun.State.SUCCEEDED,
    TaskRun.State.AWAITING_REVIEW,
    TaskRun.State.FAILED,
)


def may_run_on(state: str, attempt_count: int) -> bool:
    """May the current attempt of a task in `state` still be running (its tokens not settled)? A
    running task's, and a cancelled or skipped one's until its host hears of it (`NOT_RUNNING_ON`)."""
    return attempt_count > 0 and state not in NOT_RUNNING_ON


def live_tokens(tasks: Iterable[Attempted]) -> dict[int, LiveTokens]:
    """The tokens each task's current attempt has used so far while it runs, as its host last saved
    them on the attempt (every GLASSBOX_PROGRESS_SAVE_S): its input, known from the stream's start
    (the Attempts table shows it at once), and the output streamed so far; also once its task was
    cancelled or skipped, until the attempt stops (`may_run_on`). Both are settled into the task's
    totals when the attempt ends, in the transaction that ends it, so a read sees them here or
    there, never in both. One query, none when no task may have an attempt running."""
    running = {task.pk: task.attempt_count for task in tasks if may_run_on(task.state, task.attempt_count)}
    if not running:
        return {}
    rows = Attempt.objects.filter(task_run_id__in=list(running), state=Attempt.State.RUNNING).values_list(
        "task_run_id", "number", "input_tokens", "output_tokens"
    )
    return {
        task_id: LiveTokens(input_tokens, output_tokens)
        for task_id, number, input_tokens, output_tokens in rows
        if running[task_id] == number and (input_tokens or output_tokens)
    }
