"""Template filters of the run page: sanitised Markdown and compact numbers, money and times."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation

from django import template

from orchestrator.readmodels.log import describe_event
from orchestrator.readmodels.tasks import STATE_LABELS, display_state

from ..formatting import format_duration
from ..markdown import render_markdown

register = template.Library()


@register.filter
def markdown(text):
    """Agent output rendered as sanitised HTML (see dashboard/markdown.py)."""
    return render_markdown(text)


@register.filter
def duration(seconds) -> str:
    """0.4 s, 12 s, 3 min 05 s, 2 h 04 min; an em dash when unknown."""
    return format_duration(None if seconds in (None, "") else float(seconds))


@register.filter
def usd(value) -> str:
    """$0.0123 under a dollar (four decimals), $12.34 above."""
    try:
        amount = Decimal(str(value if value is not None else 0))
    except InvalidOperation:
        return "—"
    return f"${amount:.4f}" if abs(amount) < 1 else f"${amount:,.2f}"


@register.filter
def tokens(value) -> str:
    """1,234 below ten thousand; 12.3k and 4.56M above."""
    n = int(value or 0)
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


@register.filter
def epoch_ms(value: datetime | None) -> str:
    """Milliseconds since the epoch, for data-* attributes that run.js reads; "" for None."""
    return str(int(value.timestamp() * 1000)) if value else ""


@register.filter
def state_label(state: str) -> str:
    return STATE_LABELS.get(state, state)


@register.filter
def percent_of(part, whole) -> int:
    try:
        return max(0, min(100, int(100 * float(part) / float(whole)))) if float(whole) else 0
    except (TypeError, ValueError):
        return 0


@register.filter
def seconds_after(end: datetime | None, start: datetime | None):
    """Seconds from `start` to `end` (None when either is missing)."""
    if end is None or start is None:
        return None
    return (end - start).total_seconds()


@register.filter
def event_text(event) -> str:
    """What the event log shows for an event: its message, or a summary of its payload."""
    return describe_event(event)


@register.filter
def task_state(task) -> str:
    """A TaskRun's display state: `waiting` for a ready task held back, else its state."""
    return display_state(task.state, task.wait_reason)


@register.filter
def task_state_label(task) -> str:
    return STATE_LABELS.get(task_state(task), task.state)
