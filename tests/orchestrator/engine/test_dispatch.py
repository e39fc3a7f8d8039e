"""Dispatch: admitted attempts kept by the host that took the step, or handed to the broker after commit."""

from __future__ import annotations

import pytest
from django.utils import timezone

from orchestrator.engine import dispatch, runs, scheduler
from orchestrator.models import TaskRun

State = TaskRun.State


@pytest.mark.django_db(transaction=True)
def test_admitted_attempts_are_enqueued_after_commit(demo_agents, make_plan, broker):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", [])})
    runs.launch(plan, cap=4)
    assert broker.queue_size() == 2


@pytest.mark.django_db(transaction=True)
def test_keep_leaves_the_first_admitted_attempts_out_of_the_broker(demo_agents, make_plan, broker):
    plan = make_plan({"a": ("researcher", []), **{k: ("researcher", ["a"]) for k in "bcd"}})
    run = runs.launch(plan, cap=4)
    broker.purge_queue()
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.SUCCEEDED, finished_at=timezone.now())
    result = scheduler.advance(run.pk, keep=2)
    assert len(result.admitted) == 3 and result.kept == result.admitted[:2]
    assert broker.queue_size() == 1  # only the attempt the caller does not run itself
    assert scheduler.advance(run.pk, keep=2).kept == []  # nothing new to admit


def test_the_host_that_admitted_keeps_all_it_has_room_for_and_always_the_next_of_a_chain():
    assert dispatch.kept_share(10, at_most=50) == 10  # all it has room for: none waits for the broker
    assert dispatch.kept_share(10, at_most=3) == 3  # no more than it has room for
    assert dispatch.kept_share(1, at_most=50) == 1  # a chain's next task never goes through the broker
    assert dispatch.kept_share(3, at_most=0) == 0  # a draining host keeps nothing


def test_attempts_are_handed_to_the_broker_through_one_broker_per_process(monkeypatch):
    import django_q.brokers
    import django_q.tasks

    built, sent = [], []

    class Recording:
        list_key = "q"

        def enqueue(self, package):
            sent.append(package)
            return len(sent)

    def get_broker(list_key=None):
        built.append(list_key)
        return Recording()

    monkeypatch.setattr(django_q.brokers, "get_broker", get_broker)
    monkeypatch.setattr(django_q.tasks, "get_broker", get_broker)
    monkeypatch.setattr(dispatch, "_broker", None)
    for attempt_id in range(10):
        dispatch.enqueue_attempt(attempt_id)
    assert (len(built), len(sent)) == (1, 10)  # not a broker (a Redis connection) per attempt
    monkeypatch.setattr(dispatch.os, "getpid", lambda: -1)  # a forked worker builds its own
    dispatch.enqueue_attempt(10)
    assert (len(built), len(sent)) == (2, 11)
