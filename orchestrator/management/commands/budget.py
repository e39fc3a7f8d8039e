"""`python manage.py budget RUN AMOUNT`: change a run's budget, as the run page's Budget form does."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import run_budget, runs
from orchestrator.management import console


class Command(BaseCommand):
    help = (
        "Change a run's budget (USD, e.g. 1.50): not below what it spent and holds; a run stopped "
        "over budget goes on once a task is retried."
    )

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")
        parser.add_argument("amount", help="The new budget in USD, e.g. 1.50")

    def handle(self, *args, run, amount, **options):
        changed = console.run_action(lambda r, **who: runs.change_budget(r, amount, **who), run)
        self.stdout.write(run_budget.changed(changed))
