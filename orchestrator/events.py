"""The event log: every state change writes one Event row in the same transaction.

An Event is history, audit trail and outbox at once. Within a run, events carry a sequence
number (1, 2, 3 ...) allocated under the run's row lock, so a live client sees a gap at once.
After the transaction commits, the run's channel group gets a doorbell; the Event table stays
the record (the channel layer is at-most-once).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F

from orchestrator.models import Agent, Event, Run, TaskRun

log = logging.getLogger(__name__)


def run_group_name(run_id: int) -> str:
    return f"run-{run_id}"


def record(
    type: str,
    *,
    run: Run | int | None = None,
    task: TaskRun | None = None,
    agent: Agent | None = None,
    user: User | None = None,
    actor_name: str = "",
    message: str = "",
    payload: dict[str, Any] | None = None,
) -> Event:
    """Append one event. Must run inside the transaction of the change it describes."""
    run_id = run.pk if isinstance(run, Run) else run
    if run_id is None and task is not None:
        run_id = task.run_id
    if agent is None and task is not None:
        agent = task.agent
    seq = None
    if run_id is not None:
        # The UPDATE takes the run's row lock until commit, so two writers never share a number.
        Run.objects.filter(pk=run_id).update(last_event_seq=F("last_event_seq") + 1)
        seq = Run.objects.filter(pk=run_id).values_list("last_event_seq", flat=True).get()
    if user is not None and getattr(user, "is_authenticated", False):
        actor_kind, actor_name = Event.ActorKind.USER, actor_name or user.get_username()
    elif actor_name.startswith("agent:"):
        actor_kind, user = Event.ActorKind.AGENT, None
    else:
        actor_kind, user, actor_name = Event.ActorKind.SYSTEM, None, actor_name or "system"
    event = Event.objects.create(
        run_id=run_id,
        seq=seq,
        type=type,
        actor_kind=actor_kind,
        actor_user=user,
        actor_name=actor_name[:150],
        task_run=task,
        agent=agent,
        message=message[:500],
        payload=payload or {},
    )
    if run_id is not None and seq is not None:
        transaction.on_commit(lambda: ring_doorbell(run_id, seq))
    return event


# False in a worker process whose channel layer is in-process (the embedded default): its
# doorbells could reach no viewer, since viewers live in daphne and tail the Event table there.
doorbell_reaches_viewers = True


def silence_doorbell_if_unreachable() -> None:
    """Called in each worker process: skip doorbells that an in-process channel layer cannot carry."""
    global doorbell_reaches_viewers
    from django.conf import settings

    backend = str(settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", ""))
    doorbell_reaches_viewers = not backend.endswith("InMemoryChannelLayer")


def ring_doorbell(run_id: int, seq: int) -> None:
    """Tell live viewers of a run that event `seq` exists. Losing this message loses nothing."""
    if not doorbell_reaches_viewers:
        return
    try:
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(run_group_name(run_id), {"type": "run.event", "seq": seq})
    except Exception:  # the doorbell is best effort; viewers also tail the Event table
        log.debug("doorbell for run %s seq %s not delivered", run_id, seq, exc_info=True)
