"""Adaptive concurrency: halve on a 429/529, grow by one per window of successes, up to the cap."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import adaptive, retries, runs
from orchestrator.models import Attempt, Event, ProviderLimit
from orchestrator.providers.base import Overloaded, RateLimited

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


# --- The request rate learned from 429s ----------------------------------------------------------
# Learning charges the simulated model's request budget, which on Redis outlives the test
# database: `still_budgets` empties it before and after each of these tests.


def started_run(make_agent, make_plan, tasks: int):
    """A run of `tasks` tasks on simulated:sim-1, each attempt started just now (a request sent)."""
    make_agent("researcher", max_concurrency=tasks)
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(tasks)}), cap=tasks)
    assert Attempt.objects.filter(task_run__run=run).count() == tasks
    Attempt.objects.filter(task_run__run=run).update(state="running", started_at=timezone.now())
    return run


def test_a_429_teaches_the_request_rate_the_provider_accepted_when_nobody_set_one(
    make_agent, make_plan, limit, still_budgets
):
    run = started_run(make_agent, make_plan, 5)
    retries.back_off_provider(run, run.tasks.first(), RateLimited("429", retry_after_s=5))
    limit.refresh_from_db()
    assert limit.learned_requests_per_minute == 4  # five requests sent, this one refused
    assert limit.per_minute("requests_per_minute") == 4
    event = Event.objects.get(type="provider.rate_learned")
    assert event.payload == {"provider": "simulated", "model": "sim-1", "old": None, "new": 4}
    assert "accepting 4 request(s) in the last minute" in event.message

    # The provider said its minute is full: once the back-off is over, admission waits for the
    # minute window, not for another refusal.
    ProviderLimit.objects.filter(pk=limit.pk).update(backoff_until=None, effective_in_flight=None)
    make_agent("writer")  # same provider and model, slots of its own
    later = runs.launch(make_plan({"x": ("writer", [])}), cap=1)
    waiting = later.tasks.get()
    assert waiting.state == "throttled" and waiting.wait_code == "rate_limit_requests", waiting.wait_reason
    assert waiting.wait_reason == "provider simulated:sim-1 requests per minute used up (a rate learned from its 429s)"


def test_each_refusal_of_a_burst_lowers_the_rate_to_what_was_really_accepted(
    make_agent, make_plan, limit, still_budgets
):
    run = started_run(make_agent, make_plan, 5)
    first, second = run.tasks.all()[:2]
    retries.back_off_provider(run, first, RateLimited("429", retry_after_s=5))
    retries.back_off_provider(run, second, RateLimited("429", retry_after_s=5))  # was in flight with it
    limit.refresh_from_db()
    assert limit.learned_requests_per_minute == 3
    assert [e.payload["new"] for e in Event.objects.filter(type="provider.rate_learned").order_by("seq")] == [4, 3]


def test_a_learned_rate_grows_by_one_per_minute_without_a_429(limit):
    learned_at = timezone.now()
    ProviderLimit.objects.filter(pk=limit.pk).update(learned_requests_per_minute=10, learned_at=learned_at)
    limit.refresh_from_db()
    assert limit.per_minute("requests_per_minute", learned_at + timedelta(seconds=59)) == 10
    assert limit.per_minute("requests_per_minute", learned_at + timedelta(seconds=60)) == 11
    assert limit.per_minute("requests_per_minute", learned_at + timedelta(minutes=5, seconds=1)) == 15


def test_a_configured_or_reported_request_rate_is_never_replaced_by_a_learned_one(
    make_agent, make_plan, limit, still_budgets
):
    ProviderLimit.objects.filter(pk=limit.pk).update(requests_per_minute=50)
    run = started_run(make_agent, make_plan, 3)
    retries.back_off_provider(run, run.tasks.first(), RateLimited("429", retry_after_s=5))
    limit.refresh_from_db()
    assert limit.learned_requests_per_minute is None
    assert limit.per_minute("requests_per_minute") == 50
    assert not Event.objects.filter(type="provider.rate_learned").exists()


def test_an_overload_teaches_no_request_rate(make_agent, make_plan, limit, still_budgets):
    run = started_run(make_agent, make_plan, 3)
    retries.back_off_provider(run, run.tasks.first(), Overloaded("529", retry_after_s=1))
    limit.refresh_from_db()
    assert limit.learned_requests_per_minute is None
    assert limit.per_minute("requests_per_minute") is None
