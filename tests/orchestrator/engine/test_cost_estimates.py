"""Estimates that learn: the worst case (max output tokens) until an agent has history, then the
median of its recorded usage; the pre-flight says which, and the run keeps its estimate."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator.engine import cost_estimates, preflight, runs
from orchestrator.models import Attempt, TaskRun

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_broker")]


def record_history(agent, usages, model: str | None = "sim-1", state=Attempt.State.SUCCEEDED) -> None:
    """Attempts of `agent` (succeeded unless `state` says otherwise) with these (input, output)
    tokens, as the engine records them."""
    from orchestrator.models import Plan, Run, Subtask

    plan = Plan.objects.create(goal="history")
    run = Run.objects.create(plan=plan)
    for index, (tokens_in, tokens_out) in enumerate(usages):
        subtask = Subtask.objects.create(plan=plan, key=f"h{index}", title="h", agent=agent, position=index)
        task_state = TaskRun.State.SUCCEEDED if state == Attempt.State.SUCCEEDED else TaskRun.State.FAILED
        task = TaskRun.objects.create(run=run, subtask=subtask, agent=agent, state=task_state)
        Attempt.objects.create(
            task_run=task,
            number=1,
            state=state,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            request={"model": model} if model else {},  # None: recorded before requests were kept
        )


@pytest.fixture
def plan(make_agent, make_plan, priced_limit):
    make_agent("researcher", max_output_tokens=1000)
    make_agent("writer", max_output_tokens=2000)
    return make_plan(
        {"a": ("researcher", [], {"estimate": {"input_tokens": 100}}), "b": ("researcher", []), "w": ("writer", ["a"])}
    )


def test_without_history_every_task_is_estimated_at_its_agents_maximum_output(plan):
    estimate = cost_estimates.plan_estimate(plan)
    # researcher: (100 + 0) input × $3 + 2 × 1,000 output × $15; writer: a's summary as input (its
    # bound, 220 tokens: context.estimated_input_tokens) × $3 + 2,000 output × $15 (per million)
    assert estimate.total_usd == Decimal("0.0003") + Decimal("0.03") + Decimal("0.00066") + Decimal("0.03")
    assert not any(line.basis.learned for line in estimate.agents)
    assert estimate.basis_text.startswith("worst case: no agent has history yet")
    researcher = next(line for line in estimate.agents if line.agent.name == "researcher")
    assert researcher.basis.text == "no history yet: assumes its maximum of 1,000 output tokens per task"


def test_with_history_the_median_usage_replaces_the_worst_case(plan):
    researcher = plan.subtasks.get(key="a").agent
    record_history(researcher, [(400, 150), (500, 210), (450, 190), (9000, 990)])  # one odd answer
    estimate = cost_estimates.plan_estimate(plan)
    lines = {line.agent.name: line for line in estimate.agents}
    basis = lines["researcher"].basis
    assert basis.learned and (basis.samples, basis.median_input_tokens, basis.median_output_tokens) == (4, 475, 200)
    assert basis.text == "median of its last 4 answers: 475 tokens in, 200 out"
    # a: max(100 planned, 475) in + 200 out; b: 475 in + 200 out — each at $3 / $15 per million
    assert lines["researcher"].estimate_usd == 2 * (Decimal(475 * 3 + 200 * 15) / 1_000_000)
    assert not lines["writer"].basis.learned
    assert estimate.basis_text == (
        "median recorded usage of researcher; worst case (maximum output) for writer, which has no history yet"
    )
    assert estimate.total_usd < Decimal("0.06096")


def test_history_needs_a_few_answers_and_the_agents_current_model(plan):
    researcher = plan.subtasks.get(key="a").agent
    record_history(researcher, [(400, 150), (500, 210)])
    assert not cost_estimates.usage_basis(researcher).learned
    assert cost_estimates.usage_basis(researcher).text.startswith("only 2 answers so far")
    record_history(researcher, [(10, 10)] * 5, model="another-model")  # answers of another model do not count
    assert cost_estimates.usage_basis(researcher).samples == 2
    record_history(researcher, [(450, 180)], model=None)  # before attempts kept their request: counted
    assert cost_estimates.usage_basis(researcher).learned


def test_the_plan_line_counts_the_answers_of_an_agent_with_too_few(plan):
    """The plan page said "worst case (maximum output) for flaky, which has no history yet" of an
    agent with 2 succeeded answers."""
    researcher, writer = plan.subtasks.get(key="a").agent, plan.subtasks.get(key="w").agent
    record_history(writer, [(400, 150), (500, 210)])
    assert cost_estimates.plan_estimate(plan).basis_text == (
        "worst case (maximum output) for researcher (no history yet), writer (only 2 answers so far)"
    )
    record_history(researcher, [(300, 100)] * 3)
    assert cost_estimates.plan_estimate(plan).basis_text == (
        "median recorded usage of researcher; worst case (maximum output) for writer, which has only 2 answers so far"
    )


def test_an_agent_whose_attempts_all_failed_has_no_successful_answer_rather_than_no_history(client, personas, plan):
    """The plan page said "flaky, which has no history yet" of an agent with 2–4 failed attempts:
    only succeeded attempts are history, but the words said it had never run."""
    writer = plan.subtasks.get(key="w").agent
    record_history(writer, [(400, 0)] * 2, state=Attempt.State.FAILED)
    record_history(writer, [(400, 0)], state=Attempt.State.TIMED_OUT)
    record_history(writer, [(400, 0)], state=Attempt.State.CANCELLED)  # stopped by a person: not a failure
    line = "worst case (maximum output) for researcher (no history yet), writer (no successful answer yet after 3 failed attempts)"
    assert cost_estimates.plan_estimate(plan).basis_text == line
    client.force_login(personas["viewer"])
    assert line in client.get(f"/plans/{plan.pk}/").content.decode()
    writers = {line.agent.name: line for line in cost_estimates.plan_estimate(plan).agents}["writer"]
    assert writers.basis_text == (
        "no successful answer yet after 3 failed attempts: assumes its maximum of 2,000 output tokens per task"
    )
    record_history(writer, [(400, 150)])  # one answer: now it has history, the failures aside
    assert cost_estimates.usage_basis(writer).history == "only 1 answer so far"


def test_the_median_never_passes_the_agents_maximum(plan):
    writer = plan.subtasks.get(key="w").agent
    record_history(writer, [(100, 5000)] * 3)
    writer.max_output_tokens = 800
    assert cost_estimates.usage_basis(writer).tokens(0) == (100, 800)


def test_a_run_that_fits_on_history_is_launched_and_keeps_its_estimate(plan):
    with pytest.raises(runs.LaunchRefused, match=r"estimated cost \$0.0610 is over the budget of \$0.02:"):
        runs.launch(plan, budget_usd="0.02")
    for subtask in plan.subtasks.select_related("agent"):
        record_history(subtask.agent, [(300, 100)] * 3)
    run = runs.launch(plan, budget_usd="0.02")
    assert run.estimate_usd == cost_estimates.plan_estimate(plan).total_usd < Decimal("0.02")


def test_the_preflight_shows_each_agents_basis_and_equals_the_launch_check(plan):
    record_history(plan.subtasks.get(key="a").agent, [(300, 100)] * 3)
    checked = preflight.check_saved_plan(plan, cap=2, budget_usd=Decimal("1"))
    lines = {line.name: line for line in checked.agents}
    assert lines["researcher"].learned and lines["researcher"].basis.startswith("median of its last 3 answers")
    assert not lines["writer"].learned and "maximum of 2,000 output tokens" in lines["writer"].basis
    assert "median recorded usage of researcher" in checked.estimate_basis
    assert checked.estimate_usd == runs.estimate_cost(plan)


def test_the_basis_gives_the_input_tokens_counted_when_the_plans_estimate_passes_the_median(plan):
    """The writer's row said "median … 394 tokens in, 255 out" beside a cost of ~11,000 tokens in:
    a fan-in's estimate of what its upstreams send passes the median, and that is what is counted."""
    record_history(plan.subtasks.get(key="w").agent, [(100, 50)] * 3)
    record_history(plan.subtasks.get(key="a").agent, [(300, 100)] * 3)
    checked = preflight.check_saved_plan(plan, cap=2, budget_usd=Decimal("1"))
    lines = {line.name: line for line in checked.agents}
    # w: a's summary as input (its bound, 220 tokens) is more than the writer's median of 100.
    assert lines["writer"].estimate_usd == Decimal(220 * 3 + 50 * 15) / 1_000_000
    assert lines["writer"].basis == (
        "median of its last 3 answers: 50 tokens out; 220 tokens in, as the plan estimates its input "
        "(its prompt and what its upstreams send) above the median of 100"
    )
    # a (100 planned) and b (nothing planned) are counted at the researcher's median: said as before.
    assert lines["researcher"].basis == "median of its last 3 answers: 300 tokens in, 100 out"
    assert checked.estimate_basis == "from each agent's median recorded usage (the plan's input estimate where larger)"


def test_the_basis_says_up_to_when_only_some_subtasks_pass_the_median(plan):
    record_history(plan.subtasks.get(key="a").agent, [(150, 100)] * 3)  # a planned 100: b and a at 150
    Subtask = plan.subtasks.model
    Subtask.objects.filter(plan=plan, key="a").update(estimated_input_tokens=900)
    line = next(line for line in cost_estimates.plan_estimate(plan).agents if line.agent.name == "researcher")
    assert line.input_tokens == (900, 150)
    assert line.basis_text == (
        "median of its last 3 answers: 100 tokens out; up to 900 tokens in, as the plan estimates its input "
        "(its prompt and what its upstreams send) where above the median of 150"
    )


def grant_tools(agent_name: str, *tool_names: str) -> None:
    """Grant the agent a server's tools, as `tool_server add` and `grant_tool` register them."""
    from orchestrator.models import Agent, Tool, ToolGrant, ToolServer

    server = ToolServer.objects.create(name="workspace", transport="stdio", command="x")
    for name in tool_names:
        Tool.objects.create(server=server, name=name, description=f"{name} something", input_schema={"type": "object"})
    ToolGrant.objects.create(agent=Agent.objects.get(name=agent_name), server=server)


def test_an_agent_with_tools_is_not_said_to_have_a_worst_case(plan):
    """An agent with tools was estimated at one model call per task and called a worst case; it
    makes up to max_steps calls, each re-sending every tool result so far, and the loop does not
    limit how many tools a step calls: no worst case exists, and the words say so."""
    grant_tools("researcher", "calculate", "write_file")
    researcher = plan.subtasks.get(key="a").agent
    researcher.max_steps = 3
    researcher.save()
    estimate = cost_estimates.plan_estimate(plan)
    lines = {line.agent.name: line for line in estimate.agents}
    tools = lines["researcher"].basis.tools
    assert tools is not None and (tools.steps, tools.tools) == (3, 2)
    # Its first call of each task: the plan's input and the tools' definitions, 1,000 tokens out.
    assert lines["researcher"].input_tokens == (100 + tools.tools_tokens, tools.tools_tokens)
    assert lines["researcher"].basis_text == (
        "no history yet; it uses tools, so no worst case can be given: up to 3 model calls per task (its"
        " max_steps), each re-sending a conversation that grows with every tool result, and a step may call any"
        " number of tools. Counted at its first call, at its maximum of 1,000 output tokens; the run's budget"
        " stops a further call it cannot cover"
    )
    # The writer has no tools: one model call per task, its worst case, as before.
    assert lines["writer"].basis_text == "no history yet: assumes its maximum of 2,000 output tokens per task"
    assert estimate.basis_text == (
        "worst case (maximum output) for writer, which has no history yet; for researcher, which has no history yet"
        " and uses tools, no worst case can be given (a task makes up to its max_steps model calls, re-sending"
        " every tool result): the first call at maximum output is counted, and the budget stops a call it"
        " cannot cover"
    )


def test_the_preflight_says_a_tool_agent_has_no_worst_case_and_equals_the_launch_check(plan):
    grant_tools("researcher", "calculate")
    checked = preflight.check_saved_plan(plan, cap=2, budget_usd=Decimal("1"))
    line = next(line for line in checked.agents if line.name == "researcher")
    assert "no worst case can be given: up to 8 model calls per task (its max_steps)" in line.basis
    assert not line.learned and "uses tools, no worst case can be given" in checked.estimate_basis
    assert checked.estimate_usd == runs.estimate_cost(plan)


def test_an_agent_with_tools_and_history_is_estimated_at_its_median_attempt(plan):
    """An attempt's recorded usage counts every model call of it: the median is a whole task's."""
    grant_tools("researcher", "calculate")
    researcher = plan.subtasks.get(key="a").agent
    record_history(researcher, [(4000, 900), (5000, 1000), (4500, 950)])
    basis = cost_estimates.usage_basis(researcher)
    assert basis.learned and basis.tools is None and basis.tokens(100) == (4500, 950)


def test_an_attempts_expected_output_is_its_agents_median_answer_once_it_has_history(plan):
    """A running task's progress is its output so far against this: against max_output_tokens
    alone a 300-token answer under a 1,000 limit read "30%" when nearly done, then jumped to 100."""
    researcher = plan.subtasks.get(key="a").agent
    assert cost_estimates.expected_output_tokens(researcher) == 1000  # no history: its limit
    record_history(researcher, [(400, 150), (500, 210)])
    assert cost_estimates.expected_output_tokens(researcher) == 1000  # too few answers
    record_history(researcher, [(450, 190), (9000, 990)])
    assert cost_estimates.expected_output_tokens(researcher) == 200  # the median of four
    researcher.max_output_tokens = 120
    assert cost_estimates.expected_output_tokens(researcher) == 120  # never above its limit


def test_a_running_attempts_progress_follows_its_expected_output_and_waits_at_99():
    from types import SimpleNamespace

    from orchestrator.engine.agent_runner import AttemptRun
    from orchestrator.providers.base import TextDelta

    current = AttemptRun(claim=SimpleNamespace(task=None, attempt=None), expected_output=200)  # type: ignore[arg-type]
    current.add_text(TextDelta("half", 100))
    assert current.progress.progress == 50
    current.add_text(TextDelta(" and more than expected", 260))
    assert current.progress.progress == 99  # 100 is for a task that succeeded
