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


@pytest.mark.django_db
def test_a_retry_keeps_the_text_its_failed_attempt_wrote_on_that_attempt(make_agent, make_plan, no_broker, settings):
    """A retry's claim clears the task's text for the new attempt: the partial output of the attempt
    before it was kept nowhere, and its page said "No output of this attempt was kept"."""
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt

    settings.GLASSBOX_RETRY_BASE_S = 0.0
    make_agent("researcher", max_retries=2)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    first = Attempt.objects.get(task_run__run=run)
    claim = execution.claim_attempt(first.pk, "w1")
    assert attempt_ends.fail(claim, "overloaded", output="The first half of a dra") == "retry scheduled"
    scheduler.advance(run.pk)  # the retry is admitted
    second = Attempt.objects.get(task_run__run=run, number=2)
    execution.claim_attempt(second.pk, "w1")
    first.refresh_from_db()
    assert first.output == "The first half of a dra"
    assert run.tasks.get().output == ""  # the task's text is the new attempt's from now on


@pytest.mark.django_db
def test_a_second_retry_keeps_each_attempts_own_text(make_agent, make_plan, no_broker, settings):
    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt

    settings.GLASSBOX_RETRY_BASE_S = 0.0
    make_agent("researcher", max_retries=3)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    for number, text in ((1, "one"), (2, "two")):
        attempt = Attempt.objects.get(task_run__run=run, number=number)
        attempt_ends.fail(execution.claim_attempt(attempt.pk, "w1"), "overloaded", output=text)
        scheduler.advance(run.pk)
    assert dict(Attempt.objects.filter(task_run__run=run).values_list("number", "output")) == {
        1: "one",
        2: "two",
        3: "",
    }
