"""`python manage.py skip RUN TASK`: a person decides a task is not needed, as the run page's Skip
does: the tasks after it go on without its output."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console


class Command(BaseCommand):
    help = "Skip a task of a run (by its key in the plan): the tasks after it go on without its output."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")
        parser.add_argument("task", help="The task's key in the plan (see `run_status RUN`)")
        parser.add_argument("--reason", default="", help="Why, for the event log")

    def handle(self, *args, run, task, reason, **options):
        skipped = console.task_action(lambda t, **who: runs.skip_task(t, reason=reason, **who), run, task)
        self.stdout.write(f"Task {skipped.key} of run {run} skipped: the tasks after it go on without its output.")
