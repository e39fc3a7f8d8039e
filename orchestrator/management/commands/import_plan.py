"""`manage.py import_plan FILE`: validate a plan file and save it, all or nothing.

On any problem nothing is saved and the command exits 1 listing every problem, exactly like
validate_plan. The same document (and goal) imported again is the plan saved the first time.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from orchestrator import plans
from orchestrator.management.commands.validate_plan import database_unavailable, load_or_fail
from orchestrator.models import Plan


class Command(BaseCommand):
    help = "Validate a plan file (YAML or JSON) and save it as a Plan; exit 1 listing every problem."

    def add_arguments(self, parser):
        parser.add_argument("file", help="Path to the plan file (.yaml, .yml or .json)")

    def handle(self, *args, **options):
        path = options["file"]
        spec, document = load_or_fail(path)
        same = plans.saved_plan_of(spec, document)
        if same is not None:
            self.stdout.write(f"Already saved as plan {same.pk} (the same document and goal): nothing new saved")
            return
        try:
            plan = plans.save_plan(spec, document=document, source=Plan.Source.FILE, source_name=Path(path).name)
        except plans.PlanValidationError as exc:
            raise CommandError(exc.report(path), returncode=1) from exc
        except DatabaseError as exc:
            raise database_unavailable(exc, doing="save the plan") from exc
        goal = " ".join(plan.goal.split())
        subtasks = _count(len(spec.subtasks), "subtask", "subtasks")
        dependencies = _count(len(spec.edges), "dependency", "dependencies")
        self.stdout.write(self.style.SUCCESS(f"Saved plan {plan.pk}: {goal} ({subtasks}, {dependencies})"))


def _count(number: int, singular: str, plural: str) -> str:
    return f"{number} {singular if number == 1 else plural}"
