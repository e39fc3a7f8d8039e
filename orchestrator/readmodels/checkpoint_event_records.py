"""The records of a run's checkpoints and events: what people decided, and what happened.

`CheckpointRecord` is a checkpoint as the API answers it (the run's checkpoints, a decision just
taken; `CheckpointWithRun` adds its run) and as the JSON download lists it; `EventRecord` is an
event as the API's event pages give it and the audit export's rows extend it (`AuditRecord`).
`event_rows` is what both of those read of an event's task and agent. The base, the field types
and every other model's record are `records`'.
"""

from __future__ import annotations

from typing import Any, Self

from django.db.models import QuerySet

from orchestrator.models import Checkpoint, Event

from .records import Record, Time


class CheckpointRecord(Record):
    id: int
    kind: str
    task: str | None
    status: str
    # What became of it in words: "approved", or "closed without a decision: the run was cancelled".
    outcome: str
    # When it opened (a retried or re-run task asks again with a new checkpoint: this one is kept).
    created_at: Time
    decided_by: str | None
    decided_at: Time
    comment: str
    # The plan checkpoint's plan version (under review while pending, decided after); "" for a task's.
    plan_version: str

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> Self:
        return cls.build(checkpoint)

    @classmethod
    def build(cls, checkpoint: Checkpoint, **more: Any) -> Self:
        """The checkpoint's record; `more` sets the fields a subclass adds."""
        task_run = checkpoint.task_run  # None for a run-level checkpoint (no query then)
        return cls(
            id=checkpoint.pk,
            kind=checkpoint.kind,
            task=task_run.subtask.key if task_run is not None else None,
            status=checkpoint.status,
            outcome=checkpoint.outcome,
            created_at=checkpoint.created_at,
            decided_by=checkpoint.decider or None,
            decided_at=checkpoint.decided_at,
            comment=checkpoint.comment,
            plan_version=checkpoint.plan_version,
            **more,
        )


# What an event's record and an audit export's row read of the event and its relations: the
# task's key and the agent's name, not the task's output, the subtask's instructions or the
# agent's prompt and settings, which a bare select_related reads for every row (a real agent's
# run makes them large). The run page's log reads its rows apart (`log.log_rows`).
EVENT_ROW_FIELDS = (
    "id",
    "created_at",
    "run_id",
    "seq",
    "type",
    "actor_kind",
    "actor_name",
    "actor_user_id",
    "message",
    "payload",
    "task_run__subtask__key",
    "agent__name",
)


def event_rows(events: QuerySet[Event]) -> QuerySet[Event]:
    """These events with what their records and log rows show of their task and agent, no more."""
    return events.select_related("task_run__subtask", "agent").only(*EVENT_ROW_FIELDS)


class EventRecord(Record):
    id: int
    created_at: Time
    run: int | None
    seq: int | None
    type: str
    actor_kind: str
    actor: str
    task: str | None
    agent: str | None
    message: str
    payload: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> Self:
        return cls.build(event)

    @classmethod
    def build(cls, event: Event, **more: Any) -> Self:
        """The event's record (read through `event_rows`); `more` sets a subclass's fields."""
        task_run, agent = event.task_run, event.agent  # either may be None (no query then)
        return cls(
            id=event.pk,
            created_at=event.created_at,
            run=event.run_id,
            seq=event.seq,
            type=event.type,
            actor_kind=event.actor_kind,
            actor=event.actor_name,
            task=task_run.subtask.key if task_run is not None else None,
            agent=agent.name if agent is not None else None,
            message=event.message,
            payload=dict(event.payload or {}),
            **more,
        )
