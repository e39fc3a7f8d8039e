"""An attempt's records while it runs, in this process: claims (one or many), leases, saved progress."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import execution, reaper, runs
from orchestrator.models import Attempt, Event, TaskRun
from orchestrator.providers.base import Usage
from tests.conftest import run_attempt

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


def queued_attempt(run, key: str) -> Attempt:
    return Attempt.objects.get(task_run__run=run, task_run__subtask__key=key, state=Attempt.State.QUEUED)


def test_an_attempt_is_claimed_only_once(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = queued_attempt(run, "a")
    assert run_attempt(attempt.pk) == "succeeded"
    assert run_attempt(attempt.pk) == "not claimed"  # a second broker delivery
    assert Attempt.objects.filter(task_run__run=run).count() == 1


def test_a_claim_does_not_take_the_run_row(make_agent, make_plan, django_assert_max_num_queries):
    """Claims are the hottest write of a busy run: attempt and task rows only (DESIGN §9)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    with CaptureQueriesContext(connection) as queries:
        assert execution.claim_attempt(queued_attempt(run, "a").pk, "w1") is not None
    statements = [q["sql"] for q in queries.captured_queries]
    assert not any('"orchestrator_run"' in sql.split("WHERE")[0] and "UPDATE" in sql for sql in statements)
    assert not any("FOR UPDATE" in sql for sql in statements)


def test_progress_of_many_attempts_is_saved_together_and_only_where_the_lease_is_held(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({k: ("researcher", []) for k in "abc"}), cap=3)
    claims = {k: execution.claim_attempt(queued_attempt(run, k).pk, "w1") for k in "abc"}
    TaskRun.objects.filter(pk=claims["b"].task.pk).update(lease_owner="another worker")  # b's lease was taken
    Attempt.objects.filter(pk=claims["c"].attempt.pk).update(state="lost")  # c was declared lost
    execution.save_progress(
        [
            (claims[k], execution.Progress(f"{k} so far", n, Usage(input_tokens=n, output_tokens=n + 1)))
            for k, n in zip("abc", (10, 20, 30), strict=True)
        ]
    )
    tasks = {t.subtask.key: t for t in TaskRun.objects.filter(run=run).select_related("subtask")}
    attempts = {
        a.task_run.subtask.key: a for a in Attempt.objects.filter(task_run__run=run).select_related("task_run__subtask")
    }
    assert (tasks["a"].output, tasks["a"].progress, tasks["a"].progress_at is not None) == ("a so far", 10, True)
    assert (attempts["a"].input_tokens, attempts["a"].output_tokens) == (10, 11)
    assert (tasks["b"].output, tasks["b"].progress) == ("", 0)  # not its attempt's any more: output left alone
    assert (attempts["b"].input_tokens, attempts["b"].output_tokens) == (20, 21)  # the usage is the attempt's own
    assert (tasks["c"].output, attempts["c"].input_tokens) == ("", 0)  # a lost attempt saves nothing
    assert Event.objects.filter(run=run, type__startswith="task.progress").count() == 0


def test_saved_progress_reaches_the_task_row_without_an_event(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(queued_attempt(run, "a").pk, "w1")
    events_before = Event.objects.filter(run=run).count()
    execution.save_progress([(claim, execution.Progress("half of it", 50, Usage(input_tokens=20, output_tokens=9)))])
    task = TaskRun.objects.get(pk=claim.task.pk)
    assert (task.output, task.progress) == ("half of it", 50) and task.progress_at is not None
    assert Attempt.objects.get(pk=claim.attempt.pk).output_tokens == 9
    assert Event.objects.filter(run=run).count() == events_before


def test_a_queued_attempt_nobody_claimed_is_handed_to_the_broker_again(make_agent, make_plan, broker):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    assert broker.queue_size() == 1
    broker.purge_queue()  # the broker lost it
    run.tasks.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.requeue_stale() == 1
    assert broker.queue_size() == 1
    assert Event.objects.filter(run=run, type="attempt.requeued").count() == 1


def claim_statements(attempt_ids: list[int]) -> tuple[dict, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        claims = execution.claim_attempts(attempt_ids, "w1")
    return claims, len(queries)


def test_attempts_delivered_together_are_claimed_in_one_transaction(make_agent, make_plan):
    make_agent("researcher")
    plan = make_plan({"root": ("researcher", []), **{f"c{i}": ("researcher", ["root"]) for i in range(4)}})
    run = runs.launch(plan, cap=8)
    assert run_attempt(queued_attempt(run, "root").pk) == "succeeded"
    run.refresh_from_db()
    ids = list(Attempt.objects.filter(task_run__run=run, state=Attempt.State.QUEUED).values_list("pk", flat=True))
    assert len(ids) == 4
    pair, pair_statements = claim_statements(ids[:2])
    rest, rest_statements = claim_statements(ids[2:] + ids[:2])  # the first two are not ours any more
    assert set(pair) == set(ids[:2]) and set(rest) == set(ids[2:])
    assert pair_statements == rest_statements  # the same transaction for two claims or more
    for claim in {**pair, **rest}.values():
        attempt = Attempt.objects.get(pk=claim.attempt.pk)
        task = TaskRun.objects.get(pk=claim.task.pk)
        assert (attempt.state, attempt.worker, task.state, task.lease_owner) == ("running", "w1", "running", "w1")
        assert attempt.request["prompt"] == claim.request.prompt  # each attempt keeps its own request
        assert claim.task.subtask.title in claim.request.prompt
        root_output = TaskRun.objects.get(run=run, subtask__key="root").output
        assert " ".join(root_output.split()[:8]) in claim.request.prompt  # the upstream's output, quoted
    started = Event.objects.filter(run=run, type="task.started", payload__worker="w1")
    assert sorted(started.values_list("task_run_id", flat=True)) == sorted(c.task.pk for c in {**pair, **rest}.values())


def test_a_task_cancelled_before_its_claim_is_left_out_of_a_claim_of_many(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({k: ("researcher", []) for k in "abc"}), cap=3)
    attempts = {key: queued_attempt(run, key) for key in "abc"}
    TaskRun.objects.filter(pk=attempts["b"].task_run_id).update(state=State.CANCELLED)
    claims = execution.claim_attempts([a.pk for a in attempts.values()], "w1")
    assert set(claims) == {attempts["a"].pk, attempts["c"].pk}
    states = dict(Attempt.objects.filter(task_run__run=run).values_list("task_run__subtask__key", "state"))
    assert states == {"a": "running", "b": "queued", "c": "running"}  # b: never claimed


def test_a_claim_of_many_that_fails_in_the_database_claims_each_alone(make_agent, make_plan, monkeypatch):
    from django.db import OperationalError

    make_agent("researcher")
    run = runs.launch(make_plan({k: ("researcher", []) for k in "ab"}), cap=2)
    ids = [queued_attempt(run, key).pk for key in "ab"]

    claim = execution._claim

    def deadlocked_when_many(attempt_ids, worker, more=0, pending=()):
        if len(attempt_ids) > 1 or more:
            raise OperationalError("deadlock detected")
        return claim(attempt_ids, worker)

    monkeypatch.setattr(execution, "_claim", deadlocked_when_many)
    assert set(execution.claim_attempts(ids, "w1", more=5)) == set(ids)
    assert set(Attempt.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"running"}


def test_a_claim_ahead_leaves_what_the_caller_has_delivered_and_waiting(make_agent, make_plan):
    make_agent("researcher")
    run = runs.launch(make_plan({k: ("researcher", []) for k in "abcd"}), cap=4)
    a, b, c, d = (queued_attempt(run, k).pk for k in "abcd")
    claims = execution.claim_attempts([a], "w1", more=3, pending=[b])
    assert set(claims) == {a, c, d}  # b is the caller's next claim to make
    assert Attempt.objects.get(pk=b).state == "queued"


def test_a_failure_after_a_claims_writes_rolls_them_back_before_each_is_claimed_alone(
    make_agent, make_plan, monkeypatch
):
    """Nothing is left running with nobody to run it: a batch that fails at its last read is
    rolled back whole, and each delivery is then claimed alone (the wave's rest stays queued)."""
    from django.db import OperationalError

    make_agent("researcher")
    run = runs.launch(make_plan({k: ("researcher", []) for k in "abcd"}), cap=4)
    a, b, c, d = (queued_attempt(run, k).pk for k in "abcd")
    real = execution.agents_with_tool_grants
    failures = [OperationalError("server closed the connection unexpectedly")]

    def failing_once(agent_ids):
        if failures:
            raise failures.pop()
        return real(agent_ids)

    monkeypatch.setattr(execution, "agents_with_tool_grants", failing_once)
    claims = execution.claim_attempts([a, b], "w1", more=2)
    assert set(claims) == {a, b}
    states = dict(Attempt.objects.filter(pk__in=[a, b, c, d]).values_list("pk", "state"))
    assert states == {a: "running", b: "running", c: "queued", d: "queued"}
    assert Event.objects.filter(run=run, type="task.started").count() == 2
