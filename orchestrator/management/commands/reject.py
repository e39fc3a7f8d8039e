"""`python manage.py reject CHECKPOINT --comment TEXT`: reject a checkpoint, saying why."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from orchestrator.management import console


class Command(BaseCommand):
    help = "Reject a pending checkpoint. A rejection needs a comment saying why."

    def add_arguments(self, parser):
        parser.add_argument("checkpoint", type=int, help="Checkpoint id (see `run_status RUN`)")
        parser.add_argument("--comment", required=True, help="Why it is rejected (required)")

    def handle(self, *args, checkpoint, comment, **options):
        decided = console.decide_checkpoint(checkpoint, approve=False, comment=comment)
        self.stdout.write(
            f"Rejected checkpoint {decided.pk} of run {decided.run_id}: {console.checkpoint_target(decided)}"
        )
