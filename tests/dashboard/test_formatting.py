"""dashboard/formatting.py: the one formatter of durations, token counts and money, and the
template filters (glassbox_format) that wrap it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.template import Context, Template
from django.utils import timezone as django_timezone

from dashboard.formatting import format_duration, format_tokens, format_usd, wrap_between_words


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (-4, "0.0 s"),
        (0, "0.0 s"),
        (0.84, "0.8 s"),
        (0.25, "0.2 s"),  # Python's rounding: ties to even (format.js does the same)
        (9.96, "10.0 s"),
        (12.5, "12 s"),
        (42, "42 s"),
        (185, "3 min 05 s"),
        (3600, "1 h 00 min"),
        (7440, "2 h 04 min"),
        (47 * 3600 + 59 * 60, "47 h 59 min"),
        (48 * 3600, "2 d 0 h"),
        (3 * 86400 + 7200, "3 d 2 h"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (None, "0"),
        (0, "0"),
        (999, "999"),
        (9_999, "9,999"),
        (10_000, "10.0k"),
        (123_456, "123.5k"),
        (4_560_000, "4.56M"),
    ],
)
def test_format_tokens(count, text):
    assert format_tokens(count) == text


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (None, "$0.00"),
        (0, "$0.00"),
        (Decimal("0.000012"), "$0.000012"),  # a fraction of a cent is never rounded to zero
        (Decimal("0.00005"), "$0.000050"),
        (Decimal("0.0000004"), "<$0.000001"),
        (Decimal("0.005"), "$0.0050"),  # the budget that once read "$0.00"
        (Decimal("0.0099996"), "$0.0100"),
        (Decimal("0.0123"), "$0.0123"),
        (Decimal("0.06494"), "$0.0649"),
        ("0.5", "$0.5000"),
        (Decimal("0.99995"), "$1.00"),
        (Decimal("1"), "$1.00"),
        (Decimal("12.3456"), "$12.35"),
        (Decimal("12.345"), "$12.35"),  # half up, as money is read
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("99999999.9999"), "$100,000,000.00"),
        (Decimal("-0.25"), "-$0.2500"),
        ("n/a", "—"),
        ("NaN", "—"),
    ],
)
def test_format_usd(amount, text):
    assert format_usd(amount) == text


def test_the_template_filters_render_the_same_text():
    template = Template(
        "{% load glassbox_format %}{{ s|duration }} · {{ n|tokens }} · {{ usd|usd }} · {{ none|duration }}"
    )
    text = template.render(Context({"s": 3 * 86400 + 7200, "n": 12_345, "usd": Decimal("0.0042"), "none": ""}))
    assert text == "3 d 2 h · 12.3k · $0.0042 · —"


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
def test_clock_gives_the_time_of_day_in_utc_as_the_event_logs_heading_says(zone):
    """The event log's times (`clock`) sit under "Time (UTC)": they were formatted in the current
    time zone, true only while it was UTC. Now in UTC whatever the zone, as `time:"H:i:s"` gives it
    in UTC."""
    moments = [
        datetime(2026, 11, 28, 4, 5, 9, 999_999, tzinfo=UTC),
        datetime(2026, 11, 28, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=-5))),
    ]
    ours = Template("{% load glassbox_format %}{% for m in moments %}{{ m|clock }} {% endfor %}{{ none|clock }}")
    django = Template('{% for m in moments %}{{ m|time:"H:i:s" }} {% endfor %}{{ none|time:"H:i:s" }}')
    with django_timezone.override(zone):
        text = ours.render(Context({"moments": moments, "none": None}))
    with django_timezone.override("UTC"):
        assert text == django.render(Context({"moments": moments, "none": None}))
    assert text.startswith("04:05:09 23:59:59 05:00:00")


def test_a_date_and_time_is_to_the_second_in_utc_whatever_the_current_zone():
    """The plans' pages gave "2026-11-28 10:31 UTC" after formatting in the current zone."""
    moment = datetime(2026, 11, 28, 16, 1, 7, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    template = Template("{% load glassbox_format %}{{ m|utc_moment }}|{{ none|utc_moment }}")
    with django_timezone.override("Asia/Kolkata"):
        assert template.render(Context({"m": moment, "none": None})) == "2026-11-28 10:31:07 UTC|"


def test_an_identifier_wraps_only_between_its_words():
    assert wrap_between_words("probe_11_19") == "probe_<wbr>11_<wbr>19"
    assert wrap_between_words("task.retry_scheduled") == "task.<wbr>retry_<wbr>scheduled"
    assert wrap_between_words("report") == "report"
    assert wrap_between_words("<b>x-y</b>") == "&lt;b&gt;x-<wbr>y&lt;/b&gt;"  # escaped first
    assert Template("{% load glassbox_format %}{{ key|wrappable }}").render(Context({"key": "a_b"})) == "a_<wbr>b"
