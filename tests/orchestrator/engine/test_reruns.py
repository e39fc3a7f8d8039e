"""History and re-runs: launch again with the same settings; re-run from a task (it and its
downstream start over, upstream results kept, earlier outputs kept on their attempts); the
exact request behind each attempt."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orchestrator.engine import reruns, run_budget, runs
from orchestrator.models import Attempt, Checkpoint, Event, Run, TaskRun
from tests.conftest import fast_latency
from tests.conftest import run_here as run_all

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_broker")]

State = TaskRun.State


@pytest.fixture
def chain(make_agent, make_plan, priced_limit):
    """scope → draft → review, plus an independent side task; all succeeded."""
    for name in ("researcher", "writer"):
        make_agent(name, provider_options=fast_latency(0.01), system_prompt=f"You are the {name}.")
    plan = make_plan(
        {
            "scope": ("researcher", []),
            "draft": ("writer", ["scope"]),
            "review": ("writer", ["draft"]),
            "side": ("researcher", []),
        },
        goal="Write a brief",
    )
    run = runs.launch(plan, cap=3, budget_usd="1.00", failure_policy=Run.FailurePolicy.FAIL_FAST)
    return run_all(run)


def outputs(run: Run) -> dict[str, str]:
    return dict(run.tasks.values_list("subtask__key", "output"))


def test_rerun_from_a_task_resets_it_and_its_downstream_and_keeps_what_is_above(chain, personas):
    assert chain.status == Run.Status.SUCCEEDED
    before = outputs(chain)
    spent = chain.cost_usd
    draft = chain.tasks.get(subtask__key="draft")
    keys = reruns.rerun_from(draft, user=personas["launcher"])
    assert keys == ["draft", "review"]
    chain.refresh_from_db()
    assert chain.status == Run.Status.RUNNING and chain.finished_at is None and chain.summary == ""
    states = dict(chain.tasks.values_list("subtask__key", "state"))
    assert states["scope"] == states["side"] == State.SUCCEEDED  # upstream and unrelated work kept
    assert states["draft"] == State.QUEUED and states["review"] == State.PENDING
    assert outputs(chain)["scope"] == before["scope"]
    # the answers being replaced are kept on the attempts that produced them
    kept = dict(Attempt.objects.filter(task_run__run=chain, number=1).values_list("task_run__subtask__key", "output"))
    assert kept["draft"] == before["draft"] and kept["review"] == before["review"] and kept["scope"] == ""
    event = Event.objects.get(run=chain, type="task.rerun")
    assert event.payload == {"reset": ["draft", "review"]} and event.actor_user == personas["launcher"]
    assert Event.objects.filter(run=chain, type="task.reset", task_run__subtask__key="review").exists()
    reopened = Event.objects.get(run=chain, type="run.reopened")
    assert (reopened.message, reopened.actor_user) == ("run reopened by a re-run from draft", personas["launcher"])
    assert not Event.objects.filter(run=chain, type="run.resumed").exists()

    run_all(chain)
    assert chain.status == Run.Status.SUCCEEDED
    assert chain.cost_usd > spent  # the money already spent stays counted
    draft.refresh_from_db()
    assert draft.attempt_count == 2 and draft.state == State.SUCCEEDED
    # the new draft attempt was built on scope's kept summary
    second = Attempt.objects.get(task_run=draft, number=2)
    assert chain.tasks.get(subtask__key="scope").summary in second.request["prompt"]


def test_a_failed_tasks_partial_text_is_kept_on_its_attempt_when_it_is_re_run(chain, personas):
    """A failed task shows what its last attempt wrote before it failed; re-run, it starts over
    and that text was dropped (only a succeeded attempt's answer was kept)."""
    draft = chain.tasks.get(subtask__key="draft")
    Attempt.objects.filter(task_run=draft).update(state=Attempt.State.FAILED, output="")
    TaskRun.objects.filter(pk=draft.pk).update(state=State.FAILED, output="The first half of a draft")
    reruns.rerun_from(draft, user=personas["launcher"])
    draft.refresh_from_db()
    assert draft.output == ""
    kept = Attempt.objects.get(task_run=draft, number=1)
    assert (kept.state, kept.output) == (Attempt.State.FAILED, "The first half of a draft")


def test_rerun_refuses_busy_downstream_cancelled_runs_and_unfinished_tasks(chain, make_agent, make_plan):
    draft = chain.tasks.get(subtask__key="draft")
    TaskRun.objects.filter(run=chain, subtask__key="review").update(state=State.RUNNING)
    with pytest.raises(runs.ActionError, match="review below draft is still at work"):
        reruns.rerun_from(draft)
    TaskRun.objects.filter(run=chain, subtask__key="review").update(state=State.SUCCEEDED)

    other = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    with pytest.raises(runs.ActionError, match="task b is pending: only a task that has finished"):
        reruns.rerun_from(other.tasks.get(subtask__key="b"))
    runs.cancel(other)
    with pytest.raises(runs.ActionError, match="was cancelled: launch it again instead"):
        reruns.rerun_from(other.tasks.get(subtask__key="a"))


def test_a_rerun_the_budget_cannot_cover_is_refused_before_anything_moves(chain):
    """It reopened the run, which stopped over budget again in the same second, the time between
    counted in its Elapsed; a retry was refused up front (engine/run_budget.py), a re-run was not."""
    draft = chain.tasks.get(subtask__key="draft")
    left = run_budget.worst_case_cost(draft) / 2
    Run.objects.filter(pk=chain.pk).update(cost_usd=Decimal("1.00") - left)
    ended_at, seq = chain.finished_at, Event.objects.filter(run=chain).count()
    with pytest.raises(
        runs.ActionError, match=r"^task draft may cost up to \$.* raise the budget to at least \$1\.01 first$"
    ):
        reruns.rerun_from(draft)
    chain.refresh_from_db()
    assert (chain.status, chain.finished_at, Event.objects.filter(run=chain).count()) == ("succeeded", ended_at, seq)
    assert set(chain.tasks.values_list("state", flat=True)) == {State.SUCCEEDED}


def test_a_rerun_task_with_a_review_asks_for_the_review_again(make_agent, make_plan, personas):
    make_agent("writer", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"draft": ("writer", [], {"gate": "after"})}))
    run_all(run)
    review = run.checkpoints.get(kind=Checkpoint.Kind.AFTER)
    runs.decide(review, approve=True, user=personas["approver"])
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    reruns.rerun_from(run.tasks.get(), user=personas["launcher"])
    run_all(run)
    assert run.tasks.get().state == State.AWAITING_REVIEW
    # A new review: the approval of the first output stays on the record as it was.
    review.refresh_from_db()
    assert (review.status, review.decider) == (Checkpoint.Status.APPROVED, "approver")
    again = run.checkpoints.get(kind=Checkpoint.Kind.AFTER, status=Checkpoint.Status.PENDING)
    assert again.pk != review.pk and again.created_at > review.decided_at


def test_a_rerun_after_a_rejected_review_tells_the_agent_why(make_agent, make_plan, personas):
    make_agent("writer", provider_options=fast_latency(0.01))
    run = runs.launch(make_plan({"draft": ("writer", [], {"gate": "after"})}))
    run_all(run)
    runs.decide(run.checkpoints.get(kind="after"), approve=False, comment="Cite sources.", user=personas["approver"])
    reruns.rerun_from(run.tasks.get(), user=personas["launcher"])
    run_all(run)
    prompt = Attempt.objects.get(task_run__run=run, number=2).request["prompt"]
    assert prompt.endswith(
        "## Review of your previous output\n"
        "Your previous output (attempt 1) was rejected in review by approver.\n"
        "The reviewer's comment:\nCite sources.\n"
        "Do the task again, and address this feedback in your new output."
    )
    assert list(run.checkpoints.values_list("status", flat=True)) == ["rejected", "pending"]


def test_launch_again_repeats_the_settings_with_a_new_run_of_the_same_plan(chain, personas):
    again = reruns.launch_again(chain, user=personas["launcher"])
    assert again.pk != chain.pk and again.plan_id == chain.plan_id
    assert (again.cap, again.budget_usd, again.failure_policy) == (3, Decimal("1.0000"), "fail_fast")
    assert again.launched_by == personas["launcher"] and again.status == Run.Status.RUNNING
    # Its log says the budget as the first run's does, not as the database keeps it ("$1.0000").
    created = Event.objects.get(run=again, type="run.created").message
    assert created == f"run of plan {chain.plan_id} created: cap 3, budget $1.00, policy fail_fast"
    assert created == Event.objects.get(run=chain, type="run.created").message


def test_launch_again_keeps_plan_approval_and_refuses_a_retired_agent(make_agent, make_plan, personas):
    agent = make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}), require_plan_approval=True)
    again = reruns.launch_again(run, user=personas["launcher"])
    assert again.status == Run.Status.AWAITING_APPROVAL and again.checkpoints.filter(kind="plan").exists()
    agent.status = "retired"
    agent.save()
    with pytest.raises(runs.ActionError, match="agent researcher is no longer active"):
        reruns.launch_again(run)


def test_each_attempt_keeps_the_exact_request_it_sent(chain):
    review = Attempt.objects.get(task_run__run=chain, task_run__subtask__key="review")
    request = review.request
    assert request["provider"] == "simulated" and request["model"] == "sim-1"
    assert request["max_tokens"] == 1024 and request["timeout_s"] == 30.0
    assert request["system_prompt"] == "You are the writer."
    assert request["prompt"].startswith("# Review\n\nGoal of the whole team: Write a brief")
    draft = chain.tasks.get(subtask__key="draft")
    assert f"- Draft (draft): {draft.summary}" in request["prompt"]  # the upstream summary it received
    assert request["options"] == fast_latency(0.01)


def test_a_rerun_task_keeps_what_it_spent_before_apart_and_counts_this_starts_attempts(
    make_agent, make_plan, priced_limit
):
    """The task's and the run's totals keep every attempt's spend; what came before the re-run is
    set apart, and a failure after the re-run counts only this start's attempts."""
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=0)
    run = run_all(runs.launch(make_plan({"a": ("breaker", [])})))
    task = run.tasks.get()
    assert task.state == State.FAILED and task.error.endswith("after 1 attempt")
    spent = (task.attempt_count, task.input_tokens + task.output_tokens, task.cost_usd)
    assert spent[0] == 1 and spent[2] > 0 and (task.earlier_attempts, task.earlier_cost_usd) == (0, 0)

    reruns.rerun_from(task)
    task.refresh_from_db()
    assert (task.earlier_attempts, task.earlier_tokens, task.earlier_cost_usd) == spent
    assert (task.attempt_count, task.cost_usd) == (2, spent[2])  # attempt 2 queued, nothing spent yet

    run_all(run)
    task.refresh_from_db()
    assert task.attempt_count == 2 and task.error.endswith("after 1 attempt")  # not "after 2 attempts"
    assert task.cost_usd > spent[2] and task.earlier_cost_usd == spent[2]
    run.refresh_from_db()
    assert run.cost_usd == task.cost_usd  # the run counts both attempts


def test_a_rerun_waits_for_an_attempt_still_stopping(chain):
    """A cancelled task whose attempt has not ended yet (a cancel reaches it at its next beat)
    settles that attempt's usage on the task when it ends: reset before, it read as the new
    start's spend. The re-run is refused, naming the task, until the attempt has ended."""
    review = chain.tasks.get(subtask__key="review")
    TaskRun.objects.filter(pk=review.pk).update(state=State.CANCELLED)
    Attempt.objects.filter(task_run=review).update(state=Attempt.State.RUNNING)
    with pytest.raises(runs.ActionError, match="an attempt of review is still stopping"):
        reruns.rerun_from(chain.tasks.get(subtask__key="draft"))
    assert not Event.objects.filter(run=chain, type="task.rerun").exists()  # nothing half-done

    Attempt.objects.filter(task_run=review).update(state=Attempt.State.CANCELLED)
    assert reruns.rerun_from(chain.tasks.get(subtask__key="draft")) == ["draft", "review"]


def run_with_retries(run: Run) -> Run:
    """run_all, with the reaper's tick queueing the retries that are due, until the run ends."""
    from orchestrator.engine import reaper

    for _ in range(20):
        run_all(run)
        if run.is_finished:
            return run
        reaper.tick()
    raise AssertionError(f"run {run.pk} did not end: {run.status}")


def test_the_bound_on_attempts_counts_this_starts_attempts(make_agent, make_plan, priced_limit, monkeypatch):
    """MAX_ATTEMPTS stops a task a provider never lets through; a task re-run after reaching it
    gets its retries again instead of failing at its first fault."""
    from orchestrator.engine import retries

    monkeypatch.setattr(TaskRun, "MAX_ATTEMPTS", 2)
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 0.0)
    make_agent("breaker", provider_options={**fast_latency(0.01), "failure_rate": 1}, max_retries=5)
    run = run_with_retries(runs.launch(make_plan({"a": ("breaker", [])})))
    task = run.tasks.get()
    assert (task.state, task.attempt_count) == (State.FAILED, 2)

    reruns.rerun_from(task)
    run_with_retries(run)
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (State.FAILED, 4)  # two more, not one
    assert task.error.endswith("after 2 attempts")
