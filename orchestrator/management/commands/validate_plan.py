"""`manage.py validate_plan FILE`: check a plan file and show its DAG statistics.

Exit 0 with a summary when the plan is valid; exit 1 with every problem, one per line, when
it is not. Problems are reported through CommandError, so the command line never shows a
traceback (unless --traceback is given).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from orchestrator import plans
from orchestrator.plans import dag

# A longer critical path is shown as its first and last keys around an ellipsis.
MAX_PATH_KEYS_SHOWN = 12


def load_or_fail(path: str) -> tuple[plans.PlanSpec, str]:
    """The validated plan in `path`, or a CommandError (exit 1) listing every problem."""
    try:
        return plans.load_file(path)
    except plans.PlanValidationError as exc:
        raise CommandError(exc.report(path), returncode=1) from exc
    except DatabaseError as exc:
        raise database_unavailable(exc) from exc


# SQLSTATE classes a retry can cure: serialization failure, deadlock, lock not available.
_TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03"}


def database_unavailable(exc: DatabaseError, doing: str = "read the agent registry") -> CommandError:
    """The command's one-line error for a database failure, with the hint that fits the failure.

    Only a missing table suggests `migrate`; a deadlock or serialization failure says that
    nothing was saved and a retry may pass; anything else is reported as it is.
    """
    return CommandError(f"cannot {doing}: {exc}{database_hint(exc)}", returncode=1)


def database_hint(exc: DatabaseError) -> str:
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
    text = str(exc).lower()
    if sqlstate == "42P01" or "no such table" in text:
        return " (has `manage.py migrate` been run?)"
    if sqlstate in _TRANSIENT_SQLSTATES:
        return " (a conflict with concurrent work: nothing was saved; try again)"
    return ""


def format_critical_path(path: list[str], seconds: float) -> str:
    if len(path) > MAX_PATH_KEYS_SHOWN:
        half = MAX_PATH_KEYS_SHOWN // 2
        shown = [*path[:half], f"… {len(path) - 2 * half} more …", *path[-half:]]
    else:
        shown = path
    return f"{' → '.join(shown)} ({seconds:.1f} s estimated)"


def format_summary(summary: dag.DagSummary) -> list[str]:
    return [
        f"  subtasks:      {summary.subtasks}",
        f"  edges:         {summary.edges}",
        f"  depth:         {summary.depth} layer{'' if summary.depth == 1 else 's'}",
        f"  widest layer:  {summary.widest_layer} subtask{'' if summary.widest_layer == 1 else 's'}",
        f"  critical path: {format_critical_path(summary.critical_path, summary.critical_path_s)}",
    ]


class Command(BaseCommand):
    help = "Validate a plan file (YAML or JSON) and print its DAG statistics; exit 1 listing every problem."

    def add_arguments(self, parser):
        parser.add_argument("file", help="Path to the plan file (.yaml, .yml or .json)")

    def handle(self, *args, **options):
        path = options["file"]
        spec, _ = load_or_fail(path)
        self.stdout.write(self.style.SUCCESS(f"{Path(path).name}: valid plan"))
        self.stdout.write(f"  goal:          {spec.goal}")
        for line in format_summary(spec.summary()):
            self.stdout.write(line)
