"""Migration 0022: a plan copied for a run before copies named their original is linked to it
from the `plan.copied` event the copy wrote."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("orchestrator", "0021_status_and_kind_labels")]
AFTER = [("orchestrator", "0022_plan_copied_from")]


@pytest.mark.django_db(transaction=True)
def test_an_earlier_copy_is_linked_to_its_original_from_its_event():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Plan, Run, Event = (old.get_model("orchestrator", name) for name in ("Plan", "Run", "Event"))
    original = Plan.objects.create(goal="g", source_name="brief.yaml")
    copy = Plan.objects.create(goal="g", source_name="brief.yaml (edited for run 1)")
    other = Plan.objects.create(goal="h")
    run = Run.objects.create(plan=copy)
    Event.objects.create(run=run, seq=1, type="plan.copied", payload={"from_plan": original.pk, "plan": copy.pk})
    Event.objects.create(run=run, seq=2, type="plan.copied", payload={"from_plan": 999, "plan": other.pk})  # gone

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("orchestrator", "Plan")
    assert new.objects.get(pk=copy.pk).copied_from_id == original.pk
    assert new.objects.get(pk=original.pk).copied_from_id is None
    assert new.objects.get(pk=other.pk).copied_from_id is None  # its original no longer exists
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
