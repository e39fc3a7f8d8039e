"""A person's retry or skip of a task (engine/task_controls.py): what it revives, reopens and says."""

from __future__ import annotations

import pytest
from django.db.models import Q

from orchestrator.engine import runs, scheduler
from orchestrator.models import Checkpoint, Event, TaskRun
from tests.orchestrator.engine.steps import finish, states

State = TaskRun.State


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (TaskRun.State.SUCCEEDED, "has succeeded"),
        (TaskRun.State.WAITING_GATE, "needs approval"),
        (TaskRun.State.AWAITING_REVIEW, "is in review"),
        (TaskRun.State.RUNNING, "is running"),
    ],
)
def test_a_refused_retry_or_rerun_says_what_the_task_is_in_its_badges_words(make_agent, make_plan, state, said):
    """A refusal read "task start is succeeded: only …" and "is waiting gate": the state's code
    after "is". It says what the task is as its badge does."""
    from orchestrator.engine import reruns

    make_agent("researcher")
    run = runs.launch(make_plan({"start": ("researcher", [])}))
    run.tasks.update(state=state)
    with pytest.raises(runs.ActionError) as refused:
        runs.retry_task(run.tasks.get())
    assert str(refused.value) == f"task start {said}: only a failed, cancelled or skipped task can be retried"
    if state != TaskRun.State.SUCCEEDED:
        with pytest.raises(runs.ActionError, match=f"^task start {said}: only a task that has finished "):
            reruns.rerun_from(run.tasks.get())


@pytest.mark.django_db
def test_a_person_skipping_a_task_lets_downstream_go_on(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    runs.skip_task(run.tasks.get(subtask__key="a"), reason="done by hand")
    assert states(run) == {"a": "skipped", "b": "queued"}
    finish(run, "b")
    run.refresh_from_db()
    # The summary counts the skipped task among the run's (it said "the only task succeeded").
    assert (run.status, run.summary) == ("succeeded", "1 of 2 tasks succeeded, 1 skipped by a person")


@pytest.mark.django_db
def test_retrying_a_failed_task_revives_its_skipped_downstream(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    finish(run, "a", State.FAILED, error="boom")
    run.refresh_from_db()
    assert run.status == "failed"
    runs.retry_task(run.tasks.get(subtask__key="a"))
    run.refresh_from_db()
    assert run.status == "running"
    assert states(run) == {"a": "queued", "b": "pending"}
    # The log says the run was reopened, and by what: it was not paused, so not "resumed".
    assert list(Event.objects.filter(run=run, type__startswith="run.").values_list("type", "message"))[-1] == (
        "run.reopened",
        "run reopened by a retry of a",
    )
    assert not Event.objects.filter(run=run, type="run.resumed").exists()


@pytest.mark.django_db
def test_skipping_the_failed_task_of_a_failed_run_reopens_it_and_says_so(demo_agents, make_plan, personas):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    finish(run, "a", State.FAILED, error="boom")
    runs.skip_task(run.tasks.get(subtask__key="a"), user=personas["launcher"], reason="done by hand")
    run.refresh_from_db()
    assert (run.status, run.finished_at, run.summary) == ("running", None, "")
    assert states(run) == {"a": "skipped", "b": "queued"}
    reopened = Event.objects.get(run=run, type="run.reopened")
    assert (reopened.message, reopened.actor_user) == ("run reopened by a skip of a", personas["launcher"])


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["skip", "retry"])
def test_a_task_kept_skipped_by_another_failure_names_that_one_not_the_one_a_person_handled(
    demo_agents, make_plan, personas, action
):
    """d is below a and b. a failed first (d: "upstream a did not succeed"), then b failed. A person
    skips or retries a: d stays skipped because of b, and says so. It still blamed a, which no longer
    held it back (a skip lets downstream go on), on the page, in run_status and in the export."""
    plan = make_plan({"a": ("researcher", []), "b": ("coder", []), "d": ("writer", ["a", "b"])})
    run = runs.launch(plan)
    finish(run, "a", State.FAILED, error="boom")
    finish(run, "b", State.FAILED, error="bang")
    assert run.tasks.get(subtask__key="d").error == "upstream a did not succeed"
    a = run.tasks.get(subtask__key="a")
    if action == "skip":
        runs.skip_task(a, user=personas["launcher"])
    else:
        runs.retry_task(a, user=personas["launcher"])
    d = run.tasks.get(subtask__key="d")
    assert (d.state, d.error) == ("skipped", "upstream b did not succeed")
    said = list(Event.objects.filter(run=run, task_run=d).values_list("type", "message"))
    assert said[-1] == ("task.skipped", "stays skipped: upstream b did not succeed")
    # Handled again, nothing more is said: its reason did not change.
    before = Event.objects.filter(run=run, task_run=d).count()
    runs.wait_again(run, Q(pk=d.pk), user=None, why="again")
    assert Event.objects.filter(run=run, task_run=d).count() == before


@pytest.mark.django_db
def test_a_retried_task_whose_output_was_rejected_asks_for_review_again(demo_agents, make_plan, personas):
    plan = make_plan({"a": ("architect", [], {"gate": "after"}), "b": ("coder", ["a"])})
    run = runs.launch(plan)

    def output_ready():  # a worker claimed the task and its output is ready
        TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.RUNNING)
        scheduler.open_gate(run.tasks.get(subtask__key="a"), Checkpoint.Kind.AFTER)

    output_ready()
    rejected = Checkpoint.objects.get(run=run, kind="after")
    runs.decide(rejected, approve=False, comment="too vague", user=personas["approver"])
    assert states(run)["a"] == "failed"
    runs.retry_task(run.tasks.get(subtask__key="a"))
    output_ready()
    # The retry asks with a new review; the rejection stays as it was decided (it was reset once,
    # and the admin then showed it pending with no decider).
    first, review = Checkpoint.objects.filter(run=run, kind="after").order_by("pk")
    assert first.pk == rejected.pk
    assert (first.status, first.decider, first.comment) == ("rejected", "approver", "too vague")
    assert first.decided_at is not None and first.created_at == rejected.created_at
    assert (review.status, review.decider, review.comment, review.decided_at) == ("pending", "", "", None)
    assert Event.objects.filter(type="checkpoint.created", payload__checkpoint=review.pk).get().payload["reopened"]
    runs.decide(review, approve=True)
    assert states(run) == {"a": "succeeded", "b": "queued"}
    assert list(run.tasks.get(subtask__key="a").checkpoints.values_list("status", flat=True)) == [
        "rejected",
        "approved",
    ]
