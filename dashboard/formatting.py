"""The one formatter of durations, token counts, money and times of day on the dashboard's pages, and of
identifiers (task keys, event types) that must wrap only between their words.

Views, template filters (templatetags/glassbox_run.py) and fragments render these strings on
the server; the browser only places them (the run page's DAG reads a task row's
`data-tokens-text`). The one exception is a clock that must tick in the browser (a run's elapsed
time, its ETA, the Gantt's time axis): static/dashboard/run/format.js mirrors `format_duration`
rule for rule, and tests/browser/test_formatting.py checks that the two agree.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from orchestrator import wording

EM_DASH = "—"


def format_duration(seconds: float | None) -> str:
    """0.8 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h; an em dash when unknown. The rules live in
    orchestrator/wording.py, which the engine's and the read models' sentences use too."""
    return wording.duration(seconds)


def format_tokens(count: int | None) -> str:
    """1,234 below ten thousand; 12.3k and 4.56M above."""
    n = int(count or 0)
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def format_usd(amount) -> str:
    """$0.00, $0.0050 (half a cent: never rounded to zero), $0.0649, $12.35, $1,234.50; an em dash
    when not a number. The rules live in orchestrator/wording.py, which the engine's sentences use too."""
    return wording.usd(amount)


def format_budget(amount) -> str:
    """A budget as a person sets it: $0.50 (not $0.5000), $25.00; $0.0050 for a fraction of a cent."""
    return wording.budget(amount)


def format_earlier_spend(attempts: int, tokens: int, cost) -> str:
    """What a task's attempts before its last re-run spent, which its row and panel keep apart
    from this start's tokens and cost: "before the re-run: 1 attempt, 1,234 tokens, $0.0040"
    ("" for a task never re-run after an attempt)."""
    if not attempts:
        return ""
    return (
        f"before the re-run: {wording.counted(attempts, 'attempt')}, {format_tokens(tokens)} tokens, {format_usd(cost)}"
    )


# Where an identifier may wrap: after each separator of its words ("probe_11_19", "task.progress").
IDENTIFIER_SEPARATORS = re.compile(r"([._-])")


def format_clock(moment: datetime) -> str:
    """A time of day as the run page gives it ("14:05:09"), in the time zone the moment is in
    (the template filter `clock` converts it to the current one first). The event log shows one
    for each row: Django's `time:"H:i:s"` took a third of a row's render (it looks its format up in
    the active language's formats each time)."""
    return f"{moment.hour:02}:{moment.minute:02}:{moment.second:02}"


def format_utc_clock(moment: datetime | None) -> str:
    """A time of day as the run page's sentences give it, in UTC and labelled so ("14:05:09 UTC",
    `orchestrator/wording.py`'s `clock`); "" when unset."""
    return "" if moment is None else wording.clock(moment)


def format_utc_moment(moment: datetime | None) -> str:
    """A date and time as a record gives it, to the second, in UTC and labelled so ("2026-11-28
    14:05:09 UTC", `orchestrator/wording.py`'s `moment`, as the admin and the audit log give it);
    "" when unset."""
    return "" if moment is None else wording.moment(moment)


def wrap_between_words(identifier: str) -> SafeString:
    """`identifier`, escaped, with a <wbr> after each "_", "." and "-": a narrow column wraps it
    there ("probe_11_" / "19", "task." / "progress"), never inside a word."""
    return mark_safe(IDENTIFIER_SEPARATORS.sub(r"\1<wbr>", str(escape(identifier))))
