"""Preflight: validation, DAG layers, cost estimate and predicted duration, computed without saving."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from orchestrator import plans
from orchestrator.engine import preflight, runs
from orchestrator.models import Agent, Plan, ProviderLimit
from tests.conftest import ROOT, fast_latency, grant_with_approval
from tests.large_run import large_plan_document

pytestmark = pytest.mark.django_db

FEATURE_PIPELINE = (ROOT / "examples" / "feature_pipeline.yaml").read_text()
RESEARCH_BRIEF = (ROOT / "examples" / "research_brief.yaml").read_text()
BUDGET = Decimal("0.50")


def test_upload_size_limit_is_plans_max_plan_bytes():
    assert preflight.upload_too_large("a.yaml", plans.MAX_PLAN_BYTES) is None
    error = preflight.upload_too_large("a.yaml", plans.MAX_PLAN_BYTES + 1)
    assert str(error) == (
        f"a.yaml: the file is {plans.MAX_PLAN_BYTES + 1:,} bytes; a plan file may be at most "
        f"{plans.MAX_PLAN_BYTES:,} bytes (5 MB)"
    )


def test_the_feature_pipeline_preflight(demo_agents, priced_limit):
    checked = preflight.check_document(FEATURE_PIPELINE, filename="feature_pipeline.yaml", cap=4, budget_usd=BUDGET)
    assert checked.ok and checked.can_launch and not checked.over_budget
    layers = [[n.key for n in layer] for layer in checked.layers]
    assert layers == [["spec"], ["design"], ["implement", "test_plan"], ["review"]]
    nodes = {n.key: n for layer in checked.layers for n in layer}
    assert nodes["review"].depends_on == ("implement", "test_plan")
    assert nodes["design"].gate == "after" and nodes["design"].agent == "architect"
    assert [k for k, n in nodes.items() if n.on_critical_path] == ["spec", "design", "implement", "review"]
    assert (checked.subtasks, checked.edges, checked.widest_layer, checked.checkpoints) == (5, 5, 2, 1)
    assert checked.critical_path_s == pytest.approx(0.8) and checked.total_work_s == pytest.approx(1.0)
    assert checked.predicted_duration_s == pytest.approx(0.8) and checked.duration_bound == "the critical path"
    assert checked.steps_note == "4 steps, up to 2 in parallel"
    # cap 1: the work, not the chain, sets the duration
    serial = preflight.check_document(FEATURE_PIPELINE, cap=1, budget_usd=BUDGET)
    assert serial.predicted_duration_s == pytest.approx(1.0) and serial.duration_bound == "the run's cap of 1"
    assert serial.steps_note == "4 steps, up to 1 in parallel (the widest step has 2)"
    assert not checked.workers_running  # no qcluster in this test
    assert Plan.objects.count() == 0


def test_the_estimate_from_the_spec_equals_runs_estimate_cost_of_the_saved_plan(demo_agents, priced_limit):
    Agent.objects.filter(name="coder").update(
        max_output_tokens=4000, provider="anthropic", model="claude-x", provider_options={}
    )
    ProviderLimit.objects.create(
        provider="anthropic", model="claude-x", input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
    )
    spec = plans.validate_document(FEATURE_PIPELINE)
    from_spec = preflight.check_spec(spec, cap=4, budget_usd=BUDGET)
    plan = plans.save_plan(spec)
    from_saved_plan = preflight.check_saved_plan(plan, cap=4, budget_usd=BUDGET)
    assert from_spec.estimate_usd == runs.estimate_cost(plan) == from_saved_plan.estimate_usd
    lines = {line.name: line for line in from_spec.agents}
    # (2,200 estimated + 220 of an upstream summary) × $3 + 4,000 × $15, per million
    assert lines["coder"].estimate_usd == Decimal("0.06726")
    assert sum(line.estimate_usd for line in lines.values()) == from_spec.estimate_usd


def test_models_without_a_price_are_named_and_count_as_zero(demo_agents):
    checked = preflight.check_document(FEATURE_PIPELINE, cap=4, budget_usd=BUDGET)
    assert checked.estimate_usd == 0
    assert checked.unpriced_models == ["simulated:sim-1"]
    assert not any(line.priced for line in checked.agents)


def test_a_limit_with_both_prices_at_0_is_no_price(demo_agents):
    """A limit set for its rates alone: its model was counted as priced, at $0, and not named."""
    ProviderLimit.objects.create(provider="simulated", model="sim-1", max_in_flight=4)
    checked = preflight.check_document(FEATURE_PIPELINE, cap=4, budget_usd=BUDGET)
    assert checked.unpriced_models == ["simulated:sim-1"]
    assert not any(line.priced for line in checked.agents)
    assert checked.unpriced_note == (
        "No price is known for simulated:sim-1: counted as $0 (set prices in the admin under provider limits)."
    )
    ProviderLimit.objects.update(output_price_per_mtok=15)
    assert preflight.check_document(FEATURE_PIPELINE, cap=4, budget_usd=BUDGET).unpriced_note == ""


def test_over_budget_gives_both_numbers(demo_agents, priced_limit):
    checked = preflight.check_document(FEATURE_PIPELINE, cap=4, budget_usd=Decimal("0.1"))
    assert checked.over_budget and not checked.can_launch
    assert checked.budget_refusal == (
        "The estimated cost $0.1332 is over the budget of $0.10: raise the budget to at least $0.1332 or trim the plan."
    )


def test_a_budget_of_exactly_the_advised_amount_passes_the_preflight_and_launches(demo_agents, priced_limit):
    """With a $0.50 budget it said "raise the budget to at least $1.13"; with $1.13 it said "The
    estimated cost $1.13 is over the budget of $1.13": the advice was the estimate rounded to cents."""
    document = (
        "goal: A long read\nsubtasks:\n  - {key: a, agent: researcher, title: Read, "
        "estimate: {input_tokens: 372000, output_tokens: 10}}\n"
    )
    checked = preflight.check_document(document, cap=4, budget_usd=BUDGET)
    assert checked.estimate_usd > 1 and checked.estimate_usd != checked.estimate_usd.quantize(Decimal("0.01"))
    advised = re.search(r"raise the budget to at least \$([\d.]+) or trim the plan\.$", checked.budget_refusal)
    assert advised, checked.budget_refusal
    again = preflight.check_document(document, cap=4, budget_usd=Decimal(advised.group(1)))
    assert again.can_launch and again.budget_refusal == ""
    plan = plans.save_plan(plans.validate_document(document), source=Plan.Source.MANUAL)
    assert runs.launch(plan, budget_usd=advised.group(1)).budget_usd == Decimal(advised.group(1))


def test_every_validation_problem_is_kept(demo_agents):
    text = "goal: x\nsubtasks:\n  - {key: a, agent: nobody, title: A, depends_on: [a]}\n"
    checked = preflight.check_document(text, cap=4, budget_usd=BUDGET)
    assert not checked.ok and not checked.can_launch and not checked.over_budget
    assert [str(e) for e in checked.errors] == [
        'line 3: subtasks[0] (key "a"): depends_on: depends on itself ("a")',
        'line 3: subtasks[0] (key "a"): agent: no agent named "nobody"',
    ]


def test_the_goal_replaces_the_documents_goal(demo_agents):
    checked = preflight.check_document(FEATURE_PIPELINE, goal="  Shorter goal ", cap=4, budget_usd=BUDGET)
    assert checked.goal == "Shorter goal"


def test_a_saved_plan_with_a_retired_agent_is_not_launchable(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])})
    Agent.objects.filter(name="writer").update(status=Agent.Status.RETIRED)
    checked = preflight.check_saved_plan(plan, cap=4, budget_usd=BUDGET)
    assert not checked.can_launch
    assert [str(e) for e in checked.errors] == [
        'subtask "b": agent: agent "writer" is retired; only active agents can run subtasks'
    ]


def test_durations_follow_the_agents_latency_model(make_agent):
    make_agent("slow", provider_options=fast_latency(3.0))
    make_agent("fast", provider_options=fast_latency(1.0))
    text = (
        "goal: g\nsubtasks:\n"
        "  - {key: a, agent: slow, title: A}\n"
        "  - {key: b, agent: fast, title: B}\n"
        "  - {key: c, agent: fast, title: C, depends_on: [a, b]}\n"
    )
    checked = preflight.check_document(text, cap=2, budget_usd=BUDGET)
    assert checked.critical_path == ["a", "c"] and checked.critical_path_s == pytest.approx(4.0)
    assert checked.total_work_s == pytest.approx(5.0) and checked.predicted_duration_s == pytest.approx(4.0)


def test_a_wide_step_under_the_cap_takes_rounds(demo_agents):
    # research_brief: scope, four angles, the brief; 0.2 s each (fast_latency). At a cap of 2 the
    # four angles take two rounds: 0.2 + 0.4 + 0.2 s, longer than the critical path or the work / cap.
    checked = preflight.check_document(RESEARCH_BRIEF, cap=2, budget_usd=BUDGET)
    assert checked.critical_path_s == pytest.approx(0.6) and checked.total_work_s == pytest.approx(1.2)
    assert checked.predicted_duration_s == pytest.approx(0.8)
    assert checked.duration_bound == "the run's cap of 2"
    assert (
        checked.duration_note("the default cap") == "set by the default cap of 2: critical path 0.6 s, total work 1.2 s"
    )
    assert checked.steps_note == "3 steps, up to 2 in parallel (the widest step has 4)"
    wide = preflight.check_document(RESEARCH_BRIEF, cap=4, budget_usd=BUDGET)
    assert wide.predicted_duration_s == pytest.approx(0.6) and wide.duration_bound == "the critical path"
    # Once "…, set by the critical path: critical path 0.6 s, total work 1.2 s".
    assert (
        wide.duration_note("the default cap")
        == "at the default cap of 4, set by the critical path (0.6 s); total work 1.2 s"
    )
    assert wide.steps_note == "3 steps, up to 4 in parallel"


def test_an_agents_own_limit_sets_the_duration_of_a_plan_made_of_its_tasks(make_agent):
    # tests/large_run.py's plan: 240 of its 293 subtasks are researcher probes, four at once.
    make_agent("researcher", max_concurrency=4)
    for name in ("architect", "writer", "reviewer", "tester"):
        make_agent(name, max_concurrency=2)
    checked = preflight.check_document(json.dumps(large_plan_document()), cap=8, budget_usd=Decimal("50"))
    assert checked.ok and checked.subtasks == 293
    assert checked.predicted_duration_s >= 240 * 0.2 / 4  # the probes alone, four at once
    assert checked.predicted_duration_s > checked.total_work_s / 8  # what the estimate said before
    assert checked.duration_bound == "the researcher's limit of 4 at once"
    assert checked.steps_note == "6 steps, up to 7 in parallel (the widest step has 240)"


# --- What may wait for a person -------------------------------------------------------------------

WORKSPACE_REPORT = (ROOT / "examples" / "workspace_report.yaml").read_text()


def test_a_plan_whose_agents_call_tools_with_approval_may_wait_for_a_person(demo_agents, priced_limit):
    grant_with_approval("researcher", "workspace", "write_file")
    grant_with_approval("writer", "workspace", "read_file")
    checked = preflight.check_document(WORKSPACE_REPORT, filename="workspace_report.yaml", cap=4, budget_usd=BUDGET)
    assert checked.ok and checked.checkpoints == 0
    decisions = checked.decisions(plan_review=False)
    assert decisions.value == "0 + tool calls"
    assert decisions.note == (
        "The plan has no gate or review, but its agents may ask a person to approve calls of "
        "workspace:write_file (researcher), workspace:read_file (writer): the task waits for each decision."
    )
    with_review = checked.decisions(plan_review=True)
    assert with_review.value == "1 + tool calls"
    assert with_review.note.startswith(
        "People decide 1 checkpoint (the plan's approval), and its agents may ask a person to approve"
    )


def test_only_the_plans_agents_and_only_grants_with_approval_count(demo_agents, priced_limit, make_plan):
    grant_with_approval("coder", "workspace")  # not in the plan
    grant_with_approval("researcher", "shell")  # a whole server
    from orchestrator.models import ToolGrant

    ToolGrant.objects.create(
        agent=demo_agents["writer"], server=ToolGrant.objects.get(agent__name="coder").server, tool="list_files"
    )  # without approval
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"], {"gate": "after"})})
    checked = preflight.check_saved_plan(plan, cap=2, budget_usd=BUDGET)
    decisions = checked.decisions(plan_review=False)
    assert (decisions.value, decisions.tools_text) == ("1 + tool calls", "any tool of shell (researcher)")
    assert decisions.note == (
        "People decide 1 checkpoint (1 gate or review), and its agents may ask a person to approve calls of any "
        "tool of shell (researcher); time spent waiting for them comes on top."
    )


def test_a_plan_without_gates_or_approvals_needs_no_decision(demo_agents, priced_limit):
    checked = preflight.check_document(WORKSPACE_REPORT, filename="workspace_report.yaml", cap=4, budget_usd=BUDGET)
    assert (checked.decisions(plan_review=False).value, checked.decisions(plan_review=False).note) == (
        "0",
        "The run needs no human decision.",
    )
    assert (
        checked.decisions(plan_review=True).note
        == "The plan's approval: a person decides it; time spent waiting for it comes on top."
    )


def test_the_checkpoints_card_names_the_plans_approval_and_the_gates_it_counts(demo_agents, priced_limit):
    """The feature pipeline's card said "2 · People decide each one" under a plan that showed one
    review: the other was the plan's approval, which the launcher had asked for."""
    checked = preflight.check_document(
        (ROOT / "examples" / "feature_pipeline.yaml").read_text(),
        filename="feature_pipeline.yaml",
        cap=4,
        budget_usd=BUDGET,
    )
    reviewed = checked.decisions(plan_review=True)
    assert (reviewed.value, reviewed.note) == (
        "2",
        "The plan's approval and 1 gate or review: people decide each one; time spent waiting for them comes on top.",
    )
    assert checked.decisions(plan_review=False).note == (
        "1 gate or review: a person decides it; time spent waiting for it comes on top."
    )
    two_gates = preflight.HumanDecisions(3, plan_review=True)
    assert two_gates.which == "the plan's approval and 2 gates or reviews"
