"""The event log: every state change writes one Event row in the same transaction.

An Event is history, audit trail and outbox at once. Within a run, events carry a sequence
number (1, 2, 3 ...) so a live client sees a gap at once. After the transaction commits, the
run's channel group gets a doorbell; the Event table stays the record (the channel layer is
at-most-once).

Numbering without a hot row (DESIGN §9). A run's numbers come from its own `EventSequence` row,
not from the run row that the scheduler locks for the whole of a scheduling step. Inside
`events.atomic()` (every engine transaction) the events are buffered and written at the end of
the block: one statement takes as many numbers as the block recorded, one inserts them all. The
sequence row is then the last lock a transaction takes and is held only from there to commit,
so writers of one run wait on each other for a moment, never for a whole scheduling step, and no
two transactions can deadlock over it. Numbers are allocated in commit order, so every number a
reader sees as allocated belongs to a committed event: there are no holes to wait for.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from orchestrator import sql
from orchestrator.models import Agent, Event, EventSequence, Run, TaskRun

log = logging.getLogger(__name__)

_local = threading.local()  # .buffer: the events of the engine transaction open in this thread

# The order of Event's fields, which `record` passes positionally.
EVENT_FIELDS = (
    "id",
    "run_id",
    "seq",
    "type",
    "actor_kind",
    "actor_user_id",
    "actor_name",
    "task_run_id",
    "agent_id",
    "message",
    "payload",
    "created_at",
)
if tuple(f.attname for f in Event._meta.concrete_fields) != EVENT_FIELDS:  # a field added, moved or renamed
    raise ImproperlyConfigured("orchestrator.events.EVENT_FIELDS no longer matches the Event model's fields")


def run_group_name(run_id: int) -> str:
    return f"run-{run_id}"


class TaskKeys(Protocol):
    """What an event needs of its task: a TaskRun, or a scheduling step's plain row of one."""

    pk: int
    agent_id: int


def record(
    type: str,
    *,
    run: Run | int | None = None,
    task: TaskRun | TaskKeys | None = None,
    agent: Agent | None = None,
    user: User | None = None,
    actor_name: str = "",
    message: str = "",
    payload: dict[str, Any] | None = None,
) -> Event:
    """Append one event. Must run inside the transaction of the change it describes.

    Inside `atomic()` the event is written (and numbered) when the block ends, and the returned
    Event has no number yet; anywhere else it is written at once.
    """
    run_id = run.pk if isinstance(run, Run) else run
    if run_id is None and task is not None:
        run_id = getattr(task, "run_id", None)  # a TaskRun's (a step's plain rows come with their run)
    agent_id = agent.pk if agent is not None else (task.agent_id if task is not None else None)
    if user is not None and getattr(user, "is_authenticated", False):
        actor_kind, actor_name = Event.ActorKind.USER, actor_name or user.get_username()
    elif actor_name.startswith("agent:"):
        actor_kind, user = Event.ActorKind.AGENT, None
    else:
        actor_kind, user, actor_name = Event.ActorKind.SYSTEM, None, actor_name or "system"
    # Positional, in the model's field order (EVENT_FIELDS): half the time of keywords, and a
    # fan-out's step records hundreds (the task by id, for the same reason).
    event = Event(  # type: ignore[misc]
        None,  # id
        run_id,
        None,  # seq: numbered when written
        type,
        actor_kind,
        user.pk if user is not None else None,
        actor_name[:150],
        task.pk if task is not None else None,
        agent_id,
        message[:500],
        payload or {},
        None,  # created_at: set when written
    )
    buffer = getattr(_local, "buffer", None)
    if buffer is not None and run_id is not None:
        buffer.append(event)
    elif connection.in_atomic_block:
        write([event])
    else:
        # In autocommit the number's UPDATE would commit before the event's INSERT: a reader in
        # between sees the number taken and no event under it, and a live viewer's cursor would
        # pass the event by. Numbered and written in one transaction, as inside `atomic()`.
        with transaction.atomic():
            write([event])
    return event


@contextmanager
def atomic() -> Iterator[None]:
    """`transaction.atomic()` for engine transactions: their events are written at the end.

    Nested inside another `atomic()`, it is a savepoint whose events join the outer block's
    (and are dropped with it if it rolls back).
    """
    outer = getattr(_local, "buffer", None)
    if outer is not None:
        mark = len(outer)
        try:
            with transaction.atomic():
                yield
        except BaseException:
            del outer[mark:]
            raise
        return
    buffer: list[Event] = []
    _local.buffer = buffer
    try:
        with transaction.atomic():
            try:
                yield
            finally:
                _local.buffer = None
            write(buffer)
    finally:
        _local.buffer = None


def write(batch: list[Event]) -> None:
    """Number and insert events (in their order), and ring each run's doorbell after commit."""
    if not batch:
        return
    by_run: dict[int, list[Event]] = defaultdict(list)
    for event in batch:
        if event.run_id is not None:
            by_run[event.run_id].append(event)
    now = timezone.now()
    for event in batch:
        event.created_at = now  # auto_now_add, as a save would set it
    numbered_together = sql.takes_arrays(connection)
    for run_id, run_events in by_run.items():
        last = insert_numbered(run_id, run_events) if numbered_together else None
        if last is None:
            last = take_numbers(run_id, len(run_events))
            for offset, event in enumerate(run_events):
                event.seq = last - len(run_events) + 1 + offset
            sql.insert(Event, run_events)
        transaction.on_commit(functools.partial(ring_doorbell, run_id, last))
    # Every engine transaction's last statements: no query building (orchestrator/sql.py).
    sql.insert(Event, [event for event in batch if event.run_id is None])


def insert_numbered(run_id: int, run_events: list[Event]) -> int | None:
    """Number run `run_id`'s events and insert them in one statement (PostgreSQL): one round trip
    fewer in every engine transaction than numbering first. Returns the last number, or None
    when the run's sequence row is missing (nothing inserted)."""
    return sql.insert_numbered(
        Event, run_events, "seq", counter=_take_numbers_statement(), counter_params=[len(run_events), run_id]
    )


def _take_numbers_statement() -> str:
    """Advance a run's sequence by %s numbers (run id: the second parameter), returning the last as `last`."""
    table = EventSequence._meta.db_table
    return f"UPDATE {table} SET last_seq = last_seq + %s WHERE run_id = %s RETURNING last_seq AS last"


def take_numbers(run_id: int, count: int) -> int:
    """Allocate `count` sequence numbers of run `run_id`; returns the last one. Holds the run's
    sequence row until commit (one statement: an UPDATE … RETURNING, PostgreSQL and SQLite alike)."""
    with connection.cursor() as cursor:
        cursor.execute(_take_numbers_statement(), [count, run_id])
        row = cursor.fetchone()
    if row is None:  # a run made without its sequence row: numbered on from its last event
        last = Event.objects.filter(run_id=run_id).aggregate(last=Max("seq"))["last"]
        EventSequence.objects.get_or_create(run_id=run_id, defaults={"last_seq": last or 0})
        return take_numbers(run_id, count)
    return int(row[0])


def latest_seq(run_id: int) -> int | None:
    """The number of the run's last committed event (None for an unknown run). Read by every live
    view's poll, several times a second: SQL text, not a query built each time (orchestrator/sql.py)."""
    rows = sql.select(EventSequence, ("last_seq",), run_id=run_id)
    return rows[0][0] if rows else None


# False in a worker process whose channel layer is in-process (the embedded default): its
# doorbells could reach no viewer, since viewers live in daphne and tail the Event table there.
doorbell_reaches_viewers = True


def silence_doorbell_if_unreachable() -> None:
    """Called in each worker process: skip doorbells that an in-process channel layer cannot carry."""
    global doorbell_reaches_viewers
    doorbell_reaches_viewers = layer_reaches_viewers()


def layer_reaches_viewers() -> bool:
    """Whether this process's channel layer reaches daphne's consumers (not the in-memory layer)."""
    from django.conf import settings

    backend = str(settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", ""))
    return not backend.endswith("InMemoryChannelLayer")


# Who rings doorbells in this process, when not `send_doorbell` (a worker process's agent host sends
# them from its event loop, coalesced: see orchestrator/engine/host.py).
_doorbell_override: Callable[[int, int], None] | None = None


def set_doorbell(sender: Callable[[int, int], None] | None) -> None:
    global _doorbell_override
    _doorbell_override = sender


def ring_doorbell(run_id: int, seq: int) -> None:
    """Tell live viewers of a run that event `seq` exists. Losing this message loses nothing."""
    if not doorbell_reaches_viewers:
        return
    if _doorbell_override is not None:
        _doorbell_override(run_id, seq)
        return
    send_doorbell(run_id, seq)


def send_doorbell(run_id: int, seq: int) -> None:
    """Send the doorbell through the channel layer from synchronous code."""
    try:
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(run_group_name(run_id), {"type": "run.event", "seq": seq})
    except Exception:  # the doorbell is best effort; viewers also tail the Event table
        log.debug("doorbell for run %s seq %s not delivered", run_id, seq, exc_info=True)
