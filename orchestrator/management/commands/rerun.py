"""`python manage.py rerun RUN TASK`: start a finished task and everything below it over in the
same run, as the run page's "Re-run from here" does (the tasks above keep their results)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator import wording
from orchestrator.engine import reruns
from orchestrator.management import console


class Command(BaseCommand):
    help = "Re-run a finished task of a run (by its key in the plan) and everything below it."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="Run id (see `runs`)")
        parser.add_argument("task", help="The task's key in the plan (see `run_status RUN`)")

    def handle(self, *args, run, task, **options):
        keys: list[str] = []

        def rerun(found, **who):
            keys.extend(reruns.rerun_from(found, **who))

        console.task_action(rerun, run, task)
        self.stdout.write(
            f"Run {run}: {wording.counted(len(keys), 'task')} start over ({', '.join(keys)}); "
            f"`{console.MANAGE} run_status {run}` follows them."
        )
