"""The production profile survives a Redis restart mid-run: what the broker lost, the reaper re-queues.

django-q2's Redis broker is at-most-once: a restarted Redis (without persistence) forgets every
task still in its list, and while it is down a worker that admits the next task cannot enqueue
it. Neither is a loss for Glassbox: the attempt is `queued` in the database with a short queue
lease, and the reaper hands it to the broker again once the lease runs out
(GLASSBOX_QUEUED_GRACE_S); while Redis is still down those attempts fail and are tried again at
the next tick. A lost attempt may also be taken before its lease runs out by a host claiming a
delivery of its run (execution.claim_attempts takes queued attempts of the same run while it has
room): the attempt row is the record, the broker only delivers.
"""

from __future__ import annotations

import os
import signal

import pytest
from django_q.signing import SignedPackage

from orchestrator.engine import runs
from orchestrator.models import Attempt, Event
from tests.conftest import fast_latency, wait_for_run, wait_until
from tests.orchestrator.engine.test_processes import assert_each_task_succeeded_exactly_once, no_task_ran_twice_at_once
from tests.services.conftest import queue_key

pytestmark = [pytest.mark.services, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

GRACE_S = 3


def attempt_ids_in(payloads: list[bytes]) -> set[int]:
    """The attempts whose q2 tasks these broker entries are (`execute_attempt(attempt_id)`)."""
    return {SignedPackage.loads(payload)["args"][0] for payload in payloads}


def requeued(attempt: Attempt) -> bool:
    return Event.objects.filter(
        type="attempt.requeued", task_run_id=attempt.task_run_id, payload__attempt=attempt.number
    ).exists()


def test_tasks_lost_in_a_redis_restart_are_requeued_by_the_reaper_and_the_run_completes(
    qcluster, own_redis, broker_at, make_agent, make_plan, settings
):
    broker_at(own_redis.url)
    settings.GLASSBOX_QUEUED_GRACE_S = GRACE_S  # admissions made in this process
    qcluster.env.update(REDIS_URL=own_redis.url, GLASSBOX_QUEUED_GRACE_S=str(GRACE_S))
    qcluster.workers = 1  # q2 then holds at most a couple of tasks in memory: the rest wait in Redis
    qcluster.env.update(GLASSBOX_SLOTS_PER_WORKER="2")  # and its agent host takes two at a time
    make_agent("researcher", max_concurrency=10, provider_options=fast_latency(0.8))
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(10)})
    cluster = qcluster.start()
    run = runs.launch(plan, cap=8)
    wait_until(lambda: Attempt.objects.filter(task_run__run=run, state="running").exists(), 60, "a running attempt")

    # Freeze the cluster so that its pusher takes nothing more while we look and pull the plug.
    os.killpg(cluster.pid, signal.SIGSTOP)
    try:
        delivering = attempt_ids_in(own_redis.client().lrange(queue_key(), 0, -1))
        # Those a host has not taken with an earlier delivery of their run (see the docstring).
        lost = set(Attempt.objects.filter(pk__in=delivering, state="queued").values_list("pk", flat=True))
        before_outage = set(Attempt.objects.filter(task_run__run=run).values_list("pk", flat=True))
        own_redis.kill()
    finally:
        os.killpg(cluster.pid, signal.SIGCONT)
    assert lost, "the scenario needs tasks waiting in Redis when it goes down"

    # While Redis is down, the work goes on: a worker finishes its task and admits the next one.
    wait_until(
        lambda: Attempt.objects.filter(task_run__run=run).exclude(pk__in=before_outage).exists(),
        60,
        "an admission while Redis is down",
    )
    admitted_in_outage = set(
        Attempt.objects.filter(task_run__run=run).exclude(pk__in=before_outage).values_list("pk", flat=True)
    )
    own_redis.start()  # empty: it persisted nothing

    run = wait_for_run(run, 180, qcluster)

    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert no_task_ran_twice_at_once(run)
    lost_attempts = list(Attempt.objects.filter(pk__in=lost))
    # Each ran as its task's only attempt: handed to the broker again, or claimed with a later
    # delivery of its run by a host that had room; never declared lost and retried.
    for attempt in lost_attempts:
        assert attempt.state == Attempt.State.SUCCEEDED, (attempt.pk, attempt.state, attempt.error)
    assert any(requeued(attempt) for attempt in lost_attempts), (
        "no attempt lost with Redis was handed to the broker again: the reaper's path did not run"
    )
    # Admitted while Redis was down: run by the worker that admitted it (it keeps one for itself)
    # or, when its enqueue failed, re-queued like the lost ones. Either way, it succeeded.
    for attempt in Attempt.objects.filter(pk__in=admitted_in_outage):
        assert attempt.state == Attempt.State.SUCCEEDED, (attempt.pk, attempt.state, attempt.error)
