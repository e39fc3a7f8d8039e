"""The planner: Claude (through the fake Messages API) and the simulated planner, and `manage.py plan`.

A plan from Claude is checked exactly like a plan file; a rejected answer gets one repair round
trip, then a clear PlannerError with nothing saved and every raw answer kept.
"""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from orchestrator.management import console
from orchestrator.models import Agent, Checkpoint, Plan, PlannerAttempt, ProviderLimit, Run
from orchestrator.plans import planner
from orchestrator.providers.fake_anthropic import Reply
from tests.conftest import FAKE_ANTHROPIC_KEY

pytestmark = pytest.mark.django_db

GOAL = "Compare three vector databases for a small team"


def subtask(key, agent="researcher", depends_on=(), **extra):
    return {
        "key": key,
        "agent": agent,
        "title": key.title(),
        "instructions": f"Do {key}.",
        "depends_on": list(depends_on),
        **extra,
    }


VALID = {
    "subtasks": [
        subtask("scope"),
        subtask("a", depends_on=["scope"]),
        subtask("b", depends_on=["scope"]),
        subtask("merge", "writer", ["a", "b"]),
    ]
}
CYCLIC = {"subtasks": [subtask("a", depends_on=["b"]), subtask("b", depends_on=["a"])]}
UNKNOWN_AGENT = {"subtasks": [subtask("a", agent="ghost")]}
MALFORMED = {"subtasks": '[{"key": "a", "agent": "researcher", "title": '}


def subtask_schema(schema):
    return schema["properties"]["subtasks"]["items"]


def plan_call(tool_input) -> Reply:
    return Reply.tool_call(planner.PLAN_TOOL, tool_input)


def failing_proposal(fake, *answers: Reply) -> planner.PlannerError:
    fake.enqueue(*answers)
    plans_before = Plan.objects.count()
    with pytest.raises(planner.PlannerError) as raised:
        planner.propose_plan(GOAL)
    assert Plan.objects.count() == plans_before  # nothing half-saved
    return raised.value


# --- Claude --------------------------------------------------------------------------------------


def test_claude_proposes_a_plan_through_the_forced_tool(demo_agents, fake_anthropic, settings):
    fake_anthropic.enqueue(plan_call(VALID))
    result = planner.propose_plan(GOAL)
    plan = result.plan
    assert result.simulated is False
    assert plan.source == Plan.Source.PLANNER and plan.source_name == settings.GLASSBOX_MODEL
    assert plan.goal == GOAL
    assert list(plan.subtasks.values_list("key", flat=True)) == ["scope", "a", "b", "merge"]
    assert sorted(plan.dependencies.values_list("upstream__key", "downstream__key")) == [
        ("a", "merge"),
        ("b", "merge"),
        ("scope", "a"),
        ("scope", "b"),
    ]
    assert json.loads(plan.document)["subtasks"][3]["agent"] == "writer"
    attempt = result.attempt
    assert attempt.plan == plan and attempt.round == 1 and not attempt.error and not attempt.simulated
    assert json.loads(attempt.raw_answer) == VALID
    assert attempt.output_tokens > 0 and attempt.input_tokens > 0

    sent = fake_anthropic.message_requests()[-1].body
    assert sent["tool_choice"] == {"type": "tool", "name": "submit_plan"}
    schema = sent["tools"][0]["input_schema"]
    assert schema["properties"]["subtasks"]["items"]["properties"]["agent"]["enum"] == sorted(demo_agents)
    prompt = sent["messages"][0]["content"]
    assert GOAL in prompt and "- coder: Coder." in prompt


def test_retired_agents_are_not_offered_to_claude(demo_agents, fake_anthropic):
    Agent.objects.filter(name="coder").update(status=Agent.Status.RETIRED)
    fake_anthropic.enqueue(plan_call(VALID))
    planner.propose_plan(GOAL)
    sent = fake_anthropic.message_requests()[-1].body
    assert "coder" not in subtask_schema(sent["tools"][0]["input_schema"])["properties"]["agent"]["enum"]


def test_malformed_json_is_a_clear_error_and_the_raw_answers_are_kept(demo_agents, fake_anthropic):
    error = failing_proposal(fake_anthropic, plan_call(MALFORMED), plan_call(MALFORMED))
    assert "rejected 2 times" in error.message
    assert "subtasks is not valid JSON: line 1, column" in error.message
    attempts = list(PlannerAttempt.objects.order_by("round"))
    assert [a.round for a in attempts] == [1, 2] and all(a.plan is None for a in attempts)
    assert all('"key\\": \\"a\\"' in a.raw_answer and "not valid JSON" in a.error for a in attempts)
    assert error.attempt == attempts[-1]


def test_an_unknown_agent_is_a_clear_error(demo_agents, fake_anthropic):
    error = failing_proposal(fake_anthropic, plan_call(UNKNOWN_AGENT), plan_call(UNKNOWN_AGENT))
    assert 'subtasks[0] (key "a"): agent: no agent named "ghost"' in error.message
    assert PlannerAttempt.objects.filter(error__contains="ghost").count() == 2


def test_a_cycle_is_a_clear_error(demo_agents, fake_anthropic):
    error = failing_proposal(fake_anthropic, plan_call(CYCLIC), plan_call(CYCLIC))
    assert "cycle: a → b → a" in error.message
    assert PlannerAttempt.objects.filter(plan__isnull=True).count() == 2


def test_an_oversized_plan_is_a_clear_error(demo_agents, fake_anthropic):
    huge = {"subtasks": [subtask(f"t{i}") for i in range(planner.MAX_PLANNER_SUBTASKS + 1)]}
    error = failing_proposal(fake_anthropic, plan_call(huge), plan_call(huge))
    assert f"the plan has {planner.MAX_PLANNER_SUBTASKS + 1} subtasks; the planner may propose at most" in error.message


def test_an_answer_cut_off_at_max_tokens_is_too_large(demo_agents, fake_anthropic):
    cut = Reply.tool_call(planner.PLAN_TOOL, VALID, stop_reason="max_tokens")
    error = failing_proposal(fake_anthropic, cut, cut)
    assert "cut off at the limit" in error.message


def test_an_answer_without_the_tool_call_is_rejected(demo_agents, fake_anthropic):
    prose = Reply.text_answer("I would rather describe the plan in words.")
    error = failing_proposal(fake_anthropic, prose, prose)
    assert 'did not call the submit_plan tool (it said: "I would rather describe the plan in words.")' in error.message


def test_the_repair_round_trip_sends_the_problems_back_and_accepts_the_fix(demo_agents, fake_anthropic):
    fake_anthropic.enqueue(plan_call(CYCLIC), plan_call(VALID))
    result = planner.propose_plan(GOAL)
    assert result.attempt.round == 2 and result.plan.subtasks.count() == 4
    first, second = PlannerAttempt.objects.order_by("round")
    assert "cycle" in first.error and first.plan is None
    assert second.plan == result.plan and not second.error

    requests = fake_anthropic.message_requests()
    assert len(requests) == 2
    messages = requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    tool_use = messages[1]["content"][0]
    assert tool_use["type"] == "tool_use" and tool_use["input"] == CYCLIC
    tool_result = messages[2]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == tool_use["id"]
    assert tool_result["is_error"] is True and "cycle: a → b → a" in tool_result["content"]
    assert requests[1].body["tool_choice"] == {"type": "tool", "name": "submit_plan"}


def test_subtasks_sent_as_json_text_are_decoded(demo_agents, fake_anthropic):
    fake_anthropic.enqueue(plan_call({"subtasks": json.dumps(VALID["subtasks"])}))
    assert planner.propose_plan(GOAL).plan.subtasks.count() == 4


def test_a_failing_api_call_is_a_planner_error_naming_the_status(demo_agents, fake_anthropic):
    error = failing_proposal(fake_anthropic, Reply.error(429, retry_after=20))
    assert error.message.startswith("The planner could not get an answer from Claude")
    assert "429 rate_limit_error" in error.message and "retry after 20 s" in error.message
    attempt = PlannerAttempt.objects.get()
    assert "429" in attempt.error and attempt.raw_answer == ""


def test_the_planners_rate_limit_feedback_goes_to_the_callers_handler(demo_agents, fake_anthropic, settings):
    reports = []
    fake_anthropic.enqueue(plan_call(VALID))
    planner.propose_plan(GOAL, on_feedback=reports.append)
    fake_anthropic.enqueue(Reply.error(429, retry_after=20, headers={"anthropic-ratelimit-requests-remaining": "0"}))
    with pytest.raises(planner.PlannerError):
        planner.propose_plan(GOAL, on_feedback=reports.append)
    assert [r.model for r in reports] == [settings.GLASSBOX_MODEL] * 2
    assert reports[0].budgets["requests"].limit == 50  # the fake server's limit
    assert reports[1].budgets["requests"].remaining == 0


def test_the_key_never_appears_in_planner_errors_attempts_or_logs(demo_agents, fake_anthropic, caplog):
    caplog.set_level(logging.DEBUG)
    refusal = Reply.error(401, "authentication_error", "invalid x-api-key", echo_api_key=True)
    error = failing_proposal(fake_anthropic, refusal)
    assert "authentication_error" in error.message and "[redacted]" in error.message
    fake_anthropic.enqueue(plan_call(CYCLIC), plan_call(VALID))
    planner.propose_plan(GOAL)
    rows = list(PlannerAttempt.objects.values_list("raw_answer", "error"))
    assert len(rows) == 3
    texts = [error.message, caplog.text, *(text for row in rows for text in row)]
    assert all(FAKE_ANTHROPIC_KEY not in text for text in texts)


# --- The simulated planner ---------------------------------------------------------------------------


@pytest.fixture
def no_key(settings):
    settings.ANTHROPIC_API_KEY = ""


def keys_and_agents(plan: Plan) -> dict[str, str]:
    return dict(plan.subtasks.order_by("position").values_list("key", "agent__name"))


def test_without_a_key_the_simulated_planner_fans_research_out_and_in(demo_agents, no_key):
    result = planner.propose_plan("Research whether we should move our analytics to DuckDB")
    plan = result.plan
    assert result.simulated and result.attempt.simulated and result.attempt.plan == plan
    assert plan.source == Plan.Source.PLANNER and plan.source_name == "simulated planner"
    assert keys_and_agents(plan) == {
        "scope": "researcher",
        "research_background": "researcher",
        "research_options": "researcher",
        "research_risks": "researcher",
        "research_costs": "researcher",
        "synthesis": "writer",
    }
    upstream = sorted(plan.dependencies.filter(downstream__key="synthesis").values_list("upstream__key", flat=True))
    assert upstream == ["research_background", "research_costs", "research_options", "research_risks"]
    assert plan.dependencies.filter(upstream__key="scope").count() == 4


def test_a_build_goal_gets_the_build_pipeline_with_a_design_review(demo_agents, no_key):
    plan = planner.propose_plan("Build a CLI to export audit events and add an API endpoint for it").plan
    assert keys_and_agents(plan) == {
        "spec": "researcher",
        "design": "architect",
        "implement": "coder",
        "tests": "tester",
        "review": "reviewer",
    }
    assert plan.subtasks.get(key="design").gate == "after"
    assert sorted(plan.dependencies.filter(downstream__key="review").values_list("upstream__key", flat=True)) == [
        "implement",
        "tests",
    ]


def test_a_writing_goal_gets_sections_written_side_by_side(demo_agents, no_key):
    plan = planner.propose_plan("Write a blog post announcing our new release").plan
    keys = keys_and_agents(plan)
    assert list(keys) == ["outline", "section_context", "section_body", "section_next_steps", "edit"]
    assert keys["section_body"] == "writer"


def test_the_simulated_planner_is_deterministic_and_staffs_any_team(make_agent, no_key):
    make_agent("alpha")
    make_agent("beta")
    make_agent("gamma", status=Agent.Status.RETIRED)
    first = planner.propose_plan("Tidy the garden")
    second = planner.propose_plan("Tidy the garden")
    assert keys_and_agents(first.plan) == keys_and_agents(second.plan)
    assert set(keys_and_agents(first.plan).values()) == {"alpha", "beta"}  # round-robin, never the retired one


def test_the_planner_refuses_an_empty_goal_and_an_empty_team(make_agent, no_key):
    with pytest.raises(planner.PlannerError, match="The goal is empty"):
        planner.propose_plan("   ")
    with pytest.raises(planner.PlannerError, match="no active agents"):
        planner.propose_plan(GOAL)
    assert not PlannerAttempt.objects.exists() and not Plan.objects.exists()


# --- manage.py plan ----------------------------------------------------------------------------------


def plan_command(*args) -> str:
    out = StringIO()
    call_command("plan", *args, stdout=out)
    return out.getvalue()


def test_the_plan_command_prints_keys_agents_and_dependencies(demo_agents, no_key):
    output = plan_command("Research the best queue for our workers")
    plan = Plan.objects.get()
    assert f"Plan {plan.pk} proposed by the simulated planner (no ANTHROPIC_API_KEY set): 6 subtasks" in output
    synthesis = next(line for line in output.splitlines() if line.startswith("synthesis"))
    assert "writer" in synthesis
    assert "research_background, research_options, research_risks, research_costs" in synthesis
    assert "critical path:" in output and "--launch" in output
    assert not Run.objects.exists()


def test_plan_launch_waits_for_approval_and_prints_the_approve_command(demo_agents, no_key):
    output = plan_command("Research the best queue for our workers", "--launch", "--cap", "2", "--budget", "1.5")
    run = Run.objects.get()
    assert run.status == Run.Status.AWAITING_APPROVAL and run.cap == 2 and str(run.budget_usd) == "1.5000"
    checkpoint = run.checkpoints.get(kind=Checkpoint.Kind.PLAN)
    assert f"python manage.py approve {checkpoint.pk}" in output
    assert f"Launched run {run.pk} (6 tasks, cap 2, budget $1.50)" in output


def test_plan_launch_without_approval_starts_at_once(demo_agents, no_key):
    output = plan_command("Research the best queue for our workers", "--launch", "--no-approval")
    run = Run.objects.get()
    assert run.status == Run.Status.RUNNING and not run.checkpoints.exists()
    assert f"run_status {run.pk}" in output


@pytest.mark.parametrize("approval", [(), ("--no-approval",)])
def test_plan_launch_names_who_launched_in_the_audit_log(demo_agents, no_key, approval):
    """`plan --launch` recorded the run's creation and start as "system"."""
    plan_command("Research the best queue for our workers", "--launch", *approval)
    run = Run.objects.get()
    launched = run.events.filter(type__in=["run.created", "run.started"]).order_by("seq")
    assert [e.type for e in launched] == ["run.created", *(["run.started"] if approval else [])]
    assert {e.actor_name for e in launched} == {console.cli_actor()}


def test_plan_options_need_launch_and_planner_errors_are_one_line(demo_agents, fake_anthropic):
    with pytest.raises(CommandError, match="only apply together with --launch"):
        plan_command(GOAL, "--no-approval")
    fake_anthropic.enqueue(plan_call(CYCLIC), plan_call(CYCLIC))
    with pytest.raises(CommandError, match="^No plan was made. Claude's plan was rejected 2 times") as raised:
        plan_command(GOAL)
    assert "cycle: a → b → a" in str(raised.value)
    assert not Plan.objects.exists()


def test_an_empty_goal_is_refused_in_sentences(demo_agents, no_key):
    """It printed "No plan: The goal is empty: …", a capital after a colon."""
    with pytest.raises(CommandError) as refused:
        plan_command("")
    assert str(refused.value) == (
        "No plan was made. The goal is empty: say in a sentence what the team should achieve."
    )


# --- The tool schema is the plan document's -----------------------------------------------------


def test_tool_schema_offers_every_subtask_field_the_validator_accepts():
    from orchestrator.plans.document import SubtaskDocument

    schema = planner.plan_input_schema(["researcher", "writer"])

    offered = set(subtask_schema(schema)["properties"])
    assert offered == set(SubtaskDocument.model_fields) - set(planner.PLANNER_OMITS["subtask"])
    assert schema["properties"]["subtasks"]["maxItems"] == planner.MAX_PLANNER_SUBTASKS
    assert subtask_schema(schema)["properties"]["agent"]["enum"] == ["researcher", "writer"]
    priority = subtask_schema(schema)["properties"]["priority"]
    assert (priority["minimum"], priority["maximum"]) == (-1000, 1000)
    assert "$ref" not in json.dumps(schema)  # inlined: one self-contained schema for Claude


def test_a_field_added_to_the_model_shows_up_in_the_tool_schema(monkeypatch):
    from pydantic import Field

    from orchestrator.plans import document

    class SubtaskWithLabels(document.SubtaskDocument):
        labels: list[str] = Field(default_factory=list, description="Free-form labels")

    class PlanWithLabels(document.PlanDocument):
        subtasks: list[SubtaskWithLabels] = Field(min_length=1)

    monkeypatch.setattr(planner, "PlanDocument", PlanWithLabels)

    labels = subtask_schema(planner.plan_input_schema(["researcher"]))["properties"]["labels"]

    assert labels == {"description": "Free-form labels", "items": {"type": "string"}, "type": "array"}


def test_the_smallest_answer_the_tool_schema_allows_is_a_valid_plan(demo_agents):
    from orchestrator import plans
    from orchestrator.providers.fake_anthropic import minimal_instance

    agents = list(Agent.objects.filter(status=Agent.Status.ACTIVE))
    answer = minimal_instance(planner.plan_tool(agents)["input_schema"])

    spec = plans.validate({"goal": GOAL, **answer})

    assert len(spec.subtasks) == 1 and spec.subtasks[0].agent == agents[0].name


def test_the_plan_command_applies_the_planners_rate_limit_feedback(demo_agents, fake_anthropic, settings):
    limit = ProviderLimit.objects.create(provider="anthropic", model=settings.GLASSBOX_MODEL)
    fake_anthropic.enqueue(plan_call(VALID))
    plan_command(GOAL)
    limit.refresh_from_db()
    assert limit.requests_per_minute == 50  # learned from the answer's headers, as the engine does
