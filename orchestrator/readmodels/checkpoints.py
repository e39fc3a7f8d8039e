"""The run page's checkpoints: those waiting for a decision and the latest decisions."""

from __future__ import annotations

from orchestrator.models import Checkpoint, Run


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
