"""The approvals inbox's items: what each pending checkpoint asks, about what, since when, what
approving a plan starts, and why this person may not approve it (the view only renders them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator import wording
from orchestrator.engine import approval_inbox, execution, runs, tool_approvals
from orchestrator.models import Agent, Checkpoint, TaskRun

pytestmark = pytest.mark.django_db


def items(checkpoints, user):
    """The inbox's items, each linking to "/run/<id>" (the dashboard gives the real address)."""
    return approval_inbox.approvals(
        approval_inbox.with_context(Checkpoint.objects.filter(pk__in=[c.pk for c in checkpoints]).order_by("pk")),
        user,
        run_url=lambda run_id: f"/run/{run_id}",
    )


@pytest.fixture
def written_run(demo_agents, make_plan, personas):
    """A running run of "draft" then "publish" (gated), by the launcher."""
    plan = make_plan(
        {
            "draft": ("writer", []),
            "publish": ("writer", ["draft"], {"gate": "before", "instructions": "Publish **it**"}),
        },
        goal="Write and publish the notes",
    )
    return runs.launch(plan, launched_by=personas["launcher"])


def test_a_gate_says_what_it_asks_about_which_task_and_since_when(written_run, personas):
    publish = written_run.tasks.get(subtask__key="publish")
    TaskRun.objects.filter(pk=publish.pk).update(state=TaskRun.State.WAITING_GATE)
    gate = Checkpoint.objects.create(run=written_run, task_run=publish, kind=Checkpoint.Kind.BEFORE)
    Checkpoint.objects.filter(pk=gate.pk).update(created_at=timezone.now() - timedelta(minutes=3))

    (item,) = items([gate], personas["approver"])

    assert item.ask == "Gate: may “Publish” start?"
    assert item.kind_label == "gate before the task"
    assert (item.excerpt_label, item.excerpt, item.excerpt_is_markdown) == ("Instructions", "Publish **it**", True)
    assert item.run_goal == "Write and publish the notes"
    assert item.waited.startswith("3 min")
    assert item.run_url == f"/run/{written_run.pk}"
    assert not item.approve_blocked and item.plan_terms == "" and item.plan_subtasks == []


def test_a_long_output_under_review_is_cut_at_a_paragraph(written_run, personas):
    draft = written_run.tasks.get(subtask__key="draft")
    paragraphs = "\n\n".join(f"Paragraph {i}: " + "word " * 80 for i in range(40))
    TaskRun.objects.filter(pk=draft.pk).update(state=TaskRun.State.AWAITING_REVIEW, output=paragraphs)
    review = Checkpoint.objects.create(run=written_run, task_run=draft, kind=Checkpoint.Kind.AFTER)

    (item,) = items([review], personas["approver"])

    assert item.ask == "Review the output of “Draft”"
    assert (item.kind_label, item.excerpt_label) == ("review of the task's output", "Output")
    assert item.excerpt_cut and len(item.excerpt) <= approval_inbox.EXCERPT_CHARS + 2
    assert item.excerpt.endswith("word …") and "Paragraph 3:" in item.excerpt
    assert "Paragraph 39:" not in item.excerpt


def test_a_tool_call_shows_its_arguments_as_json_not_markdown(demo_agents, make_plan, personas):
    run = runs.launch(make_plan({"build": ("coder", [])}, goal="Build it"), launched_by=personas["launcher"])
    claim = execution.claim_attempt(run.tasks.get().attempts.get().pk, "worker:1")
    asked = tool_approvals.Asked("toolu_7", "write_file", "workspace", "write_file", {"path": "notes/a.md"})
    checkpoint = Checkpoint.objects.get(pk=tool_approvals.open_checkpoint(claim, asked))

    (item,) = items([checkpoint], personas["approver"])

    assert item.ask == "coder wants to call workspace:write_file — may it?"
    assert item.kind_label == "tool call awaiting approval"
    assert item.excerpt_label == "Arguments" and not item.excerpt_is_markdown
    assert item.excerpt == '{\n  "path": "notes/a.md"\n}'


def test_a_plan_says_what_approving_starts_and_lists_its_subtasks(demo_agents, make_plan, personas):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["a"])}, goal="Three")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True, cap=2, budget_usd="3")

    (item,) = items([run.checkpoints.get()], personas["approver"])

    assert item.ask == "Approve the plan before anything runs"
    assert (item.kind_label, item.excerpt_label, item.excerpt) == ("plan approval", "Goal", "Three")
    assert item.run_goal == ""  # the goal is the excerpt: shown once
    assert item.plan_terms.startswith("3 tasks · ") and item.plan_terms.endswith(" · cap 2")
    assert [(row.key, row.agent, row.depends_on) for row in item.plan_subtasks] == [
        ("a", "researcher", []),
        ("b", "writer", ["a"]),
        ("c", "writer", ["a"]),
    ]
    assert item.plan_count == "3 subtasks" and not item.plan_scrolls


def test_the_launcher_of_a_plan_may_not_approve_it_and_is_told_why(demo_agents, make_plan, personas):
    plan = make_plan({"a": ("researcher", [])}, goal="Plan to approve")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True)
    launcher = personas["launcher"]
    launcher.groups.add(personas["approver"].groups.get())
    checkpoint = run.checkpoints.get()

    (theirs,) = items([checkpoint], launcher)
    (anothers,) = items([checkpoint], personas["approver"])

    assert theirs.approve_blocked
    assert theirs.blocked_reason.startswith(f"separation of duties: launcher launched run {run.pk}")
    assert not anothers.approve_blocked and anothers.blocked_reason == ""


def plan_item(make_plan, personas, **launch):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}, goal="Two")
    run = runs.launch(plan, launched_by=personas["launcher"], require_plan_approval=True, cap=2, budget_usd="3")
    (item,) = items([run.checkpoints.get()], personas["approver"])
    return run, item


def test_a_plan_priced_in_full_says_its_estimate_alone(demo_agents, make_plan, personas, priced_limit):
    run, item = plan_item(make_plan, personas)
    assert item.plan_terms == f"2 tasks · estimated {wording.usd(run.estimate_usd)} of a $3.00 budget · cap 2"
    assert item.plan_unpriced == ""


def test_a_plan_with_no_price_for_any_model_has_no_estimate_not_an_estimate_of_nothing(
    demo_agents, make_plan, personas
):
    _, item = plan_item(make_plan, personas)
    assert item.plan_terms == "2 tasks · no estimate: no price was known for its models · a $3.00 budget · cap 2"
    assert item.plan_unpriced == (
        "No price is known for simulated:sim-1: counted as $0 (set prices in the admin under provider limits)."
    )


def test_a_plan_priced_in_part_says_which_model_its_estimate_leaves_out(demo_agents, make_plan, personas, priced_limit):
    Agent.objects.filter(name="writer").update(model="sim-unpriced")
    run, item = plan_item(make_plan, personas)
    assert run.estimate_usd > 0  # the researcher's share
    assert item.plan_terms == f"2 tasks · estimated {wording.usd(run.estimate_usd)} of a $3.00 budget · cap 2"
    assert item.plan_unpriced.startswith("No price is known for simulated:sim-unpriced: counted as $0")
