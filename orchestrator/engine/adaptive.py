"""Adaptive concurrency per provider and model (DESIGN §3): multiplicative decrease on a 429/529,
additive increase on success, never above the configured cap.

The effective cap lives on the ProviderLimit row (`effective_in_flight`; None means "the
configured cap", or no cap), so every worker process and cluster reads the same value; the
scheduler's admission uses it. It grows by one after a window of successes as long as the cap
itself, like TCP's congestion window, so a run finds the provider's sweet spot by itself.
Every change is an Event, so the dashboard can show it.
"""

from __future__ import annotations

from django.conf import settings

from orchestrator import events
from orchestrator.models import ProviderLimit, Run, TaskRun


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
