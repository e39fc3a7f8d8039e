"""Checkpoints closed without a decision: their question went away before anyone answered it.

A run that stops (cancelled, over budget, fail_fast), a task that is skipped, or an attempt that
ends while its tool call waits leaves checkpoints nobody will decide. They are closed, not
rejected: nobody said no. Each gets the status ``closed``, the reason as its comment ("the run
was cancelled") and a ``checkpoint.closed`` event, so the log and the audit trail say what
happened to it.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from orchestrator import events
from orchestrator.models import Checkpoint

PENDING = Checkpoint.Status.PENDING


def close_undecided(checkpoints: QuerySet[Checkpoint], why: str) -> int:
    """Close those of `checkpoints` still pending, saying `why`; the number closed. In the
    caller's transaction (or one of its own)."""
    with events.atomic():
        rows = list(checkpoints.filter(status=PENDING).select_related("task_run"))
        closed = checkpoints.filter(pk__in=[c.pk for c in rows], status=PENDING).update(
            status=Checkpoint.Status.CLOSED, decided_at=timezone.now(), comment=why[:2000]
        )
        for checkpoint in rows:
            events.record(
                "checkpoint.closed",
                run=checkpoint.run_id,
                task=checkpoint.task_run,
                message=f"{checkpoint.get_kind_display()} checkpoint {checkpoint.pk} closed without a decision: {why}"[
                    :500
                ],
                payload={"checkpoint": checkpoint.pk, "kind": checkpoint.kind, "reason": why[:500]},
            )
    return closed
