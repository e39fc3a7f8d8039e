"""Budgets, time limits and shares in words: a budget as a person sets it ($0.50), a time limit
too (1 s); a share rounded to the nearest percent, never 0% of a spend, never 100% early."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from orchestrator import wording


@pytest.mark.parametrize(
    ("part", "whole", "percent", "text"),
    [
        (Decimal("0.0143"), Decimal("0.50"), 3, "3%"),  # 2.86%
        (Decimal("0.0125"), Decimal("0.50"), 3, "3%"),  # 2.5%: half up
        (Decimal("0.0124"), Decimal("0.50"), 2, "2%"),
        (Decimal("0.000001"), Decimal("0.50"), 1, "<1%"),
        (Decimal("0.004"), Decimal("0.50"), 1, "1%"),  # 0.8%
        (Decimal("0"), Decimal("0.50"), 0, "0%"),
        (Decimal("0.4999"), Decimal("0.50"), 99, "99%"),  # 99.98%: not yet the whole budget
        (Decimal("0.50"), Decimal("0.50"), 100, "100%"),
        (Decimal("0.75"), Decimal("0.50"), 100, "100%"),
        (Decimal("0.01"), Decimal("0"), 100, "100%"),
    ],
)
def test_a_share_of_a_budget(part, whole, percent, text):
    assert wording.percent(part, whole) == percent
    assert wording.percent_text(part, whole) == text


@pytest.mark.parametrize(
    ("clause", "shown"),
    [
        (
            "run 3 already ended (succeeded): it cannot be paused",
            "Run 3 already ended (succeeded): it cannot be paused",
        ),
        ("'x' is not SERVER or SERVER:TOOL", "'x' is not SERVER or SERVER:TOOL"),
        ("agent coder holds no grant testsrv", "Agent coder holds no grant testsrv"),
        ("", ""),
    ],
)
def test_a_refusal_reads_as_a_sentence_on_its_own(clause, shown):
    assert wording.Refusal(clause).sentence == shown == wording.sentence(clause)


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (Decimal("0.5000"), "$0.50"),  # the default budget, stored with four decimals, once read "$0.5000"
        (Decimal("0.10"), "$0.10"),
        (Decimal("25"), "$25.00"),
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0.0050"), "$0.0050"),  # a fraction of a cent is kept, as `usd` shows it
        # A limit to its last decimal, never rounded: "$1.23" and "$100,000,000.00" misstated these.
        (Decimal("1.2345"), "$1.2345"),
        (Decimal("99999999.9999"), "$99,999,999.9999"),
        (Decimal("0.0001"), "$0.0001"),
        (Decimal("0.12345"), "$0.12345"),
        (Decimal("-1"), "-$1.00"),
        (Decimal("0"), "$0.00"),
        (Decimal("1e999999999"), "$1E+999999999"),  # typed, not written out as a billion digits
        ("n/a", "—"),
    ],
)
def test_a_budget_reads_as_a_person_sets_it(amount, text):
    assert wording.budget(amount) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1, "1 s"),  # as it was set, not "1.0 s"
        (5.0, "5 s"),
        (1.23456, "1.2 s"),  # once "1.23456 s"
        (12.3457, "12 s"),  # what was left of a task's time, as `duration` shows it
        (0.5, "0.5 s"),
        (150, "2 min 30 s"),
        (None, "—"),
    ],
)
def test_a_time_limit_reads_as_a_person_sets_it(seconds, text):
    assert wording.time_limit(seconds) == text


def test_a_time_of_day_reads_in_utc_labelled_so_whatever_zone_it_came_in():
    moment = datetime(2026, 11, 28, 10, 31, 7, 600_000, tzinfo=UTC)
    assert wording.clock(moment) == "10:31:07 UTC"
    assert wording.clock(moment.astimezone(timezone(timedelta(hours=-5)))) == "10:31:07 UTC"
    assert wording.moment(moment.astimezone(timezone(timedelta(hours=-11)))) == "2026-11-28 10:31:07 UTC"


def test_every_task_state_has_a_label_and_a_clause_in_its_words():
    """A refusal read "task start is succeeded" and "is waiting gate": each state, the page's
    "waiting" too, says what the task is in its label's words, never its code."""
    from orchestrator.models import TaskRun

    states = {*TaskRun.State.values, "waiting", "retrying"}
    assert set(wording.TASK_STATE_LABELS) == states == set(wording.TASK_STATE_CLAUSES)
    assert not [said for said in wording.TASK_STATE_CLAUSES.values() if "_" in said]
    assert (wording.task_is("succeeded"), wording.task_is("waiting_gate")) == ("has succeeded", "needs approval")
    assert all(wording.TASK_STATE_LABELS[state] in wording.task_is(state) for state in states)  # the badge's words


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("999999999999999"), "$999,999,999,999,999.00"),
        (Decimal("1E+30"), "$1E+30"),  # raised: rounding 31 digits to cents overflowed the context
        (Decimal("-1E+40"), "-$1E+40"),
        (Decimal("1e999999999"), "$1E+999999999"),
    ],
)
def test_an_amount_of_money_is_written_whatever_its_size(amount, text):
    assert wording.usd(amount) == text


def test_who_did_it_reads_as_the_launcher_does():
    """A cancelled run's header said "cancelled by cli:root" beside "launched by root from the command line"."""
    assert wording.who(None, "cli:root") == "root from the command line"
    assert wording.who(None, "") == "the command line"
    assert wording.who(None, "system") == "system"
