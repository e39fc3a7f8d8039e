"""The run page's event log: the newest events first, filtered by task and type, in words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from orchestrator import wording
from orchestrator.models import Event, Run

from .template_items import TemplateItems

# The most rows one query of the log returns; also how far behind (in events) a viewer that
# resumes may be and still get a live batch rather than a full refresh (dashboard/frames.py).
LOG_LIMIT = 200
# The run page shows this many newest events at first; older ones load on demand. A live frame
# never carries more log rows than this: more new events replace the rows with this page.
PAGE_LOG_ROWS = 30
# Event families the log can be filtered by (the part of the type before the dot).
EVENT_FAMILIES = ("run", "task", "checkpoint", "plan", "provider", "attempt", "agent", "tool", "access")
# The log hides the streamed-progress heartbeat unless asked ("all") or filtered to it.
NOISY_TYPES = ("task.progress",)


@dataclass(frozen=True, slots=True)
class LogRow(TemplateItems):
    """An event as a row of the log shows it (event_row.html), read as plain values.

    The live view sends the log's page in the frame of a fan-out (hundreds of events in one
    transaction), the page and its "Show older events" a page each. Reading each event as four
    model instances (the event, its task, the task's subtask and its agent, for the task's key)
    took twice as long as reading these values (~4 against ~2 ms for a page), and the template's
    lookups on a model raise and catch an exception each (`TemplateItems` says why).
    """

    seq: int
    created_at: datetime
    type: str
    run_id: int
    task_run_id: int | None
    task_key: str | None  # its task's key (None for an event of the run)
    actor_kind: str
    actor_name: str
    message: str
    payload: Any


LOG_ROW_COLUMNS = tuple(
    "task_run__subtask__key" if name == "task_key" else name for name in LogRow.__dataclass_fields__
)


def log_rows(events: QuerySet[Event]) -> list[LogRow]:
    """These events (filtered, ordered and sliced as the caller wants) as rows of the log."""
    return [LogRow(*row) for row in events.values_list(*LOG_ROW_COLUMNS)]


def event_log(
    run: Run | int,
    *,
    task_id: int | None = None,
    type_filter: str = "",
    after_seq: int | None = None,
    before_seq: int | None = None,
    limit: int = LOG_LIMIT,
) -> list[LogRow]:
    """Events of the run, newest first, as rows of the log.

    `type_filter`: "" (everything but the streamed-progress heartbeat), "all", a family such as
    "task" or "checkpoint" (every type that starts with it), or one exact type like "task.failed".
    `after_seq` keeps only events newer than that sequence number, `before_seq` only older ones.
    """
    run_id = run.pk if isinstance(run, Run) else run
    events = Event.objects.filter(run_id=run_id)
    if task_id:
        events = events.filter(task_run_id=task_id)
    events = filter_types(events, type_filter)
    if after_seq is not None:
        events = events.filter(seq__gt=after_seq)
    if before_seq is not None:
        events = events.filter(seq__lt=before_seq)
    return log_rows(events.order_by("-seq")[:limit])


def older_than(events: list[LogRow], limit: int) -> int | None:
    """The sequence number to ask for older events with (`before_seq`), or None when a page of
    `limit` newest-first events shows them all."""
    return events[-1].seq if len(events) >= limit and events else None


def filter_types(events, type_filter: str):
    if type_filter == "all":
        return events
    if not type_filter:
        return events.exclude(type__in=NOISY_TYPES)
    if "." in type_filter:
        return events.filter(type=type_filter)
    return events.filter(type__startswith=f"{type_filter}.")


def matches_type_filter(event_type: str, type_filter: str) -> bool:
    """The same rule as `filter_types`, for one event type (the live view filters as it appends)."""
    if type_filter == "all":
        return True
    if not type_filter:
        return event_type not in NOISY_TYPES
    if "." in type_filter:
        return event_type == type_filter
    return event_type.startswith(f"{type_filter}.")


def describe_event(event: Event | LogRow) -> str:
    """The event's message, or a short account of its payload when it has none."""
    if event.message:
        return event.message
    payload = event.payload or {}
    parts = []
    for name in ("attempt", "worker", "progress", "output_tokens", "input_tokens", "cost_usd", "latency_ms", "reason"):
        value = payload.get(name)
        if value in (None, ""):
            continue
        if name == "progress":
            parts.append(f"{value}%")
        elif name == "latency_ms":
            parts.append(f"waited {value} ms")
        elif name == "cost_usd":
            parts.append(wording.usd(value))  # as the run's cards show money: "$0.0123", not "$0.012300"
        else:
            parts.append(f"{name.replace('_', ' ')} {value}")
    return " · ".join(parts)


def event_types(run: Run) -> list[str]:
    """The distinct event types this run has written, sorted."""
    return sorted(set(Event.objects.filter(run_id=run.pk).values_list("type", flat=True).distinct()))
