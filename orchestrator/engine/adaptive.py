"""Adaptive concurrency per provider and model (DESIGN §3): multiplicative decrease on a 429/529,
additive increase on success, never above the configured cap.

The effective cap lives on the ProviderLimit row (`effective_in_flight`; None means "the
configured cap", or no cap), so every worker process and cluster reads the same value; the
scheduler's admission uses it. It grows by one after a window of successes as long as the cap
itself, like TCP's congestion window, so a run finds the provider's sweet spot by itself.
Every change is an Event, so the dashboard can show it.

A provider that answers 429 without saying its limits (no rate-limit headers, no
requests_per_minute configured) also teaches a request rate: `learn_request_rate`.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator import events, ratelimit
from orchestrator.engine.admission import admission_key
from orchestrator.models import Attempt, Event, ProviderLimit, Run, TaskRun

RATE_WINDOW = timedelta(seconds=60)


def in_flight(limit: ProviderLimit) -> int:
    return TaskRun.objects.filter(
        state__in=TaskRun.ACTIVE, agent__provider=limit.provider, agent__model=limit.model
    ).count()


def ceiling(limit: ProviderLimit) -> int:
    return limit.max_in_flight or settings.GLASSBOX_ADAPTIVE_CEILING


def record_change(limit: ProviderLimit, old: int | None, new: int | None, why: str, run: Run | None, task=None) -> None:
    shown_old = old if old is not None else "configured"
    shown_new = new if new is not None else f"configured ({limit.max_in_flight or 'no cap'})"
    events.record(
        "provider.concurrency",
        run=run,
        task=task,
        message=f"{limit} effective cap {shown_old} → {shown_new}: {why}",
        payload={"provider": limit.provider, "model": limit.model, "old": old, "new": new, "reason": why},
    )


def decrease(limit: ProviderLimit, *, run: Run | None = None, task=None) -> None:
    """Halve the effective cap after a rate-limit or overload answer (call under the row lock)."""
    current = limit.effective_in_flight or limit.max_in_flight or max(1, in_flight(limit))
    new = max(1, current // 2)
    old = limit.effective_in_flight
    ProviderLimit.objects.filter(pk=limit.pk).update(effective_in_flight=new, successes_since_change=0)
    limit.effective_in_flight, limit.successes_since_change = new, 0
    record_change(limit, old, new, "the provider answered 429/529", run, task)


def increase(provider: str, model: str, *, run: Run | None = None, task=None) -> None:
    """After a success: one step up per window of successes, back to the configured cap at the top."""
    limit = ProviderLimit.objects.select_for_update(no_key=True).filter(provider=provider, model=model).first()
    if limit is None or limit.effective_in_flight is None:
        return
    successes = limit.successes_since_change + 1
    if successes < limit.effective_in_flight:
        ProviderLimit.objects.filter(pk=limit.pk).update(successes_since_change=successes)
        return
    old = limit.effective_in_flight
    new = old + 1 if old + 1 < ceiling(limit) else None
    ProviderLimit.objects.filter(pk=limit.pk).update(effective_in_flight=new, successes_since_change=0)
    record_change(limit, old, new, f"{successes} successes in a row", run, task)


def learn_request_rate(limit: ProviderLimit, *, run: Run | None = None, task=None) -> int | None:
    """After a 429 from a provider whose request rate nobody configured and no header reported:
    keep to what it accepted in the minute before (call under the row lock, before this refusal's
    `provider.backoff` event). Returns the rate learned (None when the rate is known already).

    Accepted: the attempts on this provider and model that started in the last minute, less the
    refusals of that minute, this one included. Each refusal learns again, so the answers to
    requests that were in flight together lower it to what was really accepted. An attempt that
    uses tools makes several calls but counts once: the rate learned is then lower than the
    provider's, and it grows back (ProviderLimit.per_minute: one more per minute without a 429).

    The admission budget is charged up to the rate learned: the provider says it is full now, so
    admission waits for the same minute window the provider waits for, not for another refusal.
    """
    if limit.requests_per_minute:
        return None
    now = timezone.now()
    since = now - RATE_WINDOW
    started = Attempt.objects.filter(
        task_run__agent__provider=limit.provider, task_run__agent__model=limit.model, started_at__gte=since
    ).count()
    refused = Event.objects.filter(
        type="provider.backoff",
        created_at__gte=since,
        payload__provider=limit.provider,
        payload__model=limit.model,
        payload__status=429,
    ).count()
    accepted = max(1, started - refused - 1)
    old = limit.per_minute("requests_per_minute", now)
    ProviderLimit.objects.filter(pk=limit.pk).update(learned_requests_per_minute=accepted, learned_at=now)
    limit.learned_requests_per_minute, limit.learned_at = accepted, now
    key = admission_key(limit.provider, limit.model, "rpm")
    remaining, _ = ratelimit.peek(key, accepted)
    if remaining > 0:
        ratelimit.acquire(key, remaining, accepted)
    if old != accepted:
        events.record(
            "provider.rate_learned",
            run=run,
            task=task,
            message=(
                f"{limit} answered 429 after accepting {accepted} request(s) in the last minute: admission keeps "
                f"to {accepted} per minute, one more each minute without a 429"
            ),
            payload={"provider": limit.provider, "model": limit.model, "old": old, "new": accepted},
        )
    return accepted
