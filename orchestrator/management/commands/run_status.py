"""`python manage.py run_status RUN`: one run in full — totals, every task, pending checkpoints."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console
from orchestrator.models import TaskRun
from orchestrator.readmodels.costs import run_unpriced_text
from orchestrator.readmodels.records import RunTotals
from orchestrator.readmodels.tasks import TaskView, task_views
from orchestrator.readmodels.totals import stopping_text

NOTE_WIDTH = 70


def task_note(task: TaskView) -> str:
    """Why a task is where it is, in the order the page's row says it (task_row.html): what its
    agent is doing now ("step 2 · calling workspace:calculate"), what it waits for, the error it
    ended with, or its summary. A task keeps its last attempt's error while it waits for a retry
    and while the retry runs: that error is the past, not why the task waits or what it does."""
    if task.activity:
        return task.activity
    if task.wait_reason and task.state != TaskRun.State.QUEUED:
        # "run cap reached (8 running)"; a reason that says it waits already, as is
        return task.wait_reason if task.wait_reason.startswith("waits ") else f"waiting: {task.wait_reason}"
    if task.error and task.is_terminal and task.state != TaskRun.State.SUCCEEDED:
        return task.error
    return task.summary


def tokens_text(totals: RunTotals) -> str:
    """The run's tokens as the run page's Tokens card counts them, exact: "1,234 in / 560 out",
    "… / 43 streaming" while running attempts stream (their input counted from their start)."""
    streaming = f" / {totals.streaming_tokens:,} streaming" if totals.streaming_tokens else ""
    return f"{totals.input_tokens_so_far:,} in / {totals.output_tokens:,} out{streaming}"


class Command(BaseCommand):
    help = "Show one run: status, progress, every task with its state and attempts, pending checkpoints."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        run = console.get_run(run)
        progress = runs.progress(run)
        write = self.stdout.write
        write(f"Run {run.pk}: {console.status_text(progress.status)}")
        write(f"Goal:     {console.shorten(run.plan.goal, 200)}")
        write(f"Progress: {console.progress_counts(progress)}")
        write(
            f"Elapsed:  {console.elapsed_text(run, progress)}   "
            f"cost {console.usd(progress.cost_usd)} of {console.budget(run.budget_usd)} budget   "
            f"tokens {tokens_text(progress)}   cap {run.cap}"
            + (f"   ({stopping})" if (stopping := stopping_text(progress.attempts_stopping)) else "")
        )
        if unpriced := run_unpriced_text(run):
            write(f"Cost:     {unpriced}")
        if progress.summary:
            write(f"Summary:  {progress.summary}")
        # Each task as the run page shows it: its state in the page's words, its progress as the panel gives it.
        rows = [
            (
                task.key,
                task.agent,
                task.state_label,
                task.attempt_count,
                task.progress_text,
                console.usd(task.cost_usd),
                console.shorten(task_note(task), NOTE_WIDTH),
            )
            for task in task_views(run)
        ]
        write("")
        write(console.table(("task", "agent", "state", "attempts", "progress", "cost", "note"), rows))
        write("")
        if progress.pending_checkpoints:
            write("Pending checkpoints:")
            for checkpoint in progress.pending_checkpoints:
                write(f"  {console.checkpoint_line(checkpoint)}")
        else:
            write("No pending checkpoints.")
