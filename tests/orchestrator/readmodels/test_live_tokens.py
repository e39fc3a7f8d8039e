"""What running attempts have used so far: the "in" and "streaming" a task panel, the Tokens card and
the API add to a task's settled tokens, read from what each attempt's host last saved on it."""

from __future__ import annotations

import pytest

from orchestrator.models import Attempt, TaskRun
from orchestrator.readmodels.live_tokens import NO_LIVE_TOKENS, LiveTokens, live_tokens

from .conftest import start, succeed

pytestmark = pytest.mark.django_db


def saved(attempt: Attempt, input_tokens: int, output_tokens: int) -> None:
    """What the attempt's host saves while it runs: its input from the stream's start, the output so far."""
    Attempt.objects.filter(pk=attempt.pk).update(input_tokens=input_tokens, output_tokens=output_tokens)


@pytest.fixture
def run(launched):
    return launched({key: ("researcher", []) for key in ("a", "b", "c")}, cap=3)


def tasks_of(run) -> dict[str, TaskRun]:
    return {t.subtask.key: t for t in run.tasks.select_related("subtask")}


def test_a_running_attempts_saved_usage_is_its_tasks_tokens_so_far(run, django_assert_num_queries):
    saved(start(tasks_of(run)["a"]), 1200, 35)
    saved(start(tasks_of(run)["b"]), 800, 0)  # its input is known from the stream's start, before any output
    by_key = tasks_of(run)
    with django_assert_num_queries(1):
        live = live_tokens(by_key.values())
    assert live == {by_key["a"].pk: LiveTokens(1200, 35), by_key["b"].pk: LiveTokens(800, 0)}
    assert (live[by_key["a"].pk].input, live[by_key["a"].pk].output) == (1200, 35)


def test_a_running_attempt_that_saved_no_usage_yet_adds_nothing(run):
    start(tasks_of(run)["a"])
    by_key = tasks_of(run)
    live = live_tokens(by_key.values())
    assert live == {}
    assert live.get(by_key["a"].pk, NO_LIVE_TOKENS) == LiveTokens(0, 0)


def test_an_ended_attempts_tokens_are_its_tasks_and_never_live_as_well(run):
    """A succeeded attempt's usage is settled into its task's tokens: counting it here too would
    count it twice."""
    succeed(tasks_of(run)["a"], tokens=(100, 50))
    by_key = tasks_of(run)
    assert by_key["a"].input_tokens == 100
    assert live_tokens(by_key.values()) == {}


def test_only_the_tasks_current_attempt_is_live_not_an_earlier_one_still_marked_running(run):
    """An earlier attempt whose row still says running (its host lost, the task already retried)
    is not what the task runs now: its saved usage is not the task's so far."""
    task = tasks_of(run)["a"]
    saved(start(task), 500, 40)
    second = Attempt.objects.create(task_run=task, number=2)
    saved(start(task), 70, 3)
    assert Attempt.objects.get(task_run=task, number=1).state == Attempt.State.RUNNING
    assert live_tokens([TaskRun.objects.get(pk=task.pk)]) == {task.pk: LiveTokens(70, 3)}
    Attempt.objects.filter(pk=second.pk).update(input_tokens=0, output_tokens=0)
    assert live_tokens([TaskRun.objects.get(pk=task.pk)]) == {}


def test_tasks_that_do_not_run_are_not_read_at_all(run, django_assert_num_queries):
    by_key = tasks_of(run)
    with django_assert_num_queries(0):
        assert live_tokens(by_key.values()) == {}


@pytest.mark.parametrize("stopped", [TaskRun.State.CANCELLED, TaskRun.State.SKIPPED])
def test_an_attempt_whose_task_was_stopped_counts_until_it_stops_too(run, stopped):
    """A cancel or a skip moves the task first; its attempt stops at its host's next beat and then
    settles what it used. Until then what it used so far is the task's still."""
    task = tasks_of(run)["a"]
    attempt = start(task)
    saved(attempt, 300, 20)
    TaskRun.objects.filter(pk=task.pk).update(state=stopped)
    assert live_tokens(tasks_of(run).values()) == {task.pk: LiveTokens(300, 20)}
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.CANCELLED)  # it stopped: settled
    assert live_tokens(tasks_of(run).values()) == {}
