"""The scheduler step: the ready rule, admission under every cap, order, gates, idempotence."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from orchestrator.engine import runs, scheduler
from orchestrator.models import Attempt, Checkpoint, Event, ProviderLimit, Run, TaskRun
from tests.conftest import ROOT, child_env

State = TaskRun.State


def states(run: Run) -> dict[str, str]:
    return dict(run.tasks.values_list("subtask__key", "state"))


def finish(run: Run, key: str, state: str = State.SUCCEEDED, **fields) -> None:
    """Mark a task ended as a worker would, then let the scheduler react."""
    TaskRun.objects.filter(run=run, subtask__key=key).update(state=state, finished_at=timezone.now(), **fields)
    scheduler.advance(run.pk)


@pytest.mark.django_db
def test_only_tasks_whose_upstreams_succeeded_are_admitted(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["a", "b"])})
    run = runs.launch(plan, cap=4)
    assert states(run) == {"a": "queued", "b": "pending", "c": "pending"}
    finish(run, "a")
    assert states(run) == {"a": "succeeded", "b": "queued", "c": "pending"}
    finish(run, "b")
    assert states(run)["c"] == "queued"


@pytest.mark.django_db
def test_run_cap_holds_and_waiting_tasks_say_why(demo_agents, make_plan):
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(10)})
    demo_agents["researcher"].max_concurrency = 10
    demo_agents["researcher"].save()
    run = runs.launch(plan, cap=3)
    counts = run.tasks.values_list("state", flat=True)
    assert sorted(counts).count("queued") == 3
    waiting = run.tasks.filter(state=State.READY)
    assert waiting.count() == 7
    assert all(t.wait_reason == "run cap reached (3 running)" and t.wait_code == "run_cap" for t in waiting)


@pytest.mark.django_db
def test_agent_concurrency_is_counted_across_runs(demo_agents, make_plan):
    demo_agents["coder"].max_concurrency = 2
    demo_agents["coder"].save()
    plan = make_plan({f"t{i}": ("coder", []) for i in range(4)})
    first = runs.launch(plan, cap=4)
    second = runs.launch(plan, cap=4)
    assert TaskRun.objects.filter(state=State.QUEUED).count() == 2
    assert first.tasks.filter(state=State.QUEUED).count() == 2
    assert second.tasks.filter(state=State.QUEUED).count() == 0
    assert "agent coder at its limit" in second.tasks.first().wait_reason
    assert second.tasks.first().wait_code == "agent_limit"


@pytest.mark.django_db
def test_provider_in_flight_cap_and_backoff_hold(demo_agents, make_plan):
    limit = ProviderLimit.objects.create(provider="simulated", model="sim-1", max_in_flight=1)
    plan = make_plan({"a": ("researcher", []), "b": ("writer", [])})
    run = runs.launch(plan, cap=4)
    assert run.tasks.filter(state=State.QUEUED).count() == 1
    limit.max_in_flight = None
    limit.backoff_until = timezone.now() + timedelta(seconds=30)
    limit.save()
    scheduler.advance(run.pk)
    throttled = run.tasks.get(state=State.THROTTLED)  # held by the provider, not by a cap
    assert "backing off" in throttled.wait_reason and throttled.wait_code == "provider_backoff"
    assert Event.objects.filter(run=run, type="task.throttled").last().payload["code"] == "provider_backoff"


@pytest.mark.django_db
def test_retired_agent_is_never_scheduled(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [])})
    demo_agents["researcher"].status = "retired"
    demo_agents["researcher"].save()
    run = runs.launch(plan)
    task = run.tasks.get()
    assert task.state == State.READY
    assert task.wait_reason == "agent researcher is retired, not active"


@pytest.mark.django_db
def test_longest_remaining_path_goes_first(demo_agents, make_plan):
    # "long" heads a chain of three; "short" stands alone: with one slot, "long" must go first.
    plan = make_plan(
        {
            "short": ("researcher", [], {"priority": 5}),
            "long": ("researcher", []),
            "l2": ("researcher", ["long"]),
            "l3": ("researcher", ["l2"]),
        }
    )
    run = runs.launch(plan, cap=1)
    assert states(run)["long"] == "queued"
    assert states(run)["short"] == "ready"


@pytest.mark.django_db
def test_priority_breaks_ties_between_equal_paths(demo_agents, make_plan):
    plan = make_plan({"low": ("researcher", [], {"priority": 0}), "high": ("researcher", [], {"priority": 9})})
    run = runs.launch(plan, cap=1)
    assert states(run) == {"low": "ready", "high": "queued"}


@pytest.mark.django_db
def test_advance_twice_admits_nothing_twice(demo_agents, make_plan):
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(6)})
    run = runs.launch(plan, cap=2)
    before = Attempt.objects.count()
    scheduler.advance(run.pk)
    scheduler.advance(run.pk)
    assert Attempt.objects.count() == before == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_scheduler_steps_in_separate_processes_admit_nothing_twice(demo_agents, make_plan):
    demo_agents["researcher"].max_concurrency = 50
    demo_agents["researcher"].save()
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(30)})
    run = runs.launch(plan, cap=1)
    Run.objects.filter(pk=run.pk).update(cap=7)  # open slots without advancing: the processes race for them
    code = (
        "import django; django.setup()\n"
        "from orchestrator.engine import scheduler\n"
        f"for _ in range(15): scheduler.advance({run.pk})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=child_env()) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert Attempt.objects.filter(task_run__run=run).count() == 7
    assert run.tasks.filter(state=State.QUEUED).count() == 7
    assert Attempt.objects.filter(task_run__run=run).values("task_run").distinct().count() == 7
    queued_events = Event.objects.filter(run=run, type="task.queued").count()
    assert queued_events == 7


@pytest.mark.django_db(transaction=True)
def test_admitted_attempts_are_enqueued_after_commit(demo_agents, make_plan, broker):
    plan = make_plan({"a": ("researcher", []), "b": ("writer", [])})
    runs.launch(plan, cap=4)
    assert broker.queue_size() == 2


@pytest.mark.django_db
def test_before_gate_holds_until_approved(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"], {"gate": "before"}), "c": ("writer", ["a"])})
    run = runs.launch(plan)
    finish(run, "a")
    assert states(run)["b"] == "waiting_gate"
    assert states(run)["c"] == "queued"  # a gate holds only its own branch
    checkpoint = Checkpoint.objects.get(run=run, kind="before")
    runs.decide(checkpoint, approve=True)
    assert states(run)["b"] == "queued"


@pytest.mark.django_db
def test_rejected_gate_skips_its_branch_with_the_reason(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("coder", ["a"]), "c": ("writer", [])})
    run = runs.launch(plan)
    checkpoint = Checkpoint.objects.get(run=run)
    with pytest.raises(runs.ActionError, match="comment is required"):
        runs.decide(checkpoint, approve=False)
    runs.decide(checkpoint, approve=False, comment="not needed this week")
    task_a, task_b = run.tasks.get(subtask__key="a"), run.tasks.get(subtask__key="b")
    assert task_a.state == "skipped" and "not needed this week" in task_a.error
    assert task_b.state == "skipped" and task_b.error == "upstream a did not succeed"
    assert states(run)["c"] == "queued"


@pytest.mark.django_db
def test_after_gate_holds_downstream_until_the_output_is_approved(demo_agents, make_plan):
    plan = make_plan({"a": ("architect", [], {"gate": "after"}), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.RUNNING)  # a worker claimed it
    task = run.tasks.get(subtask__key="a")
    scheduler.open_gate(task, Checkpoint.Kind.AFTER)  # what a worker does when the output is ready
    scheduler.advance(run.pk)
    assert states(run) == {"a": "awaiting_review", "b": "pending"}
    runs.decide(Checkpoint.objects.get(run=run, kind="after"), approve=True)
    assert states(run) == {"a": "succeeded", "b": "queued"}


@pytest.mark.django_db
def test_failure_skips_downstream_with_reason_and_independent_branches_go_on(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"]), "c": ("tester", ["b"]), "x": ("writer", [])})
    run = runs.launch(plan)
    finish(run, "a", State.FAILED, error="boom")
    assert states(run) == {"a": "failed", "b": "skipped", "c": "skipped", "x": "queued"}
    assert run.tasks.get(subtask__key="c").error == "upstream b did not succeed"
    finish(run, "x")
    run.refresh_from_db()
    assert run.status == "failed"
    assert "1 of 4 tasks failed: a (boom)" in run.summary
    assert "2 skipped because an upstream task did not succeed" in run.summary


@pytest.mark.django_db
def test_a_person_skipping_a_task_lets_downstream_go_on(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    runs.skip_task(run.tasks.get(subtask__key="a"), reason="done by hand")
    assert states(run) == {"a": "skipped", "b": "queued"}


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


@pytest.mark.django_db
def test_pause_stops_admission_and_resume_restarts_it(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan)
    runs.pause(run)
    finish(run, "a")
    assert states(run)["b"] == "ready"
    with pytest.raises(runs.ActionError, match="cannot be paused"):
        runs.pause(run)
    runs.resume(run)
    assert states(run)["b"] == "queued"


@pytest.mark.django_db
def test_cancel_ends_the_run_and_every_unfinished_task(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan)
    runs.cancel(run)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert set(states(run).values()) == {"cancelled"}
    with pytest.raises(runs.ActionError, match="already ended"):
        runs.cancel(run)


@pytest.mark.django_db
def test_launch_over_budget_is_refused_with_the_numbers(demo_agents, make_plan, priced_limit):
    plan = make_plan({"a": ("researcher", [], {"estimate": {"input_tokens": 100000, "output_tokens": 10}})})
    with pytest.raises(runs.LaunchRefused, match=r"estimated cost \$0\.3154 is over the budget of \$0\.1000"):
        runs.launch(plan, budget_usd="0.10")
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_every_transition_is_an_event_with_consecutive_sequence_numbers(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    finish(run, "a")
    seqs = list(Event.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    types = list(Event.objects.filter(run=run).values_list("type", flat=True))
    assert types[:4] == ["run.created", "run.started", "task.ready", "task.queued"]
    assert "task.ready" in types[4:] and types[-1] == "task.queued"


@pytest.mark.django_db
def test_admission_meters_requests_per_minute_and_shows_throttled_tasks(demo_agents, make_plan):
    ProviderLimit.objects.create(provider="simulated", model="sim-1", requests_per_minute=2)
    demo_agents["researcher"].max_concurrency = 10
    demo_agents["researcher"].save()
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(5)}), cap=5)
    assert run.tasks.filter(state=State.QUEUED).count() == 2
    throttled = run.tasks.filter(state=State.THROTTLED)
    assert throttled.count() == 3
    assert all("requests per minute used up" in t.wait_reason for t in throttled)
    assert set(throttled.values_list("wait_code", flat=True)) == {"rate_limit_requests"}
    assert Event.objects.filter(run=run, type="task.throttled").count() == 3
    scheduler.advance(run.pk)  # nothing frees within the minute: still held, no new events
    assert run.tasks.filter(state=State.QUEUED).count() == 2
    assert Event.objects.filter(run=run, type="task.throttled").count() == 3


@pytest.mark.django_db
def test_admission_meters_output_tokens_per_minute(demo_agents, make_plan):
    ProviderLimit.objects.create(provider="simulated", model="sim-1", output_tokens_per_minute=2500)
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(4)}), cap=4)
    assert run.tasks.filter(state=State.QUEUED).count() == 2  # 2 × 1,024 max output tokens fit in 2,500
    assert "output tokens per minute used up" in run.tasks.filter(state=State.THROTTLED).first().wait_reason


@pytest.mark.django_db
def test_tasks_held_by_the_run_cap_say_why_once_and_change_reason_when_their_agent_retires(demo_agents, make_plan):
    """Once the cap is reached, held tasks are noted without reloading every one on each step
    (the benchmark's 300-node DAGs): the reasons must still be right and written only once."""
    demo_agents["researcher"].max_concurrency = 100
    demo_agents["researcher"].save()
    tasks = {"root": ("researcher", [])}
    tasks.update({f"t{i:02d}": ("researcher", ["root"]) for i in range(30)})
    tasks["w"] = ("writer", ["root"])
    tasks["tail"] = ("researcher", ["t29"])  # t29 has the longest remaining path: it goes first
    run = runs.launch(make_plan(tasks), cap=2)
    finish(run, "root")
    assert {k for k, s in states(run).items() if s == "queued"} == {"t29", "t00"}
    held = run.tasks.filter(state=State.READY)
    assert held.count() == 29
    assert set(held.values_list("wait_reason", flat=True)) == {"run cap reached (2 running)"}
    waiting_events = Event.objects.filter(run=run, type="task.waiting").count()
    assert waiting_events == 29
    scheduler.advance(run.pk)
    scheduler.advance(run.pk)
    assert Event.objects.filter(run=run, type="task.waiting").count() == waiting_events
    demo_agents["writer"].status = "retired"
    demo_agents["writer"].save()
    scheduler.advance(run.pk)
    assert run.tasks.get(subtask__key="w").wait_reason == "agent writer is retired, not active"
    finish(run, "t29")
    assert states(run)["tail"] == "ready" and run.tasks.filter(state=State.QUEUED).count() == 2


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


@pytest.mark.django_db
def test_a_run_stopped_over_budget_closes_its_open_gates(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("writer", [])})
    run = runs.launch(plan)
    with transaction.atomic():
        scheduler.stop_over_budget(scheduler.lock_run(run.pk))
    gate = Checkpoint.objects.get(run=run, kind="before")
    assert (gate.status, gate.comment) == ("rejected", "run over budget")
    assert run.tasks.get(subtask__key="a").state == "cancelled"


@pytest.mark.django_db
def test_rejecting_a_gate_whose_task_no_longer_waits_there_skips_nothing(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("coder", ["a"])})
    run = runs.launch(plan)
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.CANCELLED)  # as an older stop left it
    runs.decide(Checkpoint.objects.get(run=run), approve=False, comment="too late")
    assert states(run)["a"] == "cancelled"


@pytest.mark.django_db
def test_a_rejected_plan_cancels_every_task_including_one_a_person_skipped(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("writer", ["a"])}), require_plan_approval=True)
    runs.skip_task(run.tasks.get(subtask__key="a"), reason="not needed")
    runs.decide(Checkpoint.objects.get(run=run, kind="plan"), approve=False, comment="wrong goal")
    assert set(states(run).values()) == {"cancelled"}


@pytest.mark.django_db
def test_a_retried_task_whose_output_was_rejected_asks_for_review_again(demo_agents, make_plan):
    plan = make_plan({"a": ("architect", [], {"gate": "after"}), "b": ("coder", ["a"])})
    run = runs.launch(plan)

    def output_ready():  # a worker claimed the task and its output is ready
        TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.RUNNING)
        scheduler.open_gate(run.tasks.get(subtask__key="a"), Checkpoint.Kind.AFTER)

    output_ready()
    runs.decide(Checkpoint.objects.get(run=run, kind="after"), approve=False, comment="too vague")
    assert states(run)["a"] == "failed"
    runs.retry_task(run.tasks.get(subtask__key="a"))
    output_ready()
    review = Checkpoint.objects.get(run=run, kind="after")
    assert (review.status, review.comment, review.decided_at) == ("pending", "", None)
    runs.decide(review, approve=True)
    assert states(run) == {"a": "succeeded", "b": "queued"}


def test_the_host_that_admitted_keeps_all_it_has_room_for_and_always_the_next_of_a_chain():
    assert scheduler.kept_share(10, at_most=50) == 10  # all it has room for: none waits for the broker
    assert scheduler.kept_share(10, at_most=3) == 3  # no more than it has room for
    assert scheduler.kept_share(1, at_most=50) == 1  # a chain's next task never goes through the broker
    assert scheduler.kept_share(3, at_most=0) == 0  # a draining host keeps nothing
