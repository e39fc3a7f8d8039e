"""Money, counts and durations in words: the one place their rules live, for every layer.

The engine writes sentences people read (a refused launch, a run's summary, a budget stop) and
the dashboard renders pages (dashboard/formatting.py re-exports `usd` and `duration`), so the rules sit at the
bottom of the stack where both may use them:

- `usd`: never rounds a real amount to zero. Under a cent it keeps two significant digits
  ($0.0050 for half a cent, $0.000012), under a dollar four decimals ($0.0649), else cents with
  thousands separators ($1,234.50). Zero is $0.00.
- `budget`: an amount a person set (a run's budget, a budget's limits) as they would write it:
  whole cents as cents ($0.50, not $0.5000), a finer amount to its last decimal, at least four
  ($0.0050, $1.2345). A limit is never rounded: "$100,000,000.00" misstated the largest budget,
  $99,999,999.9999.
- `counted`: "1 task", "2 tasks", "0 tasks".
- `duration`: 0.8 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h (the browser's clocks mirror it in
  static/dashboard/run/format.js).
- `clock`: a time of day as every page and sentence gives it, in UTC and labelled so ("10:31:07
  UTC"), whatever zone the moment came in; `moment`: a date and time so ("2026-11-28 10:31:07
  UTC"), for a record read on another day (the audit log, the Markdown export).
- `time_limit`: a timeout as a person sets it: whole seconds as whole seconds (1 s, not 1.0 s),
  anything else as `duration` shows it (1.2 s, 12 s, 2 min 30 s).
- `percent`, `percent_text`: a share of a budget, rounded to the nearest percent, but never 0% of
  a non-zero amount ("<1%") nor 100% before the whole is reached (99%).
- `rate_wait`: what holds a model call back, by its wait code: "the provider's request budget".
- `TASK_STATE_LABELS`, `task_is`: a task's state as a person reads it, a label ("needs approval",
  the run page's badge) or what the task is, said after its name ("task start has succeeded",
  "task brief needs approval"), never the state's code ("is succeeded", "is waiting gate"). The
  engine's refusals and the pages both say them.
- `Refusal`, `sentence`: a refusal's message is a clause, so that it reads after a colon ("Run not
  launched: estimated cost … is over the budget"); shown on its own (the run page's flash, the
  approvals inbox, a command's error) it is a sentence ("Run 3 already ended (succeeded): it
  cannot be paused"). Every layer refuses things, so both live here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

EM_DASH = "—"


def sentence(clause: str) -> str:
    """`clause` as a sentence on its own: its first letter a capital, nothing else changed (names
    and values inside it keep their case)."""
    return clause[:1].upper() + clause[1:]


class Refusal(Exception):
    """Something a person asked for that cannot be done; the message says why, as a clause."""

    @property
    def sentence(self) -> str:
        """The message as it is shown on its own: "Run 3 already ended (succeeded): it cannot be paused"."""
        return sentence(str(self))


# The finest amount shown (costs are stored with six decimals).
SMALLEST_USD = Decimal("0.000001")


def _decimal(amount) -> Decimal | None:
    try:
        value = Decimal(str(amount if amount is not None else 0))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def usd(amount) -> str:
    """Dollars for people: $0.00, $0.000012, $0.0050, $0.0649, $12.35, $1,234.50 (an em dash
    when `amount` is not a number)."""
    value = _decimal(amount)
    if value is None:
        return EM_DASH
    sign = "-" if value < 0 else ""
    size = value.copy_abs()  # abs() overflows the context at 1e999999999
    if size == 0:
        return "$0.00"
    if 0 < size < SMALLEST_USD:
        return "<$0.000001"
    if size.adjusted() > _LARGEST_WRITTEN_OUT:  # rounding to cents would overflow the context
        return f"{sign}${size}"
    shown = usd_shown(size)
    return f"{sign}${shown:,}" if shown >= 1 else f"{sign}${shown}"


def usd_shown(amount: Decimal) -> Decimal:
    """The amount `usd` writes, rounded as it rounds it: cents from $1 (1.1254 → 1.13), else
    four decimals, or two significant digits below a cent. A message that sets two amounts side
    by side must not write "$1.13 is over the budget of $1.13"."""
    size = abs(amount)
    if size.quantize(Decimal("0.0001"), ROUND_HALF_UP) >= 1:
        places = 2
    elif size >= Decimal("0.01") or size == 0:
        places = 4
    else:
        # Two significant digits, at least four decimals: 0.005 → 0.0050, 0.000012 → 0.000012.
        places = min(6, max(4, -size.adjusted() + 1))
    shown = size.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
    return shown if amount >= 0 else -shown


# Past these an amount is written as Decimal writes it ("$1E+30"): every digit of an amount someone
# typed ("1e999999999" as a budget) would be a billion characters.
_LARGEST_WRITTEN_OUT = 15  # digits before the point, less one (a quadrillion dollars)
_FINEST_WRITTEN_OUT = 12  # decimals


def budget(amount) -> str:
    """A budget as a person sets it: $0.50, $25.00, $1,234.50 (whole cents as cents); an amount
    with a fraction of a cent to its last decimal, at least four ($0.0050, $1.2345, $0.12345),
    never rounded; an em dash when not a number."""
    value = _decimal(amount)
    if value is None:
        return EM_DASH
    sign = "-" if value < 0 else ""
    size = value.copy_abs()  # abs() overflows the context at 1e999999999
    digits, exponent = size.as_tuple().digits, int(size.as_tuple().exponent)
    significant = len(digits)
    while significant and digits[significant - 1] == 0:
        significant -= 1
    decimals = max(0, -(exponent + len(digits) - significant)) if significant else 0
    if size and (size.adjusted() > _LARGEST_WRITTEN_OUT or decimals > _FINEST_WRITTEN_OUT):
        return f"{sign}${size}"
    places = 2 if decimals <= 2 else max(4, decimals)
    return f"{sign}${size:,.{places}f}"


def duration(seconds: float | None) -> str:
    """0.8 s, 12 s, 3 min 05 s, 2 h 04 min, 3 d 2 h; an em dash when unknown.

    Rounding is Python's (half to even: 12.5 s shows as "12 s"); format.js does the same.
    """
    if seconds is None:
        return EM_DASH
    if seconds < 10:
        return f"{max(0.0, seconds):.1f} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def clock(moment: datetime) -> str:
    """A time of day as the run page gives it: in UTC, labelled so ("10:31:07 UTC")."""
    return f"{moment.astimezone(UTC):%H:%M:%S} UTC"


def moment(value: datetime) -> str:
    """A date and time as a record gives it: to the second, in UTC, labelled so
    ("2026-11-28 10:31:07 UTC")."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def time_limit(seconds: float | None) -> str:
    """A timeout as a person sets it: "1 s", "5 s" (whole seconds without a ".0"); anything else as
    `duration` shows it: "1.2 s" for 1.23456, "12 s" for what is left of a task's 12.3457 s."""
    if seconds is not None and 0 <= seconds < 60 and float(seconds).is_integer():
        return f"{int(seconds)} s"
    return duration(seconds)


def tool_call_outcome(is_error: bool, seconds: float | None, server_start_s: float | None = None) -> str:
    """A tool call's end in words, its own time apart from its server's start-up: "answered in
    0.4 s · server started in 2.5 s", "failed after 30 s". One wording for the run page, the
    attempt's page, the audit log and the exports."""
    said = "failed" if is_error else "answered"
    if seconds is not None:
        said += f" {'after' if is_error else 'in'} {duration(seconds)}"
    if server_start_s is not None:
        said += f" · server started in {duration(server_start_s)}"
    return said


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """`count` and the noun in the right number: counted(1, "task") == "1 task"."""
    return f"{count} {singular if count == 1 else (plural or singular + 's')}"


def percent(part, whole) -> int:
    """`part` as a whole percentage of `whole`, rounded to the nearest: 1 for any non-zero part that
    would round to 0, 99 for any part under the whole that would round to 100, at most 100 (also
    of a whole that is not positive)."""
    part, whole = _decimal(part) or Decimal(0), _decimal(whole) or Decimal(0)
    if whole <= 0 or part >= whole:
        return 100
    if part <= 0:
        return 0
    rounded = int((part * 100 / whole).quantize(Decimal(1), ROUND_HALF_UP))
    return min(99, max(1, rounded))


def percent_text(part, whole) -> str:
    """`percent` for people: "<1%" for a non-zero part under half a percent, else "3%", "99%", "100%"."""
    shown = percent(part, whole)
    if shown == 1 and (_decimal(part) or 0) * 200 < (_decimal(whole) or 0):
        return "<1%"
    return f"{shown}%"


# What holds a model call back, by the code of its wait (engine/waits.py; codes are data, never
# renamed), said as the end of "waiting for …" / "waited 12 s for …".
RATE_WAITS = {
    "rate_limit_requests": "the provider's request budget",
    "rate_limit_input": "the provider's input-token budget",
    "rate_limit_output": "the provider's output-token budget",
    "provider_backoff": "the provider's backoff",
}


def rate_wait(code: str) -> str:
    """What a wait of this code waits for: rate_wait("rate_limit_requests") == "the provider's request budget"."""
    return RATE_WAITS.get(code, "the provider's rate budget")


# A task's states as the run page's badges, legend and counts name them, by state (TaskRun.State's
# values, data, never renamed; "waiting" is the page's state of a ready task a cap holds back,
# "retrying" of one waiting for its retry's backoff).
TASK_STATE_LABELS = {
    "pending": "pending",
    "waiting_gate": "needs approval",
    "ready": "ready",
    "waiting": "held back",
    "retrying": "retrying",
    "throttled": "throttled",
    "queued": "queued",
    "running": "running",
    "awaiting_review": "in review",
    "succeeded": "succeeded",
    "failed": "failed",
    "skipped": "skipped",
    "cancelled": "cancelled",
}

# What a task in each state is, said after its name, in its label's words.
TASK_STATE_CLAUSES = {
    "pending": "is pending",
    "waiting_gate": "needs approval",
    "ready": "is ready",
    "waiting": "is held back",
    "retrying": "is retrying",
    "throttled": "is throttled",
    "queued": "is queued",
    "running": "is running",
    "awaiting_review": "is in review",
    "succeeded": "has succeeded",
    "failed": "has failed",
    "skipped": "was skipped",
    "cancelled": "was cancelled",
}


def no_files(run_finished: bool) -> str:
    """What a run's Artifacts card says while the workspace holds no file: an ended run will get
    none ("No files yet" on an ended run promised some), a run under way may."""
    if run_finished:
        return "This run wrote no files."
    return "No files yet: what the agents write in the workspace appears here."


def task_is(state: str) -> str:
    """What a task in `state` is, after its name: task_is("succeeded") == "has succeeded" ("task
    start has succeeded: only a failed, cancelled or skipped task can be retried"),
    task_is("waiting_gate") == "needs approval"."""
    return TASK_STATE_CLAUSES.get(state, f"is {state}")


# The command line acts as no user: its actions are recorded as "cli:" and the system user
# (management/console.py `cli_actor`).
CLI_PREFIX = "cli:"


def who(user=None, actor_name: str = "") -> str:
    """Who did something, in words: a person's username; "root from the command line" for
    `cli:root`; any other recorded actor by its name; "the command line" when none is known.
    A cancelled run's header said "cancelled by cli:root" beside "launched by root from the
    command line"."""
    if user is not None:
        return user.get_username()
    if actor_name.startswith(CLI_PREFIX):
        return f"{actor_name.removeprefix(CLI_PREFIX)} from the command line"
    return actor_name or "the command line"
