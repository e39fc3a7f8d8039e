"""A retried task's agent is told the review that rejected its output (engine/review_feedback.py):
who rejected which attempt's output and why, in the request the next attempt sends."""

from __future__ import annotations

import pytest

from orchestrator.engine import context, reruns, review_feedback, runs
from orchestrator.models import Attempt, Checkpoint
from tests.conftest import fast_latency, run_here

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_broker")]

HEADING = "## Review of your previous output"


@pytest.fixture
def reviewed(make_agent, make_plan):
    """A run whose one task's output waits for review."""
    make_agent("writer", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"design": ("writer", [], {"gate": "after"})}))
    return run_here(run)


def prompt_of(run, number: int) -> str:
    return Attempt.objects.get(task_run__run=run, number=number).request["prompt"]


def test_the_retried_attempt_is_told_who_rejected_its_previous_output_and_why(reviewed, personas):
    comment = "Too vague: name the tables,\nand say how the queue is drained."
    runs.decide(reviewed.checkpoints.get(kind="after"), approve=False, comment=comment, user=personas["approver"])
    runs.retry_task(reviewed.tasks.get(), user=personas["launcher"])
    run_here(reviewed)
    first, second = prompt_of(reviewed, 1), prompt_of(reviewed, 2)
    assert HEADING not in first
    assert second.startswith(first)  # the same request, and then the review
    assert second[len(first) :] == (
        "\n\n## Review of your previous output\n"
        "Your previous output (attempt 1) was rejected in review by approver.\n"
        "The reviewer's comment:\nToo vague: name the tables,\nand say how the queue is drained.\n"
        "Do the task again, and address this feedback in your new output."
    )


def test_a_rejection_from_the_command_line_names_its_os_user(reviewed):
    runs.decide(reviewed.checkpoints.get(kind="after"), approve=False, comment="Shorter.", actor_name="cli:ops")
    runs.retry_task(reviewed.tasks.get())
    run_here(reviewed)
    assert "was rejected in review by cli:ops.\nThe reviewer's comment:\nShorter.\n" in prompt_of(reviewed, 2)


def test_an_output_approved_since_tells_nothing_more(reviewed, personas):
    runs.decide(reviewed.checkpoints.get(kind="after"), approve=False, comment="Redo it.", user=personas["approver"])
    runs.retry_task(reviewed.tasks.get())
    run_here(reviewed)
    runs.decide(reviewed.checkpoints.get(status=Checkpoint.Status.PENDING), approve=True, user=personas["approver"])
    reruns.rerun_from(reviewed.tasks.get())
    run_here(reviewed)
    assert HEADING in prompt_of(reviewed, 2) and HEADING not in prompt_of(reviewed, 3)


def test_a_long_comment_is_cut_as_the_agent_counts_tokens(reviewed, personas):
    comment = " ".join(f"word{i}" for i in range(review_feedback.COMMENT_TOKENS * 2))
    runs.decide(reviewed.checkpoints.get(kind="after"), approve=False, comment=comment, user=personas["approver"])
    task = reviewed.tasks.get()
    rejection = review_feedback.rejections([task.pk])[task.pk]
    assert (rejection.reviewer, rejection.attempt) == ("approver", 1)
    prompt = context.build_prompt(task, rejection=rejection)
    said = prompt.split("The reviewer's comment:\n", 1)[1].split("\nDo the task again", 1)[0]
    assert said.startswith("word0 word1 ") and said.endswith(context.CUT_MARKER)
    assert len(said.split()) <= review_feedback.COMMENT_TOKENS
