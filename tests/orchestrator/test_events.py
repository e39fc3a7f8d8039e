"""Events: per-run sequence numbers, append-only rows, the doorbell."""

from __future__ import annotations

import pytest

from orchestrator import events
from orchestrator.models import AppendOnlyError, Event


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
