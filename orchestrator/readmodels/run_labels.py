"""A run's status as a person reads it: its stored status's label, except a run ended because its
plan was rejected, which reads "Plan rejected". Such a run is stored `cancelled` (the API's
`status` keeps that value), but the runs list, a plan's runs and the `runs` command showed it as
"Cancelled", identical to a run a person cancelled; its rejected plan checkpoint tells them apart."""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.models import Checkpoint, Run

PLAN_REJECTED = "Plan rejected"
# Beside "Over budget", why the run stopped short of its budget (it did not spend past it): the
# next task's worst case would have taken it past (scheduler.stop_over_budget).
OVER_BUDGET_STOP = "stopped: the next task would exceed the budget"


def plan_rejected(run_ids: Iterable[int]) -> set[int]:
    """Of these runs, the ids of those ended because a person rejected their plan (one query)."""
    return set(
        Checkpoint.objects.filter(
            run_id__in=list(run_ids),
            run__status=Run.Status.CANCELLED,
            kind=Checkpoint.Kind.PLAN,
            status=Checkpoint.Status.REJECTED,
        ).values_list("run_id", flat=True)
    )


def label(run: Run, rejected: bool) -> str:
    """`run`'s status label; `rejected`: its plan was rejected (`plan_rejected`)."""
    if rejected and run.status == Run.Status.CANCELLED:
        return PLAN_REJECTED
    return str(run.get_status_display())


def labels(runs: Iterable[Run]) -> dict[int, str]:
    """Each run's status label by its id, in one query."""
    runs = list(runs)
    rejected = plan_rejected(run.pk for run in runs)
    return {run.pk: label(run, run.pk in rejected) for run in runs}


def status_label(run: Run) -> str:
    """One run's status label (the run page's header)."""
    return labels([run])[run.pk]


def budget_stop(run: Run) -> str:
    """Why a run stopped over budget, for where its cost is shown ("" for any other run)."""
    return OVER_BUDGET_STOP if run.status == Run.Status.OVER_BUDGET else ""
