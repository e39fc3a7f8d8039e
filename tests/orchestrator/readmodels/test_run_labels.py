"""A run's status as a person reads it (readmodels/run_labels.py)."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Run
from orchestrator.readmodels.run_labels import labels, status_label

pytestmark = pytest.mark.django_db


def test_a_run_whose_plan_was_rejected_reads_plan_rejected_not_cancelled(personas, demo_agents, make_plan):
    """Runs whose plan was rejected looked identical to runs a person cancelled."""
    plan = make_plan({"a": ("researcher", [])})
    rejected = runs.launch(plan, require_plan_approval=True, actor_name="cli:alice")
    runs.decide(
        rejected.checkpoints.get(kind=Checkpoint.Kind.PLAN),
        approve=False,
        user=personas["approver"],
        comment="wrong goal",
    )
    cancelled = runs.launch(plan, actor_name="cli:alice")
    runs.cancel(cancelled, user=personas["launcher"])
    waiting = runs.launch(plan, require_plan_approval=True, actor_name="cli:alice")
    rejected.refresh_from_db()
    cancelled.refresh_from_db()
    assert rejected.status == cancelled.status == Run.Status.CANCELLED  # the stored status is unchanged
    assert labels([rejected, cancelled, waiting]) == {
        rejected.pk: "Plan rejected",
        cancelled.pk: "Cancelled",
        waiting.pk: "Awaiting approval",
    }
    assert status_label(rejected) == "Plan rejected"
