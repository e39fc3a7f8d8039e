"""The records of a run's checkpoints and events, as the API, the JSON download and the audit export give them."""

from __future__ import annotations

import pytest
from django.db import transaction

from orchestrator import events
from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Event
from orchestrator.readmodels.checkpoint_event_records import CheckpointRecord, EventRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(launched):
    return launched({"a": ("researcher", []), "w": ("writer", ["a"])})


def test_checkpoint_and_event_records(run, admin_user):
    cp = Checkpoint.objects.create(run=run, task_run=run.tasks.get(subtask__key="w"), kind=Checkpoint.Kind.AFTER)
    runs.decide(cp, approve=False, user=admin_user, comment="no")
    cp.refresh_from_db()
    assert CheckpointRecord.of(cp).model_dump(mode="json") == {
        "id": cp.pk,
        "kind": "after",
        "task": "w",
        "status": "rejected",
        "outcome": "rejected",
        "created_at": cp.created_at.isoformat(),
        "decided_by": admin_user.username,
        "decided_at": cp.decided_at.isoformat(),
        "comment": "no",
        "plan_version": "",
    }
    with transaction.atomic():
        events.record("task.progress", run=run, task=run.tasks.get(subtask__key="a"), payload={"progress": 3})
    event = EventRecord.of(Event.objects.filter(run=run).latest("seq")).model_dump(mode="json")
    assert (event["type"], event["task"], event["agent"]) == ("task.progress", "a", "researcher")
    assert event["payload"] == {"progress": 3}
