"""`python manage.py retry RUN TASK`: run a failed, cancelled or skipped task again, as the run
page's Retry does (the tasks skipped because of it wait again; an ended run reopens)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console


class Command(BaseCommand):
    help = "Retry a failed, cancelled or skipped task of a run (by its key in the plan)."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")
        parser.add_argument("task", help="The task's key in the plan (see `run_status RUN`)")

    def handle(self, *args, run, task, **options):
        retried = console.task_action(lambda t, **who: runs.retry_task(t, **who), run, task)
        self.stdout.write(
            f"Task {retried.key} of run {run} will run again (it is {retried.get_state_display().lower()}); "
            f"`{console.MANAGE} run_status {run}` follows it."
        )
