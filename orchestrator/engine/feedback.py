"""What the Anthropic API's rate-limit headers teach the scheduler (DESIGN §5).

Every answer of the Messages API (successes and errors alike) carries
``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``:
the account's per-minute limits, what is left of them now, and when (RFC 3339) the bucket is
full again. :func:`apply_rate_limit_headers` turns them into three small changes, all
conditional updates that are safe when several workers report at once:

1. **Learn the limits.** A ProviderLimit whose ``requests_per_minute``,
   ``input_tokens_per_minute`` or ``output_tokens_per_minute`` is unset takes the value of the
   matching ``*-limit`` header. A value set by an administrator is never changed.
2. **Back off when a budget is empty.** When any ``*-remaining`` is 0, the provider's
   ``backoff_until`` moves to that budget's reset time (never earlier than it already is, never
   more than :data:`MAX_BACKOFF_S` ahead: the buckets refill continuously, so one minute
   always frees some room). The scheduler admits nothing on the provider until then.
3. **Share what the server knows with the admission limiter.** The scheduler takes one request
   and the task's tokens from the shared per-minute budgets ``admit:<provider>:<model>:rpm|itpm|otpm``
   (see ``scheduler.rate_limit_wait``). Other clients of the same account spend the server's
   budget too, so when the server reports fewer units remaining than our budget has left, the
   difference is taken from ours: admission then slows down before the server answers 429.

Only ProviderLimit rows that exist are changed (an administrator creates them, or seed_demo
does): a model nobody configured is not rate-limited by the scheduler anyway. Feedback is
advisory: a database error while applying it is logged and never fails the attempt that
carried the headers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from orchestrator import ratelimit
from orchestrator.models import ProviderLimit

log = logging.getLogger(__name__)

HEADER_PREFIX = "anthropic-ratelimit-"
# The budgets the API reports, and the ProviderLimit field and admission key each one feeds.
BUDGETS = {
    "requests": ("requests_per_minute", "rpm"),
    "input-tokens": ("input_tokens_per_minute", "itpm"),
    "output-tokens": ("output_tokens_per_minute", "otpm"),
    "tokens": (None, None),  # the most restrictive token limit: only its "remaining: 0" matters
}
MAX_BACKOFF_S = 60.0


@dataclass
class BudgetReport:
    limit: int | None = None
    remaining: int | None = None
    reset: datetime | None = None


@dataclass
class FeedbackResult:
    """What one set of headers changed: for logs and tests."""

    learned: dict[str, int] = field(default_factory=dict)  # ProviderLimit field -> value
    backoff_until: datetime | None = None
    taken: dict[str, int] = field(default_factory=dict)  # admission key suffix -> units taken


def admission_key(provider: str, model: str, suffix: str) -> str:
    """The scheduler's shared per-minute budget for one provider, model and unit."""
    return f"admit:{provider}:{model}:{suffix}"


def parse_reset(value: str | None) -> datetime | None:
    """An RFC 3339 time (``2026-11-22T15:16:55Z``), or None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _int(value: str | None) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def read_headers(headers: Mapping[str, str]) -> dict[str, BudgetReport]:
    """The budgets reported in ``headers`` (any case), by name: requests, input-tokens, ..."""
    lowered = {str(name).lower(): value for name, value in headers.items()}
    reports: dict[str, BudgetReport] = {}
    for budget in BUDGETS:
        base = f"{HEADER_PREFIX}{budget}-"
        report = BudgetReport(
            limit=_int(lowered.get(base + "limit")),
            remaining=_int(lowered.get(base + "remaining")),
            reset=parse_reset(lowered.get(base + "reset")),
        )
        if report.limit is not None or report.remaining is not None:
            reports[budget] = report
    return reports


def apply_rate_limit_headers(provider: str, model: str, headers: Mapping[str, str]) -> FeedbackResult:
    """Apply one answer's rate-limit headers to the ProviderLimit of ``provider``/``model``."""
    result = FeedbackResult()
    reports = read_headers(headers)
    if not reports:
        return result
    try:
        limit = ProviderLimit.objects.filter(provider=provider, model=model).first()
        if limit is None:
            return result
        _learn_limits(limit, reports, result)
        _back_off_when_empty(limit, reports, result)
        _sync_admission_budgets(limit, reports, result)
    except DatabaseError:
        log.warning("could not apply rate-limit headers of %s:%s", provider, model, exc_info=True)
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
    resets = [
        min(report.reset or latest, latest)
        for report in reports.values()
        if report.remaining == 0
    ]
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
        per_minute = getattr(limit, field_name) if field_name else None
        if suffix is None or report is None or report.remaining is None or not per_minute:
            continue
        key = admission_key(limit.provider, limit.model, suffix)
        ours, _ = ratelimit.peek(key, per_minute)
        surplus = ours - report.remaining
        if surplus > 0 and ratelimit.acquire(key, surplus, per_minute) == 0.0:
            result.taken[suffix] = surplus
