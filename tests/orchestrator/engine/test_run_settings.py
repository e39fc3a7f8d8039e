"""Run settings: one set of limits and defaults for every way of launching."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator.engine import runs
from orchestrator.engine.run_settings import (
    MAX_BUDGET_USD,
    MAX_CAP,
    InvalidRunSetting,
    RunSettings,
    budget_shortfall,
    least_budget_for,
    parse_budget,
    parse_cap,
)


def test_defaults_come_from_the_django_settings(db, settings):
    settings.GLASSBOX_DEFAULT_CAP = 7
    settings.GLASSBOX_DEFAULT_BUDGET_USD = "2.50"

    assert RunSettings.defaults() == RunSettings(cap=7, budget_usd=Decimal("2.50"), failure_policy="continue")


def test_the_limits_are_the_run_columns():
    assert MAX_CAP == 1000
    assert MAX_BUDGET_USD == Decimal("99999999.9999")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "cap must be a whole number from 1 to 1000, got 0"),
        ("1001", "cap must be a whole number from 1 to 1000, got 1001"),
        ("lots", "cap must be a whole number from 1 to 1000, got 'lots'"),
        (True, "cap must be a whole number from 1 to 1000, got True"),
    ],
)
def test_a_cap_out_of_its_limits_names_them(value, message):
    with pytest.raises(InvalidRunSetting) as invalid:
        parse_cap(value)
    assert str(invalid.value) == message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # Every amount as the pages and the other messages write one ($0.00, -$1.00, $100,000,000.00),
        # where it said "got $0", "got $-1" and "got 0.12345"; the limits whole, never rounded.
        ("0", "budget must be from $0.0001 to $99,999,999.9999, got $0.00"),
        ("-1", "budget must be from $0.0001 to $99,999,999.9999, got -$1.00"),
        ("100000000", "budget must be from $0.0001 to $99,999,999.9999, got $100,000,000.00"),
        ("1e999999999", "budget must be from $0.0001 to $99,999,999.9999, got $1E+999999999"),
        ("lots", "budget must be an amount in USD such as 0.50, got 'lots'"),
        ("NaN", "budget must be an amount in USD such as 0.50, got 'NaN'"),
        ("0.12345", "budget must have at most 4 decimal places, got $0.12345"),
    ],
)
def test_a_budget_out_of_its_limits_names_them(value, message):
    with pytest.raises(InvalidRunSetting) as invalid:
        parse_budget(value)
    assert str(invalid.value) == message


def test_text_values_are_read_like_the_command_line_and_the_form_give_them(db):
    assert RunSettings.of(cap="3", budget_usd="1.25", failure_policy="fail_fast") == RunSettings(
        cap=3, budget_usd=Decimal("1.25"), failure_policy="fail_fast"
    )


def test_runs_launch_refuses_bad_settings_with_the_same_words(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [])})

    with pytest.raises(runs.LaunchRefused, match="cap must be a whole number from 1 to 1000, got 0"):
        runs.launch(plan, cap=0)
    with pytest.raises(runs.LaunchRefused, match="failure policy must be continue or fail_fast, got 'sometimes'"):
        runs.launch(plan, failure_policy="sometimes")


def test_a_default_cap_or_budget_outside_the_limits_fails_the_system_check(settings):
    from orchestrator.engine.run_settings import check_defaults

    assert check_defaults() == []
    settings.GLASSBOX_DEFAULT_CAP = 5000
    settings.GLASSBOX_DEFAULT_BUDGET_USD = "0.123456"
    problems = [str(p.msg) for p in check_defaults()]
    assert len(problems) == 2
    assert problems[0].startswith("GLASSBOX_DEFAULT_CAP=5000:") and "1000" in problems[0]
    assert problems[1].startswith("GLASSBOX_DEFAULT_BUDGET_USD='0.123456':")


# --- Plan approval by default -------------------------------------------------------------------


def test_a_single_approver_install_launches_without_plan_approval(personas):
    assert RunSettings.of().require_plan_approval is False  # the approver persona alone may approve


def test_with_a_second_approver_plan_approval_is_the_default(personas):
    from django.contrib.auth.models import User

    User.objects.create_superuser("root")  # a superuser may approve too
    assert RunSettings.of().require_plan_approval is True
    assert RunSettings.of(require_plan_approval=False).require_plan_approval is False  # the flag turns it off


def test_inactive_approvers_do_not_count(personas):
    from django.contrib.auth.models import User

    User.objects.create_superuser("gone", is_active=False)
    assert RunSettings.of().require_plan_approval is False


@pytest.mark.parametrize(("choice", "expected"), [("always", True), ("never", False)])
def test_the_default_can_be_fixed_by_setting(db, settings, choice, expected):
    settings.GLASSBOX_PLAN_APPROVAL_DEFAULT = choice
    assert RunSettings.of().require_plan_approval is expected
    assert RunSettings.of(require_plan_approval=not expected).require_plan_approval is (not expected)


@pytest.mark.parametrize(
    "cost, least, words",
    [
        # The advice read "at least $1.13" of $1.1254; a budget of $1.13 was then refused again.
        ("1.1254", "1.13", "the estimated cost $1.13 is over the budget of $0.50: raise the budget to at least $1.13"),
        # Rounded down, the estimate would read "$1.14 … at least $1.15": written to its last decimal.
        (
            "1.1404",
            "1.15",
            "the estimated cost $1.1404 is over the budget of $0.50: raise the budget to at least $1.15",
        ),
        (
            "0.3154",
            "0.3154",
            "the estimated cost $0.3154 is over the budget of $0.50: raise the budget to at least $0.3154",
        ),
        (
            "0.133215",
            "0.1333",
            "the estimated cost $0.133215 is over the budget of $0.50: raise the budget to at least $0.1333",
        ),
        (
            "0.000012",
            "0.0001",
            "the estimated cost $0.000012 is over the budget of $0.50: raise the budget to at least $0.0001",
        ),
    ],
)
def test_the_advised_budget_is_one_a_person_can_type_and_it_covers_the_cost(cost, least, words):
    assert least_budget_for(Decimal(cost)) == Decimal(least)
    assert parse_budget(least) >= Decimal(cost)
    assert budget_shortfall(Decimal(cost), Decimal("0.50")) == words


def test_a_cost_that_rounds_to_the_budget_is_not_said_to_be_over_it():
    """ "$1.12 is over the budget of $1.12": the estimate is written to its last decimal."""
    assert budget_shortfall(Decimal("1.1249"), Decimal("1.12")) == (
        "the estimated cost $1.1249 is over the budget of $1.12: raise the budget to at least $1.13"
    )
