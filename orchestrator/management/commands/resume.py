"""`python manage.py resume RUN`: admit tasks again after a pause."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console


class Command(BaseCommand):
    help = "Resume a run: admit tasks again after a pause."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        changed = console.run_action(runs.resume, run)
        self.stdout.write(f"Run {changed.pk} resumed; status is now {changed.status}.")
