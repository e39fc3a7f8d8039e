"""The reaper: a killed worker's attempts are declared lost and retried, exactly once each, a run's
attempts together in one transaction (its lock taken once per batch), their saved usage kept. A
lost attempt spends none of its task's retries; GLASSBOX_MAX_LOST_ATTEMPTS bounds them apart."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import attempt_ends, execution, reaper, retries, runs, scheduler
from orchestrator.models import Agent, Attempt, Event, ProviderLimit, Run, TaskRun
from orchestrator.providers.base import Usage

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def retries_wait(monkeypatch):
    """A retry waits 30 s: with the backoff's jitter (anything from 0) the reaper's own pass
    sometimes admitted a retry at once, and a task read "queued" where the test read it ready."""
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: max(30.0, retry_after or 0.0))


def running_wave(make_agent, make_plan, count: int):
    """A run of `count` independent tasks, every one running on worker "w1"; their claims."""
    make_agent("researcher", max_concurrency=count, max_retries=2)
    run = runs.launch(make_plan({f"t{n:02d}": ("researcher", []) for n in range(count)}), cap=count, budget_usd="100")
    queued = Attempt.objects.filter(task_run__run=run, state=Attempt.State.QUEUED).values_list("pk", flat=True)
    claims = list(execution.claim_attempts(list(queued), "w1").values())
    assert len(claims) == count
    return run, claims


def expire(claims) -> None:
    """The worker was killed: nothing renews these leases any more, and they run out."""
    ids = [claim.task.pk for claim in claims]
    TaskRun.objects.filter(pk__in=ids).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def count_run_locks(monkeypatch) -> list[int]:
    taken: list[int] = []
    real = scheduler.lock_run

    def lock_run(run_id: int):
        taken.append(run_id)
        return real(run_id)

    monkeypatch.setattr(scheduler, "lock_run", lock_run)
    return taken


def test_a_killed_workers_attempts_of_one_run_are_lost_and_retried_once_each_in_one_pass(
    make_agent, make_plan, priced_limit, monkeypatch
):
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 30.0)  # no retry starts here
    run, claims = running_wave(make_agent, make_plan, 60)
    # What its host saved before it died: every attempt used something.
    execution.save_progress(
        [
            (c, execution.Progress("so far", 10, Usage(input_tokens=10 + n, output_tokens=n)))
            for n, c in enumerate(claims)
        ]
    )
    expire(claims)
    locks = count_run_locks(monkeypatch)

    assert reaper.reap_expired() == 60
    assert locks == [run.pk]  # one transaction for the run, not one per attempt
    assert reaper.reap_expired() == 0  # a second pass (another process's tick) finds nothing

    attempts = Attempt.objects.filter(task_run__run=run, number=1)
    assert set(attempts.values_list("state", flat=True)) == {Attempt.State.LOST}
    assert set(attempts.values_list("error", flat=True)) == {"lease expired: worker w1 stopped responding"}
    tasks = TaskRun.objects.filter(run=run)
    # A worker's death is not the task's fault: no retry spent, one lost attempt counted.
    assert set(tasks.values_list("state", "attempt_count", "fault_count", "lost_count")) == {(State.READY, 1, 0, 1)}
    assert all(task.not_before is not None and "w1 stopped responding" in task.error for task in tasks)
    for kind in ("attempt.lost", "task.retry_scheduled"):
        per_task = Event.objects.filter(run=run, type=kind).values_list("task_run_id", flat=True)
        assert sorted(per_task) == sorted(c.task.pk for c in claims), kind
    # The usage their host saved is kept on each attempt and counted once, on the task and the run.
    run.refresh_from_db()
    assert (run.input_tokens, run.output_tokens) == (sum(10 + n for n in range(60)), sum(range(60)))
    assert run.reserved_usd == 0 and run.cost_usd == sum(a.cost_usd for a in attempts)
    for n, claim in enumerate(claims):
        task = tasks.get(pk=claim.task.pk)
        assert (task.input_tokens, task.output_tokens) == (10 + n, n)

    # Their retries: new attempts, one per task, once the back-off has passed.
    tasks.update(not_before=timezone.now())
    reaper.tick()
    assert Attempt.objects.filter(task_run__run=run, number=2).count() == 60
    assert Attempt.objects.filter(task_run__run=run).count() == 120


def test_a_run_with_more_expired_attempts_than_a_batch_is_reaped_in_batches(make_agent, make_plan, monkeypatch):
    monkeypatch.setattr(reaper, "REAP_BATCH", 4)
    run, claims = running_wave(make_agent, make_plan, 10)
    expire(claims)
    locks = count_run_locks(monkeypatch)
    assert reaper.reap_expired() == 10
    assert locks == [run.pk] * 3
    assert Event.objects.filter(run=run, type="attempt.lost").count() == 10


def test_an_attempt_that_heartbeated_after_the_reaper_looked_is_left_alone(make_agent, make_plan, monkeypatch):
    """The reaper lists the expired leases, then locks the run: a lease renewed in between is no
    longer expired when it looks again under the lock, and that attempt keeps running."""
    run, claims = running_wave(make_agent, make_plan, 3)
    expire(claims)
    real = scheduler.lock_run

    def renew_first_then_lock(run_id: int):
        execution.renew_leases("w1", [claims[0].task.pk])
        return real(run_id)

    monkeypatch.setattr(scheduler, "lock_run", renew_first_then_lock)
    assert reaper.reap_expired() == 2
    alive = TaskRun.objects.get(pk=claims[0].task.pk)
    assert alive.state == State.RUNNING and alive.lease_owner == "w1"
    assert Attempt.objects.get(task_run=alive, number=1).state == Attempt.State.RUNNING
    assert not Event.objects.filter(task_run=alive, type="attempt.lost").exists()


def test_under_fail_fast_the_first_task_out_of_lost_attempts_stops_the_run_and_the_others_are_cancelled(
    make_agent, make_plan, settings
):
    settings.GLASSBOX_MAX_LOST_ATTEMPTS = 1
    make_agent("researcher", max_concurrency=3, max_retries=2)
    run = runs.launch(
        make_plan({key: ("researcher", []) for key in ("a", "b", "c")}),
        cap=3,
        failure_policy=Run.FailurePolicy.FAIL_FAST,
    )
    queued = Attempt.objects.filter(task_run__run=run).values_list("pk", flat=True)
    claims = list(execution.claim_attempts(list(queued), "w1").values())
    expire(claims)
    assert reaper.reap_expired() == 3
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    states = sorted(TaskRun.objects.filter(run=run).values_list("state", flat=True))
    assert states == [State.CANCELLED, State.CANCELLED, State.FAILED]
    # Every attempt of the dead worker is lost, said once, and holds nothing of the budget.
    assert set(Attempt.objects.filter(task_run__run=run).values_list("state", flat=True)) == {Attempt.State.LOST}
    assert Event.objects.filter(run=run, type="attempt.lost").count() == 3
    assert Event.objects.filter(run=run, type="task.failed").count() == 1
    assert run.reserved_usd == 0


def test_a_lost_attempt_is_priced_at_the_model_it_ran_with_not_its_agents_model_now(make_agent, make_plan):
    """The agent moved to a dearer model while its attempt ran: the tokens the lost attempt used
    cost what the model it asked costs, on the attempt, its task and its run."""
    ProviderLimit.objects.create(
        provider="simulated", model="sim-1", input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
    )
    ProviderLimit.objects.create(
        provider="simulated", model="sim-2", input_price_per_mtok=Decimal("300"), output_price_per_mtok=Decimal("1500")
    )
    run, (claim,) = running_wave(make_agent, make_plan, 1)
    Agent.objects.filter(name="researcher").update(model="sim-2")
    execution.save_progress([(claim, execution.Progress("so far", 10, Usage(input_tokens=1_000, output_tokens=100)))])
    expire([claim])

    assert reaper.reap_expired() == 1

    attempt = Attempt.objects.get(task_run=claim.task, number=1)
    assert attempt.state == Attempt.State.LOST and attempt.request["model"] == "sim-1"
    at_sim_1 = Decimal("0.0045")  # 1,000 × $3 + 100 × $15, per million tokens
    assert attempt.cost_usd == at_sim_1
    run.refresh_from_db()
    assert TaskRun.objects.get(pk=claim.task.pk).cost_usd == at_sim_1
    assert run.cost_usd == at_sim_1


def lose(run: Run, task: TaskRun) -> TaskRun:
    """The worker running `task` dies and its lease runs out: the reaper's pass. The task now."""
    TaskRun.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    reaper.tick()
    return TaskRun.objects.get(pk=task.pk)


def claim_next(run: Run, task: TaskRun) -> execution.Claim:
    """The retry of `task`, once its back-off has passed: admitted and claimed by worker "w1"."""
    TaskRun.objects.filter(pk=task.pk).update(not_before=timezone.now())
    scheduler.advance(run.pk)
    task.refresh_from_db()
    claim = execution.claim_attempt(Attempt.objects.get(task_run=task, number=task.attempt_count).pk, "w1")
    assert claim is not None
    return claim


def lose_and_claim_again(run: Run, task: TaskRun) -> TaskRun:
    """`lose` its attempt, then claim its retry when it was retried (`claim_next`). The task now."""
    task = lose(run, task)
    return claim_next(run, task).task if task.state == State.READY else task


def test_a_lost_attempt_spends_no_retry_and_the_task_fails_at_its_third_lost_attempt_saying_why(
    make_agent, make_plan, settings
):
    """The reviewer's run: an agent with max_retries 0 and a qcluster killed under it. Its task said
    "retried when its lease runs out" and then failed "after 1 attempt", its downstream skipped: a
    worker's crash spent the task's only attempt. Now a lost attempt is retried without spending a
    retry, up to GLASSBOX_MAX_LOST_ATTEMPTS (3) lost attempts, and then the task fails saying so."""
    assert settings.GLASSBOX_MAX_LOST_ATTEMPTS == 3  # the default
    make_agent("researcher", max_retries=0)
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "w1")
    assert claim is not None
    task = claim.task

    task = lose_and_claim_again(run, task)
    assert (task.state, task.attempt_count, task.fault_count, task.lost_count) == (State.RUNNING, 2, 0, 1)
    task = lose_and_claim_again(run, task)
    assert (task.state, task.attempt_count, task.fault_count, task.lost_count) == (State.RUNNING, 3, 0, 2)
    task = lose_and_claim_again(run, task)

    assert (task.state, task.attempt_count, task.lost_count) == (State.FAILED, 3, 3)
    assert task.error == (
        "lease expired: worker w1 stopped responding, after 3 attempts "
        "(no retry left: 3 attempts lost, the most GLASSBOX_MAX_LOST_ATTEMPTS allows)"
    )
    assert [a.state for a in Attempt.objects.filter(task_run=task)] == [Attempt.State.LOST] * 3
    assert Event.objects.get(run=run, type="task.failed").message == task.error
    assert run.tasks.get(subtask__key="b").state == State.SKIPPED
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED


def test_the_lost_attempts_and_the_retries_are_two_budgets(make_agent, make_plan, settings):
    """A lost attempt leaves the task's own retries whole, and its own failures leave its lost
    attempts whole: with max_retries 0, a task whose worker died still fails at its first failure of
    its own; a person's retry of a failed task gives both back."""
    settings.GLASSBOX_MAX_LOST_ATTEMPTS = 2
    make_agent("researcher", max_retries=0)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "w1")
    assert claim is not None
    task = lose(run, claim.task)
    assert (task.state, task.fault_count, task.lost_count) == (State.READY, 0, 1)

    claim = claim_next(run, task)
    assert attempt_ends.fail(claim, "the model refused") == "failed"
    task.refresh_from_db()
    assert (task.state, task.fault_count, task.lost_count) == (State.FAILED, 1, 1)
    assert task.error == "the model refused, after 2 attempts"

    runs.retry_task(task)
    task.refresh_from_db()
    assert (task.fault_count, task.lost_count) == (0, 0)
    task = lose(run, claim_next(run, task).task)  # its first lost attempt again: retried
    assert (task.state, task.lost_count) == (State.READY, 1)


def test_an_attempt_of_a_task_cancelled_under_a_killed_worker_is_declared_lost_with_its_usage(make_agent, make_plan):
    """The run was cancelled, then its worker killed before its next beat: nothing ever ended the
    attempt, and the run page said "1 attempt still stopping" for good."""
    from orchestrator.readmodels.totals import attempts_stopping

    run, (claim,) = running_wave(make_agent, make_plan, 1)
    execution.save_progress([(claim, execution.Progress("Half a", 10, Usage(input_tokens=300, output_tokens=40)))])
    runs.cancel(run)
    assert attempts_stopping(run) == 1
    assert reaper.reap_orphans() == 0  # its worker may still be beating: it stops at its next beat
    Attempt.objects.filter(pk=claim.attempt.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    assert reaper.tick()["orphans"] == 1
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    assert attempt.state == Attempt.State.LOST and attempt.finished_at is not None
    assert attempt.error == "lease expired: worker w1 stopped responding after its task was cancelled"
    task, run = TaskRun.objects.get(pk=claim.task.pk), Run.objects.get(pk=run.pk)
    assert task.state == State.CANCELLED  # the task keeps its end
    assert (task.input_tokens, task.output_tokens) == (300, 40) == (run.input_tokens, run.output_tokens)
    assert attempts_stopping(run) == 0
    assert Event.objects.filter(run=run, type="attempt.lost").count() == 1
    assert reaper.reap_orphans() == 0  # exactly once


def test_a_running_attempt_of_a_running_task_is_left_to_the_lease_not_to_the_orphans(make_agent, make_plan):
    run, (claim,) = running_wave(make_agent, make_plan, 1)
    Attempt.objects.filter(pk=claim.attempt.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    assert reaper.reap_orphans() == 0
    assert Attempt.objects.get(pk=claim.attempt.pk).state == Attempt.State.RUNNING
