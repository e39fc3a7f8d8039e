"""The scheduler step: the ready rule, gates, skips, idempotence (admission under the caps:
test_admission.py; how admitted attempts start: test_dispatch.py; a person's pause, resume and cancel:
test_run_controls.py; retries and skips: test_task_controls.py; checkpoint decisions: test_decisions.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import transaction
from django.utils import timezone

from orchestrator.engine import runs, scheduler
from orchestrator.models import Attempt, Checkpoint, Event, Run, TaskRun
from tests.conftest import ROOT, child_env
from tests.orchestrator.engine.steps import finish, states

State = TaskRun.State


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
    assert "1 of 4 tasks failed: a — boom;" in run.summary
    assert "2 skipped because an upstream task did not succeed" in run.summary


@pytest.mark.django_db
def test_a_failure_skips_a_diamond_below_it_in_one_step_each_task_once(demo_agents, make_plan):
    plan = make_plan(
        {"a": ("researcher", []), "c": ("writer", ["a", "b"]), "b": ("coder", ["a"]), "d": ("tester", ["c", "b"])}
    )
    run = runs.launch(plan)
    finish(run, "a", State.FAILED, error="boom")
    assert states(run) == {"a": "failed", "b": "skipped", "c": "skipped", "d": "skipped"}
    skipped = Event.objects.filter(run=run, type="task.skipped")
    assert sorted(e.task_run.subtask.key for e in skipped) == ["b", "c", "d"]  # each once
    assert run.tasks.get(subtask__key="b").error == "upstream a did not succeed"


@pytest.mark.django_db
def test_a_step_reads_the_times_of_the_tasks_it_may_admit_only(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", []), "c": ("writer", ["a"])})
    run = runs.launch(plan, cap=1)  # a queued, b ready (held by the cap), c pending
    tasks = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    rows = scheduler.read_tasks(run)
    read = {key: (rows[t.subtask_id].state, rows[t.subtask_id].ready_at) for key, t in tasks.items()}
    assert tasks["a"].ready_at is not None and tasks["b"].ready_at is not None
    assert read == {"a": ("queued", None), "b": ("ready", tasks["b"].ready_at), "c": ("pending", None)}


@pytest.mark.django_db
def test_a_task_promoted_with_a_back_off_left_from_before_waits_for_it(demo_agents, make_plan):
    """A task put back to pending keeps its back-off (a fail-fast stop cancelled it mid-back-off,
    then a person retried its failed upstream): promoted, it is not admitted before it."""
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan)
    later = timezone.now() + timezone.timedelta(hours=1)
    TaskRun.objects.filter(run=run, subtask__key="b").update(not_before=later)
    finish(run, "a")
    b = run.tasks.get(subtask__key="b")
    assert (b.state, b.attempt_count) == ("ready", 0)


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
def test_a_run_stopped_over_budget_closes_its_open_gates(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", [], {"gate": "before"}), "b": ("writer", [])})
    run = runs.launch(plan)
    with transaction.atomic():
        scheduler.stop_over_budget(scheduler.lock_run(run.pk))
    gate = Checkpoint.objects.get(run=run, kind="before")
    assert (gate.status, gate.comment) == ("closed", "the run went over its budget")
    assert run.tasks.get(subtask__key="a").state == "cancelled"


@pytest.mark.django_db
def test_a_rejected_outputs_comment_ending_a_sentence_reads_once_in_the_runs_summary(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("architect", [], {"gate": "after"}), "b": ("coder", ["a"])}))
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.RUNNING)
    scheduler.open_gate(run.tasks.get(subtask__key="a"), Checkpoint.Kind.AFTER)
    runs.decide(Checkpoint.objects.get(run=run, kind="after"), approve=False, comment="Tokens in plain text; redo it.")
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.summary == (
        "1 of 2 tasks failed: a — output rejected in review: Tokens in plain text; redo it; "
        "1 skipped because an upstream task did not succeed"
    )


@pytest.mark.django_db
def test_a_task_found_ready_and_admitted_in_one_step_is_written_once_with_its_ready_time(demo_agents, make_plan):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}), cap=2)
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=State.SUCCEEDED, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        scheduler.advance(run.pk)
    task_updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "orchestrator_taskrun"')]
    assert len(task_updates) == 1  # pending → queued, not pending → ready → queued
    b = run.tasks.get(subtask__key="b")
    assert b.state == State.QUEUED and b.ready_at is not None
    types = list(Event.objects.filter(task_run=b).order_by("seq").values_list("type", flat=True))
    assert types == ["task.ready", "task.queued"]  # the page still reads both moves


@pytest.mark.django_db
def test_tasks_found_ready_but_held_by_the_cap_are_written_ready_and_say_why(demo_agents, make_plan):
    plan = make_plan({"root": ("researcher", []), **{f"t{i}": ("researcher", ["root"]) for i in range(3)}})
    run = runs.launch(plan, cap=2)
    earlier = timezone.now()
    finish(run, "root")
    rows = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    assert sorted(t.state for t in rows.values() if t.subtask.key != "root") == ["queued", "queued", "ready"]
    waiting = next(t for t in rows.values() if t.state == State.READY)
    assert waiting.wait_code == "run_cap" and waiting.ready_at >= earlier
    # the admitted ones and the waiting one became ready at the same moment
    assert {t.ready_at for t in rows.values() if t.subtask.key != "root"} == {waiting.ready_at}


@pytest.mark.django_db
def test_a_task_found_ready_in_a_paused_run_is_written_ready_and_says_the_run_is_paused(demo_agents, make_plan):
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}), cap=2)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.PAUSED)
    finish(run, "a")
    b = run.tasks.get(subtask__key="b")
    assert (b.state, b.wait_code) == (State.READY, "run_paused")
    assert b.ready_at is not None


@pytest.mark.django_db
def test_an_admission_of_earlier_and_newly_ready_tasks_keeps_each_ones_ready_time(demo_agents, make_plan):
    plan = make_plan({"a": ("researcher", []), "old": ("researcher", []), "new": ("researcher", ["a"])})
    run = runs.launch(plan, cap=1)
    old = run.tasks.get(subtask__key="old")
    assert old.state == State.READY  # the cap held it
    long_ago = timezone.now() - timezone.timedelta(minutes=5)
    TaskRun.objects.filter(pk=old.pk).update(ready_at=long_ago)
    Run.objects.filter(pk=run.pk).update(cap=3)
    finish(run, "a")
    rows = {t.subtask.key: t for t in run.tasks.select_related("subtask")}
    assert rows["old"].state == rows["new"].state == State.QUEUED
    assert rows["old"].ready_at == long_ago
    assert rows["new"].ready_at > long_ago
