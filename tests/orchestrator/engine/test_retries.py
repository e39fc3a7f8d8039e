"""What a failure leads to: the retry's backoff, and a fail_fast run stopped at its first failure
(retries and the provider's back-off through attempts' ends: test_attempt_ends.py, test_adaptive.py)."""

from __future__ import annotations

import pytest

from orchestrator.engine import attempt_ends, execution, retries, runs
from orchestrator.models import Attempt, Event, Run, TaskRun
from orchestrator.providers.base import ProviderError
from orchestrator.readmodels.tasks import task_views

State = TaskRun.State


def test_the_backoff_doubles_with_each_fault_up_to_its_ceiling_and_never_precedes_retry_after(settings):
    settings.GLASSBOX_RETRY_BASE_S = 1.0
    settings.GLASSBOX_RETRY_MAX_S = 6.0
    for faults, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 6.0), (9, 6.0)):
        draws = [retries.backoff_seconds(faults, None) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in draws) and max(draws) > ceiling / 2  # full jitter over [0, ceiling]
    assert all(retries.backoff_seconds(1, 30.0) == 30.0 for _ in range(50))  # the provider's Retry-After first


@pytest.mark.django_db
def test_a_fail_fast_run_stops_at_its_first_failure_and_cancels_the_rest(make_agent, make_plan, no_broker):
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", ["a", "b"])})
    run = runs.launch(plan, cap=4, failure_policy=Run.FailurePolicy.FAIL_FAST)
    attempt = Attempt.objects.get(task_run__run=run, task_run__subtask__key="a")
    claim = execution.claim_attempt(attempt.pk, "w1")
    assert attempt_ends.fail(claim, "bad options", error=ProviderError("bad options", retryable=False)) == "failed"
    run.refresh_from_db()
    states = dict(run.tasks.values_list("subtask__key", "state"))
    assert run.status == Run.Status.FAILED
    assert run.summary.startswith("stopped at the first failure (fail_fast): a: bad options")
    assert states == {"a": State.FAILED, "b": State.CANCELLED, "c": State.CANCELLED}
    assert run.tasks.get(subtask__key="b").error == "run stopped: a failed (fail_fast)"


@pytest.mark.django_db
def test_skipping_the_task_that_stopped_a_fail_fast_run_lets_the_stopped_work_go_on(
    make_agent, make_plan, no_broker, personas
):
    """A person skips the failure that stopped a fail_fast run: the work it stopped goes on without
    it, as after a retry. The run reopened and ended at once, "failed" with the summary "0 of 3
    tasks failed; 1 skipped by a person", b and c still "run stopped: a failed (fail_fast)"."""
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", ["a", "b"])})
    run = runs.launch(plan, cap=4, failure_policy=Run.FailurePolicy.FAIL_FAST)
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run, task_run__subtask__key="a").pk, "w1")
    attempt_ends.fail(claim, "bad options", error=ProviderError("bad options", retryable=False))
    runs.skip_task(run.tasks.get(subtask__key="a"), user=personas["launcher"])
    run.refresh_from_db()
    tasks = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    assert run.status == Run.Status.RUNNING
    assert (tasks["b"].state, tasks["b"].error) == (State.QUEUED, "")
    assert (tasks["c"].state, tasks["c"].error) == (State.PENDING, "")
    said = dict(Event.objects.filter(run=run, type="task.reset").values_list("task_run__subtask__key", "message"))
    assert said == {"b": "waits again: a skipped by a person", "c": "waits again: a skipped by a person"}


@pytest.mark.django_db
def test_a_task_waiting_for_its_retry_says_from_when_not_a_countdown_that_stays(
    make_agent, make_plan, no_broker, settings
):
    """A killed worker's tasks said "held back · retrying in 0.2 s after: lease expired…" on the
    run page and in run_status for seconds after those 0.2 s had passed: the reason is written
    once, so a countdown in it stops being true at once. It names the moment the retry is due."""
    settings.GLASSBOX_RETRY_BASE_S = 30.0
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "vm:19929")
    lost = "lease expired: worker vm:19929 stopped responding"
    assert attempt_ends.fail(claim, lost, error=ProviderError(lost, retryable=True)) == "retry scheduled"
    (row,) = task_views(run)  # what the page's row and run_status say
    task = TaskRun.objects.get(pk=row.pk)
    assert row.state_label == "retrying"  # its own state, not a cap's "held back"
    assert row.wait_reason == f"retrying from {task.not_before:%H:%M:%S} UTC after: {lost}"
