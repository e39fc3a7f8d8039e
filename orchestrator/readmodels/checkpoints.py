"""Checkpoints waiting for a decision (on one run's page, and across runs for the header's
count and the inbox) and the latest decisions."""

from __future__ import annotations

from django.db.models import QuerySet

from orchestrator.models import Checkpoint, Run


def awaiting_decision() -> QuerySet[Checkpoint]:
    """Checkpoints waiting for a person, on runs that have not ended, the longest waiting first:
    by when each opened (`created_at`): one asked again when its task was retried or re-run is a
    new checkpoint (engine/scheduler.open_gate), which waits from then, not from the first."""
    return (
        Checkpoint.objects.filter(status=Checkpoint.Status.PENDING)
        .exclude(run__status__in=Run.FINISHED)
        .order_by("created_at", "pk")
    )


def pending_checkpoints(run: Run) -> list[Checkpoint]:
    return list(
        run.checkpoints.filter(status=Checkpoint.Status.PENDING)
        .select_related("task_run__subtask", "task_run__agent")
        .order_by("created_at", "pk")
    )


def recent_decisions(run: Run, limit: int = 10) -> list[Checkpoint]:
    return list(
        run.checkpoints.exclude(status=Checkpoint.Status.PENDING)
        .select_related("task_run__subtask", "decided_by")
        .order_by("-decided_at", "-pk")[:limit]
    )
