"""How an attempt ends, run in this process: success (alone or with others of its run), failure,
time-out, cancellation, a late result discarded; the usage kept whatever the end."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import attempt_ends, execution, reaper, retries, runs
from orchestrator.models import Attempt, Event, ProviderLimit, TaskRun
from orchestrator.providers.base import Usage
from orchestrator.readmodels.records import PartialOutputRecord
from tests.conftest import fast_latency, run_attempt
from tests.orchestrator.engine.test_execution import queued_attempt

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_successful_attempt_records_output_usage_and_cost(make_agent, make_plan, priced_limit):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    assert run_attempt(attempt.pk) == "succeeded"
    task = TaskRun.objects.get(pk=attempt.task_run_id)
    attempt.refresh_from_db()
    run.refresh_from_db()
    assert task.state == State.SUCCEEDED and task.progress == 100
    assert task.output.startswith("_[simulated output from researcher]_")
    assert task.summary and len(task.summary.split()) <= 201
    assert attempt.state == "succeeded" and attempt.worker == execution.worker_name()
    assert attempt.output_tokens > 0 and attempt.input_tokens > 0
    expected = priced_limit.cost(attempt.input_tokens, attempt.output_tokens)
    assert attempt.cost_usd == pytest.approx(expected) and run.cost_usd == pytest.approx(expected)
    assert task.cost_usd == attempt.cost_usd and task.input_tokens == attempt.input_tokens
    assert run.reserved_usd == Decimal("0")
    assert run.status == "succeeded"


def test_timeout_keeps_the_reported_usage_retries_then_fails_and_skips_downstream(
    make_agent, make_plan, priced_limit, monkeypatch
):
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 30.0)  # no retry before we say
    make_agent("researcher", provider_options={"hang": True}, timeout_s=1, max_retries=1)
    make_agent("writer")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "x": ("writer", [])}))
    run_attempt(queued_attempt(run, "x").pk)
    first = queued_attempt(run, "a")
    assert run_attempt(first.pk) == "retry scheduled"
    first.refresh_from_db()
    assert first.state == "timed_out" and "timed out after 1 s" in first.error
    # The provider reported the prompt's tokens before it hung: they were used, and they cost.
    assert first.input_tokens > 0 and first.cost_usd == priced_limit.cost(first.input_tokens, 0)
    task = TaskRun.objects.get(pk=first.task_run_id)
    assert task.state == State.READY and task.not_before is not None and task.fault_count == 1
    assert task.input_tokens == first.input_tokens and task.cost_usd == first.cost_usd
    TaskRun.objects.filter(pk=task.pk).update(not_before=timezone.now())  # the backoff has passed
    reaper.tick()
    assert run_attempt(queued_attempt(run, "a").pk) == "failed"
    run.refresh_from_db()
    assert dict(run.tasks.values_list("subtask__key", "state")) == {"a": "failed", "b": "skipped", "x": "succeeded"}
    assert run.tasks.get(subtask__key="b").error == "upstream a did not succeed"
    # The reason reads as one sentence, in the task and in the run's summary: no nested brackets.
    assert run.tasks.get(subtask__key="a").error == "timed out after 1 s, after 2 attempts"
    assert run.status == "failed" and run.summary == (
        "1 of 3 tasks failed: a — timed out after 1 s, after 2 attempts; "
        "1 skipped because an upstream task did not succeed"
    )
    # Task and run totals count every attempt, failed ones included.
    failed_task = run.tasks.get(subtask__key="a")
    attempts = Attempt.objects.filter(task_run=failed_task)
    assert failed_task.input_tokens == sum(a.input_tokens for a in attempts) > first.input_tokens
    assert run.input_tokens == sum(a.input_tokens for a in Attempt.objects.filter(task_run__run=run))
    assert run.cost_usd == sum(a.cost_usd for a in Attempt.objects.filter(task_run__run=run))


def test_a_rate_limit_answer_backs_off_the_provider_without_spending_retries(make_agent, make_plan):
    options = {**fast_latency(0.05), "server_limit": {"requests_per_minute": 1}}
    make_agent("researcher", provider_options=options, max_retries=0)
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}), cap=2)
    outcomes = [run_attempt(queued_attempt(run, key).pk) for key in ("a", "b")]
    assert sorted(outcomes) == ["retry scheduled", "succeeded"]
    limited = run.tasks.get(state=State.READY)
    assert limited.fault_count == 0  # a 429 is not the task's fault
    assert limited.not_before > timezone.now()
    limit = ProviderLimit.objects.get(provider="simulated", model="sim-1")
    assert limit.backoff_until > timezone.now()
    event = Event.objects.get(run=run, type="provider.backoff")
    assert event.payload["status"] == 429 and event.payload["retry_after_s"] >= 1


def test_a_late_result_from_a_lost_attempt_is_discarded_but_its_usage_counted(make_agent, make_plan, priced_limit):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    claim = execution.claim_attempt(attempt.pk, "worker-that-stalls")
    execution.save_progress([(claim, execution.Progress("so far", 10, Usage(input_tokens=50, output_tokens=3)))])
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.reap_expired() == 1
    attempt.refresh_from_db()
    run.refresh_from_db()
    assert attempt.state == "lost"
    assert (attempt.input_tokens, attempt.output_tokens) == (50, 3)  # what its host last saved
    assert (run.input_tokens, run.output_tokens) == (50, 3) and run.reserved_usd == 0
    outcome = attempt_ends.complete(claim, "stale output", Usage(input_tokens=50, output_tokens=7))
    assert outcome == "discarded"
    attempt.refresh_from_db()
    run.refresh_from_db()
    task = TaskRun.objects.get(pk=claim.task.pk)
    assert attempt.late_result_discarded and task.output != "stale output"
    assert attempt.output_tokens == 7 and run.output_tokens == 7 and task.output_tokens == 7  # counted once
    assert run.cost_usd == attempt.cost_usd == priced_limit.cost(50, 7)
    assert task.state == State.READY and task.not_before is not None  # a retry after a short backoff
    TaskRun.objects.filter(pk=task.pk).update(not_before=timezone.now())
    reaper.tick()
    task.refresh_from_db()
    assert task.state == State.QUEUED and task.attempt_count == 2  # retried as a new attempt
    assert Event.objects.filter(run=run, type="attempt.lost").count() == 1
    assert Event.objects.filter(run=run, type="attempt.late_result_discarded").count() == 1


def test_a_cancelled_attempt_keeps_its_usage(make_agent, make_plan, priced_limit):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(queued_attempt(run, "a").pk, "w1")
    runs.cancel(run)
    assert execution.still_ours([claim]) == {claim.task.pk: "cancelled"}
    assert attempt_ends.cancel_attempt(claim, Usage(input_tokens=40, output_tokens=12)) == "cancelled"
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    run.refresh_from_db()
    assert attempt.state == "cancelled" and attempt.output_tokens == 12
    assert run.output_tokens == 12 and run.cost_usd == priced_limit.cost(40, 12) and run.reserved_usd == 0
    assert TaskRun.objects.get(pk=claim.task.pk).state == State.CANCELLED


def test_an_attempt_stopped_by_a_skip_of_its_task_says_so_not_run_cancelled(make_agent, make_plan, priced_limit):
    """A person skipped the running task: its attempt's reason is the skip, and the run was never
    cancelled (it said "run cancelled" for every stop)."""
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    claim = execution.claim_attempt(queued_attempt(run, "a").pk, "w1")
    runs.skip_task(claim.task, reason="not needed after all")
    assert attempt_ends.cancel_attempt(claim, Usage(input_tokens=40, output_tokens=12)) == "cancelled"
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    assert (attempt.state, attempt.error, attempt.output_tokens) == ("cancelled", "not needed after all", 12)
    stopped = Event.objects.get(run=run, type="attempt.cancelled")
    assert stopped.message == "attempt 1 stopped: its task was skipped"
    run.refresh_from_db()
    assert run.status != "cancelled"


@pytest.mark.parametrize("end", ["result", "failure"])
def test_an_attempt_that_ends_after_its_run_was_cancelled_ends_cancelled_not_late(
    make_agent, make_plan, priced_limit, end
):
    """Its host had not yet heard of the cancellation: nothing says a lease expired."""
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(queued_attempt(run, "a").pk, "w1")
    runs.cancel(run)
    used = Usage(input_tokens=40, output_tokens=12)
    if end == "result":
        outcome = attempt_ends.complete(claim, "too late", used)
    else:
        outcome = attempt_ends.fail(claim, "the provider went away", usage=used)
    assert outcome == "cancelled"
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    assert (attempt.state, attempt.error, attempt.late_result_discarded) == ("cancelled", "run cancelled", False)
    assert attempt.output_tokens == 12  # what it used still counts
    assert not Event.objects.filter(run=run, type="attempt.late_result_discarded").exists()
    assert not Event.objects.filter(run=run, message__contains="lease expired").exists()
    # Its text is kept as the cancelled attempt's partial output, never as the task's result.
    task = TaskRun.objects.get(pk=claim.task.pk)
    assert task.state == TaskRun.State.CANCELLED
    partial = PartialOutputRecord.of(task, attempt)
    if end == "result":
        assert partial is not None and (partial.heading, partial.text) == (
            "Partial output of attempt 1 (cancelled)",
            "too late",
        )
    else:
        assert partial is None


def test_the_tasks_a_success_claims_for_its_host_are_asked_with_the_upstream_outputs(make_agent, make_plan):
    """The step a success takes quotes that success's output from memory and reads the other
    upstreams: each request holds every upstream's result, as saved."""
    make_agent("researcher")
    plan = make_plan(
        {"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", ["a"]), "d": ("researcher", ["a", "b"])}
    )
    run = runs.launch(plan, cap=4)
    first = execution.claim_attempt(queued_attempt(run, "b").pk, "w1")
    assert attempt_ends.complete(first, "Findings of b: the queue is kill-safe.", Usage(10, 5)) == "succeeded"
    claim = execution.claim_attempt(queued_attempt(run, "a").pk, "w1")
    assert attempt_ends.complete(claim, "Findings of a: leases hold.", Usage(10, 5), keep=4) == "succeeded"
    prompts = {kept.task.subtask.key: kept.request.prompt for kept in claim.kept}
    assert set(prompts) == {"c", "d"}
    assert "Findings of a: leases hold." in prompts["c"] and "Findings of b" not in prompts["c"]
    assert "Findings of a: leases hold." in prompts["d"] and "Findings of b: the queue is kill-safe." in prompts["d"]
    recorded = dict(
        Attempt.objects.filter(task_run__run=run, number=1, task_run__subtask__key__in=["c", "d"]).values_list(
            "task_run__subtask__key", "request__prompt"
        )
    )
    assert recorded == prompts


def test_a_success_is_summarised_for_its_downstream_agents_read_from_the_runs_shape(
    make_agent, make_plan, fake_anthropic
):
    """Downstream of its own agent only (a chain's usual case), the summary needs no read of the
    downstream agents; with a Claude agent downstream it is still bounded as Claude counts."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from orchestrator.providers.fake_anthropic import CHARS_PER_INPUT_TOKEN

    long_words = " ".join(["interoperability"] * 60 + ["configuration"] * 60 + ["a"] * 71)  # 191 words
    make_agent("researcher")
    make_agent("claude", provider="anthropic", model="claude-sonnet-4-6", provider_options={})
    plan = make_plan(
        {
            "own": ("researcher", []),
            "next": ("researcher", ["own"]),
            "mixed": ("researcher", []),
            "c": ("claude", ["mixed"]),
        }
    )
    run = runs.launch(plan, cap=4)
    ended = {}
    for key in ("own", "mixed"):
        claim = execution.claim_attempt(queued_attempt(run, key).pk, "w1")
        with CaptureQueriesContext(connection) as queries:
            assert attempt_ends.complete(claim, long_words, Usage(10, 5)) == "succeeded"
        ended[key] = (TaskRun.objects.get(pk=claim.task.pk).summary, [q["sql"] for q in queries])
    summary, statements = ended["own"]
    assert summary == long_words  # the word count lets all 191 words through
    assert not [sql for sql in statements if sql.startswith('SELECT "orchestrator_agent"."provider"')]
    summary, _ = ended["mixed"]
    assert len(summary) / CHARS_PER_INPUT_TOKEN <= 200 < len(long_words) / CHARS_PER_INPUT_TOKEN


def test_successes_recorded_together_count_once_each_and_take_one_step(
    make_agent, make_plan, priced_limit, monkeypatch
):
    """An agent host's wave of successes of one run: one transaction records each (output, usage,
    cost, event) and takes one step, whose kept claims quote every output. One of them that lost
    its lease meanwhile is kept aside as late, and the others are recorded all the same."""
    # The lost task's retry waits past the step (a drawn back-off can be shorter than the time to it).
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 30.0)
    make_agent("researcher")
    plan = make_plan(
        {
            "a": ("researcher", []),
            "b": ("researcher", []),
            "lost": ("researcher", []),
            "d": ("researcher", ["a", "b"]),
        }
    )
    run = runs.launch(plan, cap=4)
    claims = {key: execution.claim_attempt(queued_attempt(run, key).pk, "w1") for key in ("a", "b", "lost")}
    TaskRun.objects.filter(pk=claims["lost"].task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.reap_expired() == 1
    successes = [
        attempt_ends.Success(claims["a"], "Findings of a: leases hold.", Usage(input_tokens=30, output_tokens=10)),
        attempt_ends.Success(
            claims["b"], "Findings of b: the queue is kill-safe.", Usage(input_tokens=20, output_tokens=5)
        ),
        attempt_ends.Success(claims["lost"], "stale", Usage(input_tokens=1, output_tokens=1)),
    ]
    outcomes, step = attempt_ends.complete_all(run.pk, successes, keep=2, claim_for="w1")
    assert outcomes == ["succeeded", "succeeded", "discarded"]
    assert [kept.task.subtask.key for kept in step.claims] == ["d"]
    prompt = step.claims[0].request.prompt
    assert "Findings of a: leases hold." in prompt and "Findings of b: the queue is kill-safe." in prompt
    run.refresh_from_db()
    tasks = {task.subtask.key: task for task in run.tasks.select_related("subtask")}
    assert (tasks["a"].state, tasks["b"].state, tasks["d"].state) == (State.SUCCEEDED, State.SUCCEEDED, State.RUNNING)
    assert tasks["lost"].output != "stale"
    costs = [Attempt.objects.get(pk=claims[key].attempt.pk).cost_usd for key in ("a", "b", "lost")]
    assert costs == [priced_limit.cost(30, 10), priced_limit.cost(20, 5), priced_limit.cost(1, 1)]
    assert run.cost_usd == sum(costs) and (run.input_tokens, run.output_tokens) == (51, 16)
    assert run.reserved_usd == Attempt.objects.get(task_run=tasks["d"]).reserved_usd  # d's alone
    assert Event.objects.filter(run=run, type="task.succeeded").count() == 2
