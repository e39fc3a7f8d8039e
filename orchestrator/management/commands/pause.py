"""`python manage.py pause RUN`: stop admitting new tasks; running tasks finish."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console


class Command(BaseCommand):
    help = "Pause a run: stop admitting new tasks; running tasks finish."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        changed = console.run_action(runs.pause, run)
        self.stdout.write(f"Run {changed.pk} paused; status is now {changed.status}.")
