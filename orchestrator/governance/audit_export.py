"""The audit log as CSV or JSON Lines, streamed row by row so that any size fits in memory.

Both formats have the same columns (COLUMNS): the fields of the Event record that the
API sends (orchestrator/readmodels/checkpoint_event_records.py), plus the acting user's id. JSON Lines is the
faithful one: one JSON object per event, the payload as a nested object. CSV is for spreadsheets: the payload is a JSON text
in one cell, and a text cell that a spreadsheet would run as a formula (starting with =, +, -,
@, tab or carriage return) gets a leading apostrophe, because messages and comments are
written by people and agents.

Events are read in chunks with `iterator()` (sync, for WSGI) or `aiterator()` (async, for daphne:
an ASGI server would otherwise read a sync iterator whole before sending it).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet

from orchestrator.models import Event
from orchestrator.readmodels.checkpoint_event_records import EventRecord, event_rows

CHUNK_SIZE = 2000


class AuditRecord(EventRecord):
    """An event as the audit export writes it: the Event record plus the acting user's id."""

    actor_user_id: int | None

    @classmethod
    def of(cls, event: Event) -> AuditRecord:
        return cls.build(event, actor_user_id=event.actor_user_id)


# The export's column order, kept as it was first published (scripts read CSV columns by
# position); a test checks it names exactly the record's fields.
COLUMNS = (
    "id",
    "created_at",
    "run",
    "seq",
    "type",
    "actor_kind",
    "actor",
    "actor_user_id",
    "task",
    "agent",
    "message",
    "payload",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}


class ExportError(Exception):
    pass


def _rows_query(queryset: QuerySet) -> QuerySet:
    return event_rows(queryset.order_by("id"))


def _record(event: Event) -> dict[str, Any]:
    record = AuditRecord.of(event).model_dump(mode="json")
    return {column: record[column] for column in COLUMNS}


def to_json_line(event: Event) -> str:
    return json.dumps(_record(event), ensure_ascii=False, separators=(",", ":")) + "\n"


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv_line(cells) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(cells)
    return buffer.getvalue()


def csv_header() -> str:
    return _csv_line(COLUMNS)


def to_csv_line(event: Event) -> str:
    record = _record(event)
    return _csv_line(_csv_cell(record[column]) for column in COLUMNS)


_LINE = {"csv": to_csv_line, "jsonl": to_json_line}


def _check_format(fmt: str) -> None:
    if fmt not in _LINE:
        raise ExportError(f"unknown export format {fmt!r}: use csv or jsonl")


def iter_export(queryset: QuerySet, fmt: str) -> Iterator[str]:
    """The events of `queryset` in `fmt` (csv or jsonl), oldest first, a line at a time."""
    _check_format(fmt)
    line = _LINE[fmt]
    if fmt == "csv":
        yield csv_header()
    for event in _rows_query(queryset).iterator(chunk_size=CHUNK_SIZE):
        yield line(event)


async def aiter_export(queryset: QuerySet, fmt: str) -> AsyncIterator[str]:
    """iter_export for ASGI servers: rows are read a chunk at a time without blocking the loop."""
    _check_format(fmt)
    line = _LINE[fmt]
    if fmt == "csv":
        yield csv_header()
    async for event in _rows_query(queryset).aiterator(chunk_size=CHUNK_SIZE):
        yield line(event)
