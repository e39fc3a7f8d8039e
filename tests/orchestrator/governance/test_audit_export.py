"""Audit log exports: CSV and JSON Lines, streamed, formula-safe CSV, sync and async alike."""

from __future__ import annotations

import csv
import io
import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from orchestrator import events
from orchestrator.engine import runs
from orchestrator.governance import audit, audit_export
from orchestrator.models import Event, Run


@pytest.fixture
def some_events(make_agent, make_plan):
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", [])})
    user = User.objects.create_user("alice")
    run = runs.launch(plan, launched_by=user)
    events.record("note", run=run, user=user, message='=HYPERLINK("http://evil")', payload={"comment": "-2+3"})
    return Event.objects.all()


def _collect(queryset, fmt):
    return "".join(audit_export.iter_export(queryset, fmt))


def test_jsonl_has_one_object_per_event_oldest_first(some_events):
    lines = _collect(some_events, "jsonl").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["id"] for r in records] == list(some_events.order_by("id").values_list("id", flat=True))
    assert all(list(r) == list(audit_export.COLUMNS) for r in records)
    note = records[-1]
    assert note["type"] == "note" and note["actor"] == "alice" and note["actor_kind"] == "user"
    assert note["payload"] == {"comment": "-2+3"} and note["message"] == '=HYPERLINK("http://evil")'
    created = next(r for r in records if r["type"] == "run.created")
    assert created["run"] == Run.objects.get().pk and created["seq"] == 1 and created["created_at"].endswith("+00:00")


def test_task_and_agent_columns_name_them(some_events):
    records = [json.loads(line) for line in _collect(some_events, "jsonl").splitlines()]
    queued = next(r for r in records if r["task"] is not None)
    assert queued["task"] == "a" and queued["agent"] == "researcher"


def test_csv_has_a_header_and_defuses_formulas(some_events):
    rows = list(csv.reader(io.StringIO(_collect(some_events, "csv"))))
    assert rows[0] == list(audit_export.COLUMNS)
    assert len(rows) == some_events.count() + 1
    note = rows[-1]
    record = dict(zip(rows[0], note, strict=True))
    assert record["message"] == '\'=HYPERLINK("http://evil")'
    assert json.loads(record["payload"]) == {"comment": "-2+3"}  # JSON text is not a formula: kept as is
    assert record["actor_user_id"].isdigit()


def test_an_unknown_format_is_refused(some_events):
    with pytest.raises(audit_export.ExportError, match="unknown export format 'xml': use csv or jsonl"):
        _collect(some_events, "xml")


def test_the_export_reads_rows_lazily(some_events):
    lines = audit_export.iter_export(some_events, "csv")
    assert next(lines) == audit_export.csv_header()  # nothing read from the database yet


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_async_export_equals_the_sync_one(some_events, fmt):
    async def collect():
        return "".join([line async for line in audit_export.aiter_export(some_events, fmt)])

    assert async_to_sync(collect)() == _collect(some_events, fmt)


def test_filters_apply(some_events):
    only = some_events.filter(type="note")
    records = [json.loads(line) for line in _collect(only, "jsonl").splitlines()]
    assert [r["type"] for r in records] == ["note"]


def test_an_export_is_itself_audited(db):
    user = User.objects.create_user("auditor")
    event = audit.record_export(user, "csv", {"type": "run.created", "run": "3"})
    assert event.type == "audit.exported" and event.actor_user == user
    assert event.payload == {"format": "csv", "filters": {"run": "3", "type": "run.created"}}
    assert event.message == "audit log exported as csv (run=3, type=run.created)"
