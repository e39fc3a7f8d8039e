"""Launching a run (engine/run_launch.py): when it starts; a launch over its budget refused, nothing saved."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from orchestrator.engine import runs
from orchestrator.models import Run
from orchestrator.readmodels.records import RunRecord


def test_a_run_launched_at_once_starts_as_it_is_created_never_before(make_agent, make_plan):
    """`started_at` was taken before the ORM took `created_at`: the API gave a run that started
    microseconds before it was created."""
    make_agent("researcher")
    run = Run.objects.get(pk=runs.launch(make_plan({"a": ("researcher", [])})).pk)
    assert run.started_at == run.created_at
    record = RunRecord.of(run)
    assert record.started_at == record.created_at


@pytest.mark.django_db
def test_launch_over_budget_is_refused_with_the_numbers(demo_agents, make_plan, priced_limit):
    plan = make_plan({"a": ("researcher", [], {"estimate": {"input_tokens": 100000, "output_tokens": 10}})})
    with pytest.raises(runs.LaunchRefused, match=r"estimated cost \$0\.3154 is over the budget of \$0\.10:"):
        runs.launch(plan, budget_usd="0.10")
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_budget_of_exactly_the_advised_amount_launches(demo_agents, make_plan, priced_limit):
    """The advice was the estimate rounded to cents ("at least $1.13" of $1.1254): typed as
    advised, the budget was refused again with the same advice."""
    plan = make_plan({"a": ("researcher", [], {"estimate": {"input_tokens": 372000, "output_tokens": 10}})})
    assert runs.estimate_cost(plan) != runs.estimate_cost(plan).quantize(Decimal("0.01"))  # a fraction of a cent
    with pytest.raises(runs.LaunchRefused) as refused:
        runs.launch(plan, budget_usd="0.50")
    advised = re.search(r"raise the budget to at least \$([\d.]+) or trim the plan", str(refused.value))
    assert advised, str(refused.value)
    assert runs.launch(plan, budget_usd=advised.group(1)).budget_usd == Decimal(advised.group(1))
