"""`python manage.py cancel RUN`: stop admitting tasks and cancel running ones at their next heartbeat."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console


class Command(BaseCommand):
    help = "Cancel a run: stop admitting tasks and cancel running ones at their next heartbeat."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        changed = console.run_action(runs.cancel, run)
        self.stdout.write(f"Run {changed.pk} cancelled; status is now {changed.status}.")
