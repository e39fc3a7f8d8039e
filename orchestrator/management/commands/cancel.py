"""`python manage.py cancel RUN`: stop admitting tasks and cancel running ones at their next heartbeat.

The run ends at once; an attempt still running stops at its next heartbeat and only then adds
what it used to the run's cost, so the command says how many are still stopping.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.engine import runs
from orchestrator.management import console
from orchestrator.readmodels.totals import attempts_stopping, stopping_text


class Command(BaseCommand):
    help = "Cancel a run: stop admitting tasks and cancel running ones at their next heartbeat."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")

    def handle(self, *args, run, **options):
        changed = console.run_action(runs.cancel, run)
        line = f"Run {changed.pk} cancelled; status is now {changed.status}."
        stopping = attempts_stopping(changed)
        if stopping:
            # Their use is added to the run's cost at their next heartbeat: the cost is not final yet.
            line += (
                f" {stopping_text(stopping)}; `{console.MANAGE} run_status {changed.pk}` shows the final cost "
                f"once {'it has' if stopping == 1 else 'they have'} stopped."
            )
        self.stdout.write(line)
