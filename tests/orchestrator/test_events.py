"""Events: per-run sequence numbers, append-only rows, the doorbell."""

from __future__ import annotations

import pytest

from orchestrator import events
from orchestrator.models import AppendOnlyError, Event
from tests.conftest import in_another_connection


@pytest.mark.django_db
def test_events_of_a_run_are_numbered_without_gaps_and_cannot_change(demo_agents, make_plan):
    from orchestrator.engine import runs

    run = runs.launch(make_plan({"a": ("researcher", [])}))
    first = events.record("note", run=run, message="one")
    second = events.record("note", run=run, message="two")
    assert second.seq == first.seq + 1
    with pytest.raises(AppendOnlyError):
        first.save()
    with pytest.raises(AppendOnlyError):
        Event.objects.filter(pk=first.pk).update(message="changed")
    with pytest.raises(AppendOnlyError):
        Event.objects.filter(pk=first.pk).delete()


@pytest.mark.django_db(transaction=True)
def test_an_event_recorded_outside_a_transaction_is_never_numbered_before_it_is_written(
    demo_agents, make_plan, monkeypatch
):
    """In autocommit, the number's UPDATE committed before the event's INSERT: a live view's round
    in between saw the number taken, no event under it, and moved its viewers past the event (a
    tool step's row on the run page kept its older text). A reader now sees the number only with
    its event."""
    from orchestrator.engine import runs

    run = runs.launch(make_plan({"a": ("researcher", [])}))
    monkeypatch.setattr(events.sql, "takes_arrays", lambda connection: False)  # number, then insert
    insert, seen = events.sql.insert, []

    def insert_while_another_reads(model, rows):
        def read():
            latest = events.latest_seq(run.pk)
            seen.append((latest, Event.objects.filter(run_id=run.pk, seq=latest).exists()))

        if rows:
            in_another_connection(read)
        return insert(model, rows)

    monkeypatch.setattr(events.sql, "insert", insert_while_another_reads)
    event = events.record("note", run=run, message="written")
    (latest, found), *_ = seen
    assert found, f"event {latest} was numbered but not written"
    assert events.latest_seq(run.pk) == event.seq == latest + 1


def test_a_worker_with_an_in_process_channel_layer_rings_no_doorbell(settings, monkeypatch):
    sent = []
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda: sent.append("layer"))
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    monkeypatch.setattr(events, "doorbell_reaches_viewers", True)
    events.silence_doorbell_if_unreachable()
    events.ring_doorbell(1, 1)
    assert sent == [] and events.doorbell_reaches_viewers is False
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer"}}
    events.silence_doorbell_if_unreachable()
    assert events.doorbell_reaches_viewers is True
