"""What a run's plan says, read once per process once the plan's approval has fixed it.

The live view asks at nearly every frame for what depends on the plan alone: the subtasks' order
and estimates for the ETA (readmodels/eta.py), the final tasks for the result
(readmodels/graph.py). Reading them was a third of a small frame's time on a 200-task run. A
plan changes only while its run awaits the plan's approval (engine/plan_edits.py; a re-run resets
task states, not the graph), so, as the scheduler does with engine/run_shape.py, each process
reads them once per run after that and keeps them; a run awaiting approval is read afresh.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from orchestrator.models import Run

CACHED_RUNS = 256

T = TypeVar("T")


def fixed_once_approved(read: Callable[[Run], T]) -> Callable[[Run], T]:
    """`read(run)`, kept per run (its id, creation time and plan: a restored database, or tests'
    rolled-back transactions, reuse ids) once the run no longer awaits its plan's approval. What
    `read` returns is shared between callers: it must be immutable."""

    @functools.lru_cache(maxsize=CACHED_RUNS)
    def kept(run_id: int, created_at: datetime, plan_id: int) -> T:
        return read(Run.objects.select_related("plan").get(pk=run_id))

    @functools.wraps(read)
    def per_run(run: Run) -> T:
        if run.status == Run.Status.AWAITING_APPROVAL:
            return read(run)
        return kept(run.pk, run.created_at, run.plan_id)

    return per_run
