"""What running attempts have used so far, before it is settled into their tasks' tokens.

A running attempt's host saves its input (known from the stream's start) and the output it has
streamed on the attempt; the attempt's end settles both into its task's totals. Until then the
task rows, lanes and panel (`tasks.TaskView`), the run's Tokens card (`tasks.run_tokens`) and the
API's and downloads' task records (`records.TaskRunRecord`) add them from here, so each says the
same. Both `tasks` and `records` read it; it reads neither.
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


def live_tokens(tasks: Iterable[Attempted]) -> dict[int, LiveTokens]:
    """The tokens each running task's current attempt has used so far, as its host last saved them
    on the attempt (every GLASSBOX_PROGRESS_SAVE_S): its input, known from the stream's start
    (the Attempts table shows it at once), and the output streamed so far. Both are settled into
    the task's totals when the attempt ends, in the transaction that ends it, so a read sees
    them here or there, never in both. One query."""
    running = {task.pk: task.attempt_count for task in tasks if task.state == TaskRun.State.RUNNING}
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
