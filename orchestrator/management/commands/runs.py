"""`python manage.py runs`: the latest runs, newest first, one line each."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db.models import Count, Q

from orchestrator.management import console
from orchestrator.models import Run, TaskRun

GOAL_WIDTH = 60


class Command(BaseCommand):
    help = "List the latest runs: id, status, tasks done/total, cost, start time and goal."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=20, help="How many runs to show (default 20)")

    def handle(self, *args, limit, **options):
        runs = (
            Run.objects.select_related("plan")
            .annotate(
                total_tasks=Count("tasks"),
                done_tasks=Count("tasks", filter=Q(tasks__state__in=TaskRun.TERMINAL)),
            )
            .order_by("-created_at", "-pk")[: max(limit, 1)]
        )
        rows = [
            (
                run.pk,
                run.status,
                f"{run.done_tasks}/{run.total_tasks}",
                console.usd(run.cost_usd),
                console.timestamp(run.started_at),
                console.shorten(run.plan.goal, GOAL_WIDTH),
            )
            for run in runs
        ]
        if not rows:
            self.stdout.write(f"No runs yet. Start one with `{console.MANAGE} launch examples/research_brief.yaml`.")
            return
        self.stdout.write(console.table(("id", "status", "done", "cost", "started", "goal"), rows))
