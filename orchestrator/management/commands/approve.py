"""`python manage.py approve CHECKPOINT [--comment TEXT]`: approve a plan, gate, review or tool-call checkpoint."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.management import console


class Command(BaseCommand):
    help = "Approve a pending checkpoint (plan approval, gate before a task, review after it, a tool call)."

    def add_arguments(self, parser):
        parser.add_argument("checkpoint", type=int, help="Checkpoint id (see `run_status RUN`)")
        parser.add_argument("--comment", default="", help="Optional note kept with the decision")

    def handle(self, *args, checkpoint, comment, **options):
        decided = console.decide_checkpoint(checkpoint, approve=True, comment=comment)
        version = f" (plan version {decided.plan_version})" if decided.plan_version else ""
        self.stdout.write(
            f"Approved checkpoint {decided.pk} of run {decided.run_id}: {console.checkpoint_target(decided)}{version}"
        )
