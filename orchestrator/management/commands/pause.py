"""`python manage.py pause RUN`: stop admitting new tasks; those already admitted (running, or queued
for a worker) go on to the end, and the command says how many."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console
from orchestrator.models import TaskRun
from orchestrator.wording import counted


class Command(BaseCommand):
    help = "Pause a run: stop admitting new tasks; those already admitted (running or queued) finish."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        changed = console.run_action(runs.pause, run)
        # Admitted tasks (running, or queued for a worker) are not held back by a pause.
        admitted = changed.tasks.filter(state__in=(TaskRun.State.RUNNING, TaskRun.State.QUEUED)).count()
        line = (
            f"Run {changed.pk} paused; status is now {changed.status}. "
            f"No task is admitted until `{console.MANAGE} resume {changed.pk}`"
        )
        if admitted:
            line += f"; {counted(admitted, 'task')} already admitted {'goes' if admitted == 1 else 'go'} on to the end"
        self.stdout.write(line + ".")
