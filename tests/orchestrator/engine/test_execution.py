"""One attempt in a worker, run in this process: claim, stream, record, fail, time out, discard."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import execution, reaper, runs
from orchestrator.models import Attempt, Event, ProviderLimit, TaskRun
from tests.conftest import fast_latency

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


def queued_attempt(run, key: str) -> Attempt:
    return Attempt.objects.get(task_run__run=run, task_run__subtask__key=key, state=Attempt.State.QUEUED)


def test_a_successful_attempt_records_output_usage_and_cost(make_agent, make_plan, priced_limit):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    assert execution.execute_attempt(attempt.pk) == "succeeded"
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
    assert run.reserved_usd == Decimal("0")
    assert run.status == "succeeded"


def test_an_attempt_is_claimed_only_once(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    assert execution.execute_attempt(attempt.pk) == "succeeded"
    assert execution.execute_attempt(attempt.pk) == "not claimed"  # a second broker delivery
    assert Attempt.objects.filter(task_run__run=run).count() == 1


def test_timeout_retries_then_fails_and_skips_downstream(make_agent, make_plan):
    make_agent("researcher", provider_options={"hang": True}, timeout_s=1, max_retries=1)
    make_agent("writer")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "x": ("writer", [])}))
    execution.execute_attempt(queued_attempt(run, "x").pk)
    first = queued_attempt(run, "a")
    assert execution.execute_attempt(first.pk) == "retry scheduled"
    first.refresh_from_db()
    assert first.state == "timed_out" and "timed out after 1 s" in first.error
    task = TaskRun.objects.get(pk=first.task_run_id)
    assert task.state == State.READY and task.not_before is not None and task.fault_count == 1
    TaskRun.objects.filter(pk=task.pk).update(not_before=timezone.now())  # the backoff has passed
    reaper.tick()
    assert execution.execute_attempt(queued_attempt(run, "a").pk) == "failed"
    run.refresh_from_db()
    assert dict(run.tasks.values_list("subtask__key", "state")) == {"a": "failed", "b": "skipped", "x": "succeeded"}
    assert run.tasks.get(subtask__key="b").error == "upstream a did not succeed"
    assert run.status == "failed" and "timed out" in run.summary


def test_a_rate_limit_answer_backs_off_the_provider_without_spending_retries(make_agent, make_plan):
    options = {**fast_latency(0.05), "server_limit": {"requests_per_minute": 1}}
    make_agent("researcher", provider_options=options, max_retries=0)
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", [])}), cap=2)
    outcomes = [execution.execute_attempt(queued_attempt(run, key).pk) for key in ("a", "b")]
    assert sorted(outcomes) == ["retry scheduled", "succeeded"]
    limited = run.tasks.get(state=State.READY)
    assert limited.fault_count == 0  # a 429 is not the task's fault
    assert limited.not_before > timezone.now()
    limit = ProviderLimit.objects.get(provider="simulated", model="sim-1")
    assert limit.backoff_until > timezone.now()
    event = Event.objects.get(run=run, type="provider.backoff")
    assert event.payload["status"] == 429 and event.payload["retry_after_s"] >= 1


def test_a_late_result_from_a_lost_attempt_is_discarded(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    claim = execution.claim_attempt(attempt.pk, "worker-that-stalls")
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.reap_expired() == 1
    attempt.refresh_from_db()
    assert attempt.state == "lost"
    outcome = execution.complete(claim, "stale output", execution.Usage(input_tokens=5, output_tokens=7))
    assert outcome == "discarded"
    attempt.refresh_from_db()
    task = TaskRun.objects.get(pk=claim.task.pk)
    assert attempt.late_result_discarded and task.output != "stale output"
    assert task.state == State.READY and task.not_before is not None  # a retry after a short backoff
    TaskRun.objects.filter(pk=task.pk).update(not_before=timezone.now())
    reaper.tick()
    task.refresh_from_db()
    assert task.state == State.QUEUED and task.attempt_count == 2  # retried as a new attempt
    assert Event.objects.filter(run=run, type="attempt.lost").count() == 1
    assert Event.objects.filter(run=run, type="attempt.late_result_discarded").count() == 1


def test_cancelling_a_run_stops_its_running_attempt_at_the_next_beat(make_agent, make_plan):
    make_agent("researcher", provider_options={"hang": True}, timeout_s=30)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    claim = execution.claim_attempt(attempt.pk, "w1")
    runs.cancel(run)
    assert execution.run_claimed(claim) == "cancelled"
    attempt.refresh_from_db()
    assert attempt.state == "cancelled"
    assert TaskRun.objects.get(pk=claim.task.pk).state == State.CANCELLED


def test_a_queued_attempt_nobody_claimed_is_handed_to_the_broker_again(make_agent, make_plan, broker):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    assert broker.queue_size() == 1
    broker.purge_queue()  # the broker lost it
    run.tasks.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.requeue_stale() == 1
    assert broker.queue_size() == 1
    assert Event.objects.filter(run=run, type="attempt.requeued").count() == 1


def test_a_worker_runs_the_downstream_task_it_admitted_itself(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("researcher", ["b"])}))
    assert execution.execute_attempt(queued_attempt(run, "a").pk) == "succeeded"
    run.refresh_from_db()
    assert run.status == "succeeded"
    workers = set(Attempt.objects.filter(task_run__run=run).values_list("worker", flat=True))
    assert workers == {execution.worker_name()}


def test_claiming_the_next_task_can_be_turned_off(make_agent, make_plan, settings):
    settings.GLASSBOX_CLAIM_NEXT = False
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    execution.execute_attempt(queued_attempt(run, "a").pk)
    assert dict(run.tasks.values_list("subtask__key", "state")) == {"a": "succeeded", "b": "queued"}


def test_the_task_a_worker_runs_itself_never_goes_through_the_broker(make_agent, make_plan, broker):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("researcher", ["b"])}))
    broker.purge_queue()  # this test plays the worker that took a's delivery
    assert execution.execute_attempt(queued_attempt(run, "a").pk) == "succeeded"
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert broker.queue_size() == 0  # b and c were run by the same worker, never enqueued


def test_an_attempt_kept_for_the_worker_goes_to_the_broker_if_claiming_it_fails(
    make_agent, make_plan, broker, monkeypatch
):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    broker.purge_queue()
    real_claim = execution.claim_attempt
    calls = []

    def claim_then_fail(attempt_id, worker):
        calls.append(attempt_id)
        if len(calls) > 1:
            raise RuntimeError("database went away")
        return real_claim(attempt_id, worker)

    monkeypatch.setattr(execution, "claim_attempt", claim_then_fail)
    with pytest.raises(RuntimeError, match="database went away"):
        execution.execute_attempt(queued_attempt(run, "a").pk)
    assert broker.queue_size() == 1
    assert queued_attempt(run, "b").pk == calls[1]
