"""A worker that goes silent under a running task: what its row, panel, lane and run_status say at
each step (healthy → silent → heard again → silent → lease run out, lost and retried), and the
ticker's events that redraw open pages, each said once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import execution, reaper, retries, runs, silences
from orchestrator.management.commands.run_status import task_note
from orchestrator.models import Attempt, Event, TaskRun
from orchestrator.readmodels.lanes import lanes
from orchestrator.readmodels.tasks import TaskNote, task_views
from orchestrator.wording import clock

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running(make_agent, make_plan, monkeypatch, settings):
    """One task running on worker "vm:4121" (lease 15 s, renewed every 5 s); the others queued."""
    settings.GLASSBOX_LEASE_S = 15.0
    monkeypatch.setattr(retries, "backoff_seconds", lambda faults, retry_after: 30.0)
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "vm:4121")
    assert claim is not None
    return run, claim.task


def last_heard(task: TaskRun, seconds_ago: float) -> TaskRun:
    """Its worker last renewed the lease `seconds_ago` (each renewal sets it to end 15 s later)."""
    heard = timezone.now() - timedelta(seconds=seconds_ago)
    TaskRun.objects.filter(pk=task.pk).update(lease_expires_at=heard + timedelta(seconds=15))
    return TaskRun.objects.get(pk=task.pk)


def note_of(run):
    (view,) = task_views(run)
    return view.note


def assert_said_of_the_task(run, words: str) -> None:
    """The row (its note), run_status and the agent's lane (its title) say `words` of the task."""
    assert note_of(run) == TaskNote("silent", words)
    (view,) = task_views(run)
    assert task_note(view) == words
    (lane,) = lanes(run)
    assert lane.running[0].silence.text == words


def said(run, kind: str) -> list[str]:
    return list(Event.objects.filter(run=run, type=kind).order_by("seq").values_list("message", flat=True))


def test_a_silent_workers_task_says_so_until_it_is_heard_again_or_its_lease_runs_out(running):
    run, task = running
    # Healthy: its worker renewed its lease a beat late (6 s ago): nothing to say.
    last_heard(task, 6)
    assert note_of(run).kind != "silent"
    assert silences.announce() == {"silent": 0, "heard": 0}

    # Two renewals missed (11 s): the row, the panel's head, the lane and run_status say so.
    task = last_heard(task, 11)
    heard = task.lease_expires_at - timedelta(seconds=15)
    words = (
        f"no word from worker vm:4121 since {clock(heard)} — "
        f"retried when its lease runs out at {clock(task.lease_expires_at)} if it stays silent"
    )
    assert_said_of_the_task(run, words)
    assert lanes(run)[0].running[0].silence.short == f"no word since {clock(heard)}"
    # Open pages hear of it once: one event of the task (which redraws its row, panel and lane).
    assert silences.announce() == {"silent": 1, "heard": 0}
    assert silences.announce() == {"silent": 0, "heard": 0}
    assert said(run, "attempt.silent") == [f"attempt 1: {words}"]

    # Heard again: the lease is renewed, the note is gone, and pages hear of that once too.
    execution.renew_leases("vm:4121", [task.pk])
    assert note_of(run).kind != "silent"
    assert (lanes(run)[0]).running[0].silence is None
    assert silences.announce() == {"silent": 0, "heard": 1}
    assert silences.announce() == {"silent": 0, "heard": 0}
    (heard_again,) = said(run, "attempt.heard")
    assert heard_again.startswith("attempt 1: worker vm:4121 was heard again after ")

    # Silent again, a second silence said on its own; then its lease runs out.
    task = last_heard(task, 12)
    assert silences.announce()["silent"] == 1
    task = last_heard(task, 16)
    assert note_of(run) == TaskNote(
        "silent",
        f"no word from worker vm:4121 since {clock(task.lease_expires_at - timedelta(seconds=15))} — "
        f"its lease ran out at {clock(task.lease_expires_at)}: retried at the reaper's next pass",
    )
    result = reaper.tick()
    assert (result["reaped"], result["heard"]) == (1, 0)  # lost, not heard
    task.refresh_from_db()
    assert task.state == State.READY and task.attempt_count == 1
    note = note_of(run)
    assert note.kind == "waiting" and note.text.startswith(f"retrying from {clock(task.not_before)} after: ")
    assert len(said(run, "attempt.silent")) == 2 and len(said(run, "attempt.lost")) == 1


def test_a_task_whose_worker_is_heard_within_two_renewals_never_reads_silent(running, settings):
    """The threshold is the renewal interval's: with a lease of 30 s (renewed every 10 s), 15 s
    without a renewal is one late beat, not silence."""
    run, task = running
    settings.GLASSBOX_LEASE_S = 30.0
    TaskRun.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=15))
    assert note_of(run).kind != "silent"
    assert silences.announce() == {"silent": 0, "heard": 0}
    TaskRun.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=9))
    assert note_of(run).kind == "silent"
    assert silences.announce()["silent"] == 1


def test_a_silent_workers_task_with_no_retry_left_says_it_fails_and_the_reaper_fails_it(running, settings):
    """The reviewer's page said "retried when its lease runs out" of a task that then failed: the
    words promise a retry only when the reaper will make one. Here the loss would be the task's
    last allowed (GLASSBOX_MAX_LOST_ATTEMPTS 1): the row, run_status and the ticker's event say it
    fails, and it does."""
    run, task = running
    settings.GLASSBOX_MAX_LOST_ATTEMPTS = 1
    task = last_heard(task, 11)
    heard = clock(task.lease_expires_at - timedelta(seconds=15))
    why = "no retry left: 1 attempt lost"
    words = (
        f"no word from worker vm:4121 since {heard} — "
        f"fails when its lease runs out at {clock(task.lease_expires_at)} if it stays silent ({why})"
    )
    assert_said_of_the_task(run, words)
    assert silences.announce()["silent"] == 1
    assert said(run, "attempt.silent") == [f"attempt 1: {words}"]

    task = last_heard(task, 16)
    assert note_of(run) == TaskNote(
        "silent",
        f"no word from worker vm:4121 since {clock(task.lease_expires_at - timedelta(seconds=15))} — "
        f"its lease ran out at {clock(task.lease_expires_at)}: fails at the reaper's next pass ({why})",
    )
    assert reaper.tick()["reaped"] == 1
    task.refresh_from_db()
    assert task.state == State.FAILED
    assert task.error == (
        "lease expired: worker vm:4121 stopped responding, after 1 attempt "
        "(no retry left: 1 attempt lost, the most GLASSBOX_MAX_LOST_ATTEMPTS allows)"
    )


def test_a_silent_workers_task_at_the_bound_on_attempts_says_it_fails(running, monkeypatch):
    """The other bound a lost attempt meets: a start's attempts whatever their cause (MAX_ATTEMPTS)."""
    run, task = running
    monkeypatch.setattr(TaskRun, "MAX_ATTEMPTS", 1)
    task = last_heard(task, 11)
    assert note_of(run).text.endswith("if it stays silent (no retry left: 1 attempt made)")
    last_heard(task, 16)
    reaper.tick()
    task.refresh_from_db()
    assert (task.state, task.error) == (
        State.FAILED,
        "lease expired: worker vm:4121 stopped responding, after 1 attempt "
        "(no retry left: 1 attempt made, the most a task makes)",
    )
