"""Launching from a plan document: validate, save, launch in one transaction, all or nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.engine.launching import launch_document
from orchestrator.engine.run_settings import RunSettings
from orchestrator.models import Agent, Plan, Run
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

FEATURE_PIPELINE = (ROOT / "examples" / "feature_pipeline.yaml").read_text()
SETTINGS = RunSettings(cap=2, budget_usd=Decimal("0.50"))


def test_launch_document_saves_and_launches_together(demo_agents, priced_limit, django_user_model):
    user = django_user_model.objects.create_user("u")
    settings = RunSettings(cap=2, budget_usd=Decimal("0.50"), failure_policy="fail_fast", require_plan_approval=True)

    run = launch_document(FEATURE_PIPELINE, filename="feature_pipeline.yaml", settings=settings, launched_by=user)

    assert (run.cap, run.failure_policy, run.status) == (2, "fail_fast", Run.Status.AWAITING_APPROVAL)
    assert run.launched_by == run.plan.created_by == user
    assert (run.plan.source_name, run.plan.document) == ("feature_pipeline.yaml", FEATURE_PIPELINE)


def test_the_saved_plan_can_name_another_source_and_take_a_new_goal(demo_agents):
    run = launch_document(FEATURE_PIPELINE, settings=SETTINGS, source_name="api", goal="  Ship it ")

    assert (run.plan.source_name, run.plan.goal) == ("api", "Ship it")


def test_launch_document_over_budget_saves_nothing(demo_agents, priced_limit):
    with pytest.raises(runs.LaunchRefused, match=r"estimated cost \$0.1332 is over the budget of \$0.01:"):
        launch_document(FEATURE_PIPELINE, settings=RunSettings(cap=2, budget_usd=Decimal("0.01")))
    assert not Plan.objects.exists() and not Run.objects.exists()


def test_launch_document_with_an_invalid_plan_saves_nothing(demo_agents):
    Agent.objects.filter(name="tester").update(status=Agent.Status.RETIRED)
    with pytest.raises(plans.PlanValidationError, match='agent "tester" is retired'):
        launch_document(FEATURE_PIPELINE, settings=SETTINGS)
    assert not Plan.objects.exists()


def test_problems_in_the_document_name_their_line(demo_agents):
    with pytest.raises(plans.PlanValidationError) as invalid:
        launch_document(
            "goal: g\nsubtasks:\n  - key: a\n    agent: researcher\n    title: A\n    gate: maybe\n", settings=SETTINGS
        )
    assert str(invalid.value.errors[0]) == (
        'line 6: subtasks[0] (key "a"): gate: must be one of none, before, after, got "maybe"'
    )


def test_an_agent_saved_with_invalid_options_is_named_before_anything_runs(demo_agents, make_plan):
    """Options saved before they were checked where they are entered: the plan is refused by
    validation, the pre-flight and the launch, naming the agent and the problem."""
    from orchestrator.engine import preflight

    plan = make_plan({"a": ("researcher", [])})
    Agent.objects.filter(name="researcher").update(provider_options={"latency": "fast", "failure_rate": 7})
    expected = 'agent "researcher" has invalid provider options: latency must be an object'
    with pytest.raises(plans.PlanValidationError) as invalid:
        plans.validate({"goal": "g", "subtasks": [{"key": "a", "agent": "researcher", "title": "A"}]})
    assert expected in str(invalid.value.errors[0]) and "failure_rate must be between 0 and 1" in str(invalid.value)
    checked = preflight.check_saved_plan(plan, cap=2, budget_usd=Decimal("1"))
    assert not checked.ok and any(expected in e.message for e in checked.errors)
    with pytest.raises(runs.LaunchRefused, match=expected):
        runs.launch(plan)
    assert not plan.runs.exists()
