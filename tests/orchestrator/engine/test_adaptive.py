"""Adaptive concurrency: halve on a 429/529, grow by one per window of successes, up to the cap."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import adaptive, retries, runs
from orchestrator.models import Event, ProviderLimit
from orchestrator.providers.base import RateLimited

pytestmark = pytest.mark.django_db


@pytest.fixture
def limit(db):
    return ProviderLimit.objects.create(provider="simulated", model="sim-1", max_in_flight=8)


def test_a_rate_limit_answer_halves_the_effective_cap(limit):
    adaptive.decrease(limit)
    limit.refresh_from_db()
    assert limit.effective_in_flight == 4
    adaptive.decrease(limit)
    limit.refresh_from_db()
    assert limit.effective_in_flight == 2
    event = Event.objects.filter(type="provider.concurrency").last()
    assert event.payload == {
        "provider": "simulated",
        "model": "sim-1",
        "old": 4,
        "new": 2,
        "reason": "the provider answered 429/529",
    }


def test_the_cap_never_drops_below_one(limit):
    for _ in range(6):
        adaptive.decrease(limit)
    limit.refresh_from_db()
    assert limit.effective_in_flight == 1


def test_successes_grow_the_cap_by_one_per_window_and_stop_at_the_configured_cap(limit):
    ProviderLimit.objects.filter(pk=limit.pk).update(effective_in_flight=6)
    for _ in range(5):
        adaptive.increase("simulated", "sim-1")
    limit.refresh_from_db()
    assert limit.effective_in_flight == 6  # a window is six successes at a cap of six
    adaptive.increase("simulated", "sim-1")
    limit.refresh_from_db()
    assert limit.effective_in_flight == 7
    for _ in range(7):
        adaptive.increase("simulated", "sim-1")
    limit.refresh_from_db()
    assert limit.effective_in_flight is None  # back at the configured cap of 8, never above it


def test_successes_change_nothing_while_adaptive_concurrency_is_idle(limit):
    adaptive.increase("simulated", "sim-1")
    limit.refresh_from_db()
    assert limit.effective_in_flight is None
    assert not Event.objects.filter(type="provider.concurrency").exists()


def test_only_the_first_refusal_of_a_burst_halves_the_cap(make_agent, make_plan, limit):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}))
    task = run.tasks.first()
    retries.back_off_provider(run, task, RateLimited("429", retry_after_s=5))
    retries.back_off_provider(run, task, RateLimited("429", retry_after_s=5))
    limit.refresh_from_db()
    assert limit.effective_in_flight == 4
    assert limit.backoff_until > timezone.now() + timedelta(seconds=3)
    assert Event.objects.filter(type="provider.backoff").count() == 2
    assert Event.objects.filter(type="provider.concurrency").count() == 1


def test_admission_uses_the_effective_cap(make_agent, make_plan, limit):
    ProviderLimit.objects.filter(pk=limit.pk).update(effective_in_flight=1)
    make_agent("researcher")
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(4)}), cap=4)
    assert run.tasks.filter(state="queued").count() == 1
    assert "at its in-flight limit" in run.tasks.filter(state="ready").first().wait_reason
