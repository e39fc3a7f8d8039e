"""What a pending checkpoint asks (engine/checkpoint_questions.py): one wording for the run page,
the approvals inbox and the command line, in parts so that the page can link the task's title."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.engine.checkpoint_questions import Question, question
from orchestrator.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(demo_agents, make_plan):
    plan = make_plan(
        {"design": ("architect", [], {"gate": "before", "title": "Design the API"}), "build": ("coder", [])}
    )
    return runs.launch(plan)


def test_a_gate_asks_whether_its_task_may_start(run):
    gate = run.checkpoints.get(kind=Checkpoint.Kind.BEFORE)
    assert question(gate) == Question("Gate: may ", "Design the API", " start?")
    assert question(gate).text() == "Gate: may “Design the API” start?"


def test_a_review_asks_for_a_look_at_the_output(run):
    review = Checkpoint.objects.create(run=run, task_run=run.tasks.get(subtask__key="build"), kind="after")
    assert question(review) == Question("Review the output of ", "Build")
    assert question(review).text() == "Review the output of “Build”"


def test_the_plan_checkpoint_names_no_task(run):
    assert question(Checkpoint(run=run, kind=Checkpoint.Kind.PLAN)).text() == "Approve the plan before anything runs"


def test_a_tool_call_names_the_agent_and_the_tool(run):
    details = {"agent": "coder", "server": "workspace", "tool": "write_file", "arguments": {}}
    call = Checkpoint(run=run, task_run=run.tasks.get(subtask__key="build"), kind="tool", details=details)
    assert question(call) == Question("coder wants to call workspace:write_file — may it?")


def test_a_gate_without_its_task_is_refused_naming_the_checkpoint(run):
    with pytest.raises(ValueError, match="checkpoint None \\(before\\) has no task to name"):
        question(Checkpoint(run=run, kind=Checkpoint.Kind.BEFORE))
