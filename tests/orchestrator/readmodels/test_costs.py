"""Costs: reservations before dispatch, settlement after, totals per agent and model, budget stop."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator.engine import runs
from orchestrator.models import Attempt, Run
from orchestrator.readmodels import costs
from tests.conftest import run_attempt

pytestmark = pytest.mark.django_db(transaction=True)


def run_queued(run: Run) -> None:
    """Execute every queued attempt in this process, as workers would, until none is left."""
    while attempt := Attempt.objects.filter(task_run__run=run, state=Attempt.State.QUEUED).first():
        run_attempt(attempt.pk)


def test_admission_reserves_the_worst_case_and_settles_the_real_cost(make_agent, make_plan, priced_limit):
    make_agent("researcher", max_output_tokens=1000)
    plan = make_plan({"a": ("researcher", [], {"estimate": {"input_tokens": 1000, "output_tokens": 500}})})
    run = runs.launch(plan, budget_usd="1")
    run.refresh_from_db()
    worst = Decimal(1000 * 3 + 1000 * 15) / Decimal(1_000_000)
    assert run.reserved_usd == worst
    run_queued(run)
    run.refresh_from_db()
    attempt = Attempt.objects.get(task_run__run=run)
    assert run.reserved_usd == 0
    assert run.cost_usd == attempt.cost_usd == priced_limit.cost(attempt.input_tokens, attempt.output_tokens)


def test_parallel_fan_out_never_overspends_and_the_run_ends_over_budget(make_agent, make_plan, priced_limit):
    # The plan's estimates say nothing about input, but each prompt carries ~2,000 tokens of
    # instructions: admission must reserve by the prompt's real size, so fan-out cannot overspend.
    make_agent("researcher", max_output_tokens=100)
    long_instructions = {"instructions": "Compare the options in depth. " * 270}
    plan = make_plan({f"t{i}": ("researcher", [], long_instructions) for i in range(6)})
    assert runs.estimate_cost(plan) == Decimal("0.009")  # 6 × 100 output tokens × $15 per million
    run = runs.launch(plan, budget_usd="0.02", cap=6)
    assert run.tasks.filter(state="queued").count() == 2
    assert run.tasks.filter(wait_reason="run budget would be exceeded").count() == 4
    run_queued(run)
    run.refresh_from_db()
    assert run.status == "over_budget"
    assert Decimal("0.01") < run.cost_usd <= Decimal("0.02")
    assert run.reserved_usd == 0
    assert "budget of $0.02 does not cover the next task" in run.summary and "raise the budget" in run.summary
    assert set(run.tasks.values_list("state", flat=True)) == {"succeeded", "cancelled"}


def test_totals_per_agent_and_per_model(make_agent, make_plan, priced_limit):
    make_agent("researcher")
    make_agent("writer")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["a"])}))
    run_queued(run)
    run.refresh_from_db()
    agents = {line["name"]: line for line in costs.by_agent(run)}
    assert set(agents) == {"researcher", "writer"} and agents["writer"]["attempts"] == 2
    assert sum(line["cost_usd"] for line in agents.values()) == run.cost_usd
    (model,) = costs.by_model(run)
    assert model["name"] == "simulated:sim-1" and model["cost_usd"] == run.cost_usd
    assert model["output_tokens"] == run.output_tokens
