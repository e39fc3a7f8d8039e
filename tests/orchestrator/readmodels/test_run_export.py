"""The whole-run export (readmodels/run_export.py): JSON and Markdown."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import attempt_ends, dispatch, execution, runs
from orchestrator.models import Agent, Attempt, Run, TaskRun
from orchestrator.providers.base import Usage
from orchestrator.readmodels.run_export import EXPORT_FORMAT, run_export, run_markdown
from orchestrator.readmodels.totals import totals

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(make_plan, demo_agents, priced_limit, monkeypatch, admin_user):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    plan = make_plan(
        {
            "scope": ("researcher", [], {"instructions": "Frame it."}),
            "a": ("researcher", ["scope"]),
            "w": ("writer", ["a"]),
        },
        goal="Line one\nline two",
    )
    run = runs.launch(plan, budget_usd="2", launched_by=admin_user)
    now = timezone.now()
    scope = run.tasks.get(subtask__key="scope")
    Attempt.objects.filter(task_run=scope).update(
        state=Attempt.State.SUCCEEDED,
        worker="w:1",
        started_at=now,
        finished_at=now,
        input_tokens=10,
        output_tokens=20,
        cost_usd=Decimal("0.000123"),
    )
    TaskRun.objects.filter(pk=scope.pk).update(
        state=TaskRun.State.SUCCEEDED, output="Scope output.", cost_usd=Decimal("0.000123"), finished_at=now
    )
    TaskRun.objects.filter(pk=run.tasks.get(subtask__key="w").pk).update(
        output="# Final\n\nDone.", state=TaskRun.State.SUCCEEDED
    )
    TaskRun.objects.filter(pk=run.tasks.get(subtask__key="a").pk).update(state=TaskRun.State.FAILED, error="boom")
    return run


def test_run_export_is_json_with_exact_money_and_times(run, admin_user):
    data = run_export(run)
    text = json.dumps(data)  # everything is JSON as it is
    assert json.loads(text)["format"] == EXPORT_FORMAT
    assert data["run"]["budget_usd"] == "2.0000"
    assert data["run"]["launched_by"] == admin_user.username
    assert data["plan"]["subtasks"][1]["depends_on"] == ["scope"]
    assert data["plan"]["dependencies"] == [
        {"upstream": "scope", "downstream": "a"},
        {"upstream": "a", "downstream": "w"},
    ]
    assert data["final_tasks"] == ["w"]
    scope = data["tasks"][0]
    assert scope["key"] == "scope" and scope["cost_usd"] == "0.000123"
    attempt = scope["attempts"][0]
    assert (attempt["worker"], attempt["output_tokens"], attempt["duration_s"]) == ("w:1", 20, 0.0)
    assert attempt["started_at"].endswith("+00:00")
    assert {a["name"] for a in data["agents"]} == {"researcher", "writer"}


def test_markdown_puts_the_final_output_first(run):
    text = run_markdown(run)
    assert text.startswith(f"# Run {run.pk}: Line one line two\n")
    assert text.index("## Result") < text.index("# Final") < text.index("## Every task") < text.index("Scope output.")
    assert "_No output: boom_" in text


def test_markdown_says_how_the_tasks_came_out_as_the_tasks_card_does(run):
    """It said "Tasks: 3" of a run whose tasks had succeeded, failed and been skipped alike."""
    assert "- Tasks: 2 of 3 succeeded · 1 failed\n" in run_markdown(run)
    TaskRun.objects.filter(pk=run.tasks.get(subtask__key="a").pk).update(state=TaskRun.State.SKIPPED, error="")
    assert "- Tasks: 2 of 3 succeeded · 1 skipped\n" in run_markdown(run)


def test_markdown_says_when_the_run_started_and_finished_as_a_person_reads_a_time(run):
    """It gave the JSON's timestamps: "Started: 2026-11-28T10:53:26.368409+00:00"."""
    from datetime import UTC, datetime

    Run.objects.filter(pk=run.pk).update(started_at=datetime(2026, 11, 28, 10, 53, 26, 368409, tzinfo=UTC))
    assert "- Started: 2026-11-28 10:53:26 UTC; finished: not finished\n" in run_markdown(run)
    Run.objects.filter(pk=run.pk).update(finished_at=datetime(2026, 11, 28, 11, 0, 13, tzinfo=UTC))
    assert "- Started: 2026-11-28 10:53:26 UTC; finished: 2026-11-28 11:00:13 UTC\n" in run_markdown(run)


def test_both_downloads_label_a_tasks_partial_output_as_the_page_heads_it(run):
    """A failed or cancelled task's text, as its last attempt left it, was exported as if it were
    the task's result: no word in the Markdown, no field in the JSON."""
    a = run.tasks.get(subtask__key="a")
    Attempt.objects.filter(task_run=a).update(state=Attempt.State.FAILED)
    Attempt.objects.create(task_run=a, number=2, state=Attempt.State.TIMED_OUT)
    TaskRun.objects.filter(pk=a.pk).update(output="The first half of a sent", attempt_count=2)
    cancelled = run.tasks.get(subtask__key="w")
    Attempt.objects.create(task_run=cancelled, number=1, state=Attempt.State.CANCELLED)
    TaskRun.objects.filter(pk=cancelled.pk).update(state=TaskRun.State.CANCELLED, output="Streamed until")

    tasks = {task["key"]: task for task in run_export(run)["tasks"]}
    assert tasks["a"]["partial_output"] == {
        "attempt": 2,
        "attempt_state": "timed_out",
        "heading": "Partial output of attempt 2 (timed out)",
        "text": "The first half of a sent",
    }
    assert tasks["w"]["partial_output"]["heading"] == "Partial output of attempt 1 (cancelled)"
    assert tasks["scope"]["partial_output"] is None  # its result
    # `output` is the result only: the partial text was given there too, as if it were one.
    assert (tasks["a"]["output"], tasks["w"]["output"]) == (None, None)
    assert tasks["scope"]["output"] == "Scope output."

    document = run_markdown(run)
    label = "_Partial output of attempt 2 (timed out): the text it wrote before it ended, not a result._"
    assert f"(`a`, researcher, failed)\n\n{label}\n\nThe first half of a sent\n" in document
    assert "_Partial output of attempt 1 (cancelled): the text it wrote" in document
    assert document.count("Partial output") == 2  # the succeeded scope's output is not labelled


def test_both_downloads_carry_the_path_of_an_agent_that_used_tools(run, artifacts_dir):
    """The path as the glass box shows it, per attempt: a call with its approval and result, a
    refused call, the model calls; tasks whose agent took no step have no path."""
    from orchestrator.engine.agent_steps import Decision
    from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, echo, tool_turn
    from tests.scripted_agent_path import record_loop

    scope = run.tasks.get(subtask__key="scope")
    provider = ScriptedProvider(tool_turn(("echo", {"text": "hi"}), ("rm", {"path": "/"})), answer("Done."))
    record_loop(scope, provider, FakeTools(echo=(echo, True)), decisions=[Decision(True, "fine", "alice")])

    data = run_export(run)
    assert list(data["paths"]) == ["scope"]
    path = data["paths"]["scope"]
    assert [(s["attempt"], s["step"], s["kind"]) for s in path] == [
        (1, 1, "text"),
        (1, 1, "model"),
        (1, 1, "call"),
        (1, 1, "refused"),
        (1, 2, "text"),
        (1, 2, "model"),
    ]
    call = path[2]
    assert (call["tool"], call["arguments"], call["approved"], call["decided_by"], call["result"]) == (
        "echo",
        {"text": "hi"},
        True,
        "alice",
        "echo: hi",
    )
    json.dumps(data)  # still plain JSON

    document = run_markdown(run)
    scope_section = document.split("(`scope`")[1]
    assert "Path (attempt 1):" in scope_section
    assert (
        '- Step 1, called `srv:echo` `{"text": "hi"}`, approved by alice (fine) → result: `echo: hi`' in scope_section
    )
    assert "- Step 1, refused `rm`" in scope_section
    assert "- Step 2, said: Done." in scope_section
    assert "- Step 1, model call: asked for tools, 10 in / " in scope_section
    assert document.count("Path (") == 1  # the other tasks took no step


def test_the_markdown_gives_no_path_for_an_attempt_that_called_no_tool(run, artifacts_dir):
    """An agent holding tools that answered without calling one had a "Path (attempt 1):" of its
    text and its model call, as if it had acted: only an attempt that took a tool step has one."""
    from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, echo, tool_turn
    from tests.scripted_agent_path import record_loop

    scope = run.tasks.get(subtask__key="scope")
    record_loop(scope, ScriptedProvider(answer("Scoped without tools.")), FakeTools(echo=(echo, False)))
    assert [s["kind"] for s in run_export(run)["paths"]["scope"]] == ["text", "model"]  # the JSON keeps them
    assert "Path (" not in run_markdown(run)

    provider = ScriptedProvider(tool_turn(("echo", {"text": "hi"})), answer("Done."))
    record_loop(scope, provider, FakeTools(echo=(echo, False)), attempt=2)
    document = run_markdown(run)
    assert "Path (attempt 2):" in document and "Path (attempt 1)" not in document
    assert "- Step 1, said: Scoped without tools." not in document


def test_a_long_result_is_one_cut_line_in_the_markdown_and_says_how_long_it_was(run, artifacts_dir):
    from tests.orchestrator.engine.test_agent_loop import FakeTools, ScriptedProvider, answer, tool_turn
    from tests.scripted_agent_path import record_loop

    scope = run.tasks.get(subtask__key="scope")
    long_text = "line of output\n" * 2000

    async def big() -> str:
        return long_text

    record_loop(scope, ScriptedProvider(tool_turn(("big", {})), answer("ok")), FakeTools(big=(big, False)))
    call = next(s for s in run_export(run)["paths"]["scope"] if s["kind"] == "call")
    assert call["result_chars"] == len(long_text) and len(call["result"]) < len(long_text)
    line = next(line for line in run_markdown(run).splitlines() if "called `srv:big`" in line)
    assert f"→ result, {len(long_text):,} characters: `line of output line of output" in line
    assert len(line) < 400 and "…`" in line


def cost_line(run) -> str:
    """The Markdown export's line with the run's cost and tokens."""
    return next(line for line in run_markdown(run).splitlines() if line.startswith("- Cost:"))


def card(run) -> tuple[int, int, int, int]:
    """The numbers of the run page's Tokens card: all, in, out, streaming."""
    page = totals(run)
    return page.tokens, page.input_tokens_so_far, page.output_tokens, page.streaming_tokens


def streaming_attempt(run):
    """The claim of the run's one queued attempt, its host having saved 1,027 input tokens
    (reported at the stream's start) and 8 streamed."""
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    assert claim is not None
    execution.save_progress([(claim, execution.Progress("Hel", 5, Usage(input_tokens=1_027, output_tokens=8)))])
    return claim


def test_the_markdown_of_a_run_under_way_counts_its_tokens_so_far_as_the_tokens_card(launched):
    """The Markdown of a running run said "tokens: 0 in, 0 out" while the run page's Tokens card
    said 1,035, "1,027 in · 0 out · 8 streaming": it counted only the ended attempts."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    claim = streaming_attempt(run)
    assert card(run) == (1_035, 1_027, 0, 8)
    assert cost_line(run).endswith("; tokens so far: 1,035 (1,027 in, 0 out, 8 streaming)")

    attempt_ends.complete(claim, "Hello", Usage(input_tokens=1_027, output_tokens=40), advance=False)
    assert card(run) == (1_067, 1_027, 40, 0)
    assert cost_line(run).endswith("; tokens so far: 1,067 (1,027 in, 40 out)")

    runs.cancel(run)
    assert cost_line(run).endswith("; tokens: 1,067 (1,027 in, 40 out)")  # ended: no longer "so far"


def test_the_markdown_says_what_the_cost_leaves_out_on_a_model_with_no_price(launched):
    """As the run page's Cost card: the tokens of a model with no price are not in the cost."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    assert "has no price" not in run_markdown(run)
    Agent.objects.filter(name="researcher").update(model="sim-unpriced")
    streaming_attempt(run)
    lines = run_markdown(run).splitlines()
    said = lines[lines.index(cost_line(run)) + 1]
    assert said == f"  - {totals(run).unpriced_note}"
    assert said.startswith("  - simulated:sim-unpriced has no price: its 1,035 tokens are not in the cost")


def test_the_markdown_of_a_cancelled_run_says_what_its_stopping_attempt_has_not_counted_yet(launched):
    """As the Tokens card: "1 attempt still stopping: not counted yet" until the attempt stops, its
    tokens so far counted meanwhile (they read 0 once its task was cancelled, until it stopped)."""
    run = launched({"a": ("researcher", [])})
    claim = streaming_attempt(run)
    runs.cancel(run)
    assert totals(run).not_counted_yet == "1 attempt still stopping: not counted yet"
    assert cost_line(run).endswith(
        "; tokens: 1,035 (1,027 in, 0 out, 8 streaming); 1 attempt still stopping: not counted yet"
    )

    attempt_ends.cancel_attempt(claim, Usage(input_tokens=1_027, output_tokens=40))  # its next beat
    assert card(run) == (1_067, 1_027, 40, 0)
    assert cost_line(run).endswith("; tokens: 1,067 (1,027 in, 40 out)")


def test_an_agents_headings_sit_below_its_tasks_heading_in_the_markdown_export():
    """An agent's "## Findings" sat under the task's "### Scope" and broke the document's outline."""
    from orchestrator.readmodels.run_export import below_heading

    text = "# Report\n\n## Findings\nSome #hashtag text.\n```sh\n# a shell comment\n```\n###### Deep"
    assert below_heading(text, "###") == (
        "#### Report\n\n##### Findings\nSome #hashtag text.\n```sh\n# a shell comment\n```\n###### Deep"
    )


def test_an_agents_underlined_headings_sit_below_its_tasks_heading_too():
    """An agent's "Findings" underlined with "-----" is a level-2 heading: it sat under the task's
    "###" as the "##" headings did. It is moved below it as an ATX heading; a "---" that underlines
    no paragraph line is a horizontal rule and stays one, and code is left as it is."""
    from orchestrator.readmodels.run_export import below_heading

    text = (
        "Report\n======\n\nIntro.\n\nKey\nfindings\n---\n\n---\n\n- a list item\n---\n"
        "```md\nNot a heading\n---\n```\nC#\n==\n| a | b |\n| - | - |\n| 1 | 2 |\n\nLast\n-"
    )
    assert below_heading(text, "###") == (
        "#### Report\n\nIntro.\n\n##### Key findings\n\n---\n\n- a list item\n---\n"
        "```md\nNot a heading\n---\n```\n#### C#\n| a | b |\n| - | - |\n| 1 | 2 |\n\n##### Last"
    )
    assert below_heading("Deep\n---", "#####") == "###### Deep"  # never past "######"
    assert below_heading("Issue #\n===", "###") == "#### Issue \\#"  # its "#" is not a closing sequence


def test_the_markdown_export_moves_a_final_outputs_underlined_heading_below_its_tasks(run):
    TaskRun.objects.filter(pk=run.tasks.get(subtask__key="w").pk).update(output="Final\n=====\n\nDone.\n\n---\n\nEnd.")
    document = run_markdown(run)
    assert "(`w`, writer, succeeded)\n\n#### Final\n\nDone.\n\n---\n\nEnd.\n" in document
