"""`python manage.py runs`: the latest runs, newest first, one line each."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db.models import Count

from orchestrator.management import console
from orchestrator.models import Run, TaskRun
from orchestrator.readmodels import run_labels
from orchestrator.readmodels.launchers import launchers
from orchestrator.readmodels.tasks import counts_by_run, outcome_text, rejected_at_gate

GOAL_WIDTH = 60


class Command(BaseCommand):
    help = "List the latest runs: id, status, what their tasks came to, cost, start time, who launched them and goal."

    def add_arguments(self, parser):
        parser.add_argument(
            "--limit", type=console.positive_int, default=20, help="How many runs to show (default 20, at least 1)"
        )

    def handle(self, *args, limit, **options):
        runs = list(
            Run.objects.select_related("plan")
            .annotate(total_tasks=Count("tasks"))
            .order_by("-created_at", "-pk")[:limit]
        )
        if not runs:
            self.stdout.write(f"No runs yet. Start one with `{console.MANAGE} launch examples/research_brief.yaml`.")
            return
        counts = counts_by_run(run.pk for run in runs)
        rejected = rejected_at_gate(run.pk for run in runs if counts.get(run.pk, {}).get(TaskRun.State.SKIPPED))
        launched_by = launchers(run.pk for run in runs)
        status_labels = run_labels.labels(runs)
        rows = [
            (
                run.pk,
                status_labels[run.pk].lower(),
                # As the run page's Tasks card words it: a cancelled or skipped task is not "done".
                outcome_text(counts.get(run.pk, {}), run.total_tasks, rejected.get(run.pk, ())),
                console.usd(run.cost_usd),
                console.timestamp(run.started_at),
                launched_by[run.pk],
                console.shorten(run.plan.goal, GOAL_WIDTH),
            )
            for run in runs
        ]
        self.stdout.write(console.table(("id", "status", "tasks", "cost", "started", "launched by", "goal"), rows))
