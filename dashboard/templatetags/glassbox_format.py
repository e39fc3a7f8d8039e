"""Template filters for durations, token counts, money and identifiers: `{% load glassbox_format %}`.

Thin wrappers over dashboard/formatting.py, the one formatter the views use too.
"""

from __future__ import annotations

from datetime import UTC

from django import template

from orchestrator import wording

from ..formatting import (
    format_budget,
    format_clock,
    format_duration,
    format_earlier_spend,
    format_tokens,
    format_usd,
    format_utc_clock,
    format_utc_moment,
    wrap_between_words,
)

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """0.4 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h; an em dash when unknown."""
    return format_duration(None if seconds in (None, "") else float(seconds))


@register.filter
def time_limit(seconds) -> str:
    """A timeout as a person sets it (`wording.time_limit`): 6 s, 20 s, 2 min 00 s."""
    return wording.time_limit(None if seconds in (None, "") else float(seconds))


@register.filter
def clock(moment) -> str:
    """A time of day in UTC, "14:05:09", under a heading that says UTC (the event log's); "" when
    unset. In UTC whatever the current time zone: the heading does not follow it."""
    return "" if moment in (None, "") else format_clock(moment.astimezone(UTC))


@register.filter
def utc_clock(moment) -> str:
    """A time of day in UTC, labelled so: "14:05:09 UTC" ("" when unset)."""
    return format_utc_clock(moment or None)


@register.filter
def utc_moment(moment) -> str:
    """A date and time to the second in UTC, labelled so: "2026-11-28 14:05:09 UTC" ("" when unset)."""
    return format_utc_moment(moment or None)


@register.filter
def usd(value) -> str:
    """$0.0123 under a dollar (four decimals), $12.34 above."""
    return format_usd(value)


@register.filter
def budget(value) -> str:
    """A budget as a person sets it: $0.50 (not $0.5000), $25.00."""
    return format_budget(value)


@register.filter
def tokens(value) -> str:
    """1,234 below ten thousand; 12.3k and 4.56M above."""
    return format_tokens(value)


@register.filter
def wrappable(identifier) -> str:
    """A task key or an event type that wraps only between its words ("probe_11_<wbr>19")."""
    return wrap_between_words(identifier)


@register.filter
def earlier_spend(view) -> str:
    """A task view's spend before its last re-run, in words ("" when it was not re-run)."""
    return format_earlier_spend(view.earlier_attempts, view.earlier_tokens, view.earlier_cost_usd)
