"""One record per row, everywhere: the API's schema and answers, the JSON download of a run and
the audit export all carry the fields of orchestrator/readmodels/records.py (checkpoints and events:
checkpoint_event_records.py), with the same values."""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from django.urls import reverse

from dashboard.api import schemas
from dashboard.api.main import api
from orchestrator import events
from orchestrator.engine import dispatch, runs
from orchestrator.governance import audit_export
from orchestrator.models import Event
from orchestrator.readmodels.checkpoint_event_records import CheckpointRecord, EventRecord
from orchestrator.readmodels.records import AgentRecord, AttemptRecord, RunRecord, TaskRunRecord
from orchestrator.readmodels.run_export import RunExport
from orchestrator.readmodels.tasks import TaskView

RECORDS = [AgentRecord, RunRecord, TaskRunRecord, AttemptRecord, CheckpointRecord, EventRecord]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_the_api_schema_documents_every_field_of_each_record(record):
    documented = api.get_openapi_schema()["components"]["schemas"][record.__name__]
    assert list(documented["properties"]) == list(record.model_fields)
    assert documented["required"] == list(record.model_fields)


def test_the_api_answers_with_the_records_themselves():
    """No copy of a record's shape in the API: its envelopes hold the record classes."""
    assert schemas.RunPage.model_fields["items"].annotation == list[RunRecord]
    assert schemas.EventPage.model_fields["items"].annotation == list[EventRecord]
    assert schemas.AgentPage.model_fields["items"].annotation == list[AgentRecord]
    assert schemas.RunDetailOut.model_fields["tasks"].annotation == list[TaskRunRecord]
    assert issubclass(schemas.CheckpointWithRun, CheckpointRecord)


def test_the_download_the_audit_export_and_the_page_build_on_the_same_records():
    assert RunExport.model_fields["run"].annotation is RunRecord
    assert RunExport.model_fields["tasks"].annotation == list[TaskRunRecord]
    assert sorted(audit_export.COLUMNS) == sorted([*EventRecord.model_fields, "actor_user_id"])
    # the published column order: scripts read CSV columns by position
    assert audit_export.COLUMNS[:8] == (
        "id",
        "created_at",
        "run",
        "seq",
        "type",
        "actor_kind",
        "actor",
        "actor_user_id",
    )
    # What a task's attempts say of it (its partial output's attempt) is the panel's to read apart;
    # what its running attempt has used so far the view holds as `live_input_tokens` and
    # `live_output_tokens` (the record's `input_tokens_so_far` is the view's property of that name).
    so_far = {"input_tokens_so_far", "streaming_tokens"}
    assert set(TaskRunRecord.model_fields) - {"attempts", "partial_output"} - so_far <= set(TaskView.model_fields)
    assert {"live_input_tokens", "live_output_tokens"} <= set(TaskView.model_fields)


@pytest.fixture
def run(make_plan, demo_agents, priced_limit, personas, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}), launched_by=personas["launcher"])
    with transaction.atomic():
        events.record("task.progress", run=run, task=run.tasks.get(subtask__key="a"), payload={"progress": 40})
    return run


def test_api_download_and_audit_export_give_the_same_values(client, personas, run):
    client.force_login(personas["viewer"])
    detail = client.get(f"/api/runs/{run.pk}").json()
    download = json.loads(client.get(reverse("run_download_json", args=[run.pk])).content)
    assert download["run"] == detail["run"]
    assert download["tasks"] == detail["tasks"]
    assert list(detail["tasks"][0]) == list(TaskRunRecord.model_fields)

    api_events = client.get(f"/api/runs/{run.pk}/events", {"limit": 200}).json()["items"]
    exported = [json.loads(line) for line in audit_export.iter_export(Event.objects.filter(run=run), "jsonl")]
    assert [{k: v for k, v in row.items() if k != "actor_user_id"} for row in exported] == api_events
    assert api_events[-1]["payload"] == {"progress": 40}
