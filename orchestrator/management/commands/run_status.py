"""`python manage.py run_status RUN`: one run in full — totals, every task, pending checkpoints."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console
from orchestrator.readmodels import run_labels
from orchestrator.readmodels.costs import run_unpriced_text
from orchestrator.readmodels.records import RunTotals
from orchestrator.readmodels.tasks import TaskView, task_views
from orchestrator.readmodels.totals import stopping_text

NOTE_WIDTH = 70


def task_note(task: TaskView) -> str:
    """The task's note (`TaskView.note`: why it is where it is, as the page's row says it) in the
    command's words: a wait reads "waiting: run cap reached (8 running)", unless its reason says
    it waits already ("waits for the plan's approval")."""
    kind, text = task.note
    if kind == "waiting" and not text.startswith("waits "):
        return f"waiting: {text}"
    return text


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
        write(f"Run {run.pk}: {run_labels.status_label(run).lower()}")
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
