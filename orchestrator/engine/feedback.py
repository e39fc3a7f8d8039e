"""What a provider's rate-limit reports teach the scheduler (DESIGN §5).

Every answer of the Messages API (successes and errors alike) carries
``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``:
the account's per-minute limits, what is left of them now, and when (RFC 3339) the bucket is
full again. The provider reads them into a ``ProviderFeedback`` (orchestrator.providers.base)
and changes nothing itself: adapters report, the engine decides. Execution hands every
feedback it receives (in the stream, or on a ProviderError) to :func:`apply`, which turns it
into three small changes, all conditional updates that are safe when several workers report
at once:

1. **Learn the limits.** A ProviderLimit whose ``requests_per_minute``,
   ``input_tokens_per_minute`` or ``output_tokens_per_minute`` is unset takes the value of the
   matching ``*-limit`` header. A value set by an administrator is never changed.
2. **Back off when a budget is empty.** When any ``*-remaining`` is 0, the provider's
   ``backoff_until`` moves to that budget's reset time (never earlier than it already is, never
   more than :data:`MAX_BACKOFF_S` ahead: the buckets refill continuously, so one minute
   always frees some room). The scheduler admits nothing on the provider until then.
3. **Share what the server knows with the admission limiter.** The scheduler takes one request
   and the task's tokens from the shared per-minute budgets ``admit:<provider>:<model>:rpm|itpm|otpm``
   (see ``admission.rate_limit_wait``). Other clients of the same account spend the server's
   budget too, so when the server reports fewer units remaining than our budget has left, the
   difference is taken from ours: admission then slows down before the server answers 429.

Only ProviderLimit rows that exist are changed (an administrator creates them, or seed_demo
does): a model nobody configured is not rate-limited by the scheduler anyway. Feedback is
advisory: a database error while applying it is logged and never fails the attempt that
carried the headers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from orchestrator import ratelimit
from orchestrator.engine.admission import admission_key
from orchestrator.models import ProviderLimit
from orchestrator.providers.base import BudgetReport, ProviderFeedback

log = logging.getLogger(__name__)

# The budgets a provider reports, and the ProviderLimit field and admission key each one feeds.
BUDGETS = {
    "requests": ("requests_per_minute", "rpm"),
    "input-tokens": ("input_tokens_per_minute", "itpm"),
    "output-tokens": ("output_tokens_per_minute", "otpm"),
    "tokens": (None, None),  # the most restrictive token limit: only its "remaining: 0" matters
}
MAX_BACKOFF_S = 60.0


@dataclass
class FeedbackResult:
    """What one set of headers changed: for logs and tests."""

    learned: dict[str, int] = field(default_factory=dict)  # ProviderLimit field -> value
    backoff_until: datetime | None = None
    taken: dict[str, int] = field(default_factory=dict)  # admission key suffix -> units taken


def apply(feedback: ProviderFeedback | None) -> FeedbackResult:
    """Apply what one answer reported to the ProviderLimit of its provider and model."""
    result = FeedbackResult()
    if feedback is None or not feedback.budgets:
        return result
    try:
        limit = ProviderLimit.objects.filter(provider=feedback.provider, model=feedback.model).first()
        if limit is None:
            return result
        _learn_limits(limit, feedback.budgets, result)
        _back_off_when_empty(limit, feedback.budgets, result)
        _sync_admission_budgets(limit, feedback.budgets, result)
    except DatabaseError:
        log.warning("could not apply rate-limit feedback of %s:%s", feedback.provider, feedback.model, exc_info=True)
    return result


def _learn_limits(limit: ProviderLimit, reports: dict[str, BudgetReport], result: FeedbackResult) -> None:
    for budget, (field_name, _) in BUDGETS.items():
        report = reports.get(budget)
        if field_name is None or report is None or not report.limit:
            continue
        if getattr(limit, field_name) is None:
            updated = ProviderLimit.objects.filter(pk=limit.pk, **{f"{field_name}__isnull": True}).update(
                **{field_name: report.limit}
            )
            if updated:
                setattr(limit, field_name, report.limit)
                result.learned[field_name] = report.limit


def _back_off_when_empty(limit: ProviderLimit, reports: dict[str, BudgetReport], result: FeedbackResult) -> None:
    now = timezone.now()
    latest = now + timedelta(seconds=MAX_BACKOFF_S)
    resets = [min(report.reset or latest, latest) for report in reports.values() if report.remaining == 0]
    if not resets:
        return
    until = max(resets)
    if until <= now:
        return
    ProviderLimit.objects.filter(pk=limit.pk).filter(Q(backoff_until__isnull=True) | Q(backoff_until__lt=until)).update(
        backoff_until=until
    )
    result.backoff_until = until
    log.info("%s reports an empty rate-limit budget: backing off until %s", limit, until.isoformat())


def _sync_admission_budgets(limit: ProviderLimit, reports: dict[str, BudgetReport], result: FeedbackResult) -> None:
    for budget, (field_name, suffix) in BUDGETS.items():
        report = reports.get(budget)
        per_minute = limit.per_minute(field_name) if field_name else None
        if suffix is None or report is None or report.remaining is None or not per_minute:
            continue
        key = admission_key(limit.provider, limit.model, suffix)
        ours, _ = ratelimit.peek(key, per_minute)
        surplus = ours - report.remaining
        if surplus > 0 and ratelimit.acquire(key, surplus, per_minute) == 0.0:
            result.taken[suffix] = surplus
