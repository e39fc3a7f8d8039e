"""The run's ETA: the time left at the run's pace, under its cap and its agents' limits (with the
slots other runs hold), and the waits for people it leaves out."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orchestrator.engine import execution, runs, tool_approvals
from orchestrator.models import Agent, Attempt, Checkpoint, Run, TaskRun
from orchestrator.readmodels import other_runs
from orchestrator.readmodels.eta import pace, waited_for_people, work_took
from orchestrator.readmodels.tasks import TaskState, agents_of, task_states
from orchestrator.readmodels.totals import totals

from .conftest import start, succeed

State = TaskRun.State


def test_the_eta_waits_for_an_agents_own_limit(launched, demo_agents):
    # Four researcher tasks, one at a time, beside four writer tasks: a cap of 8 and the agents'
    # summed limits (5) would let the eight end in two rounds; the researcher needs four.
    Agent.objects.filter(name="researcher").update(max_concurrency=1)
    run = launched({f"r{i}": ("researcher", []) for i in range(4)} | {f"w{i}": ("writer", []) for i in range(4)}, cap=8)
    assert totals(run).eta_s == pytest.approx(4 * 0.2)  # fast_latency: 0.2 s a task
    r0 = run.tasks.get(subtask__key="r0")
    start(r0, ago_s=0.15)
    r0.refresh_from_db()
    later = r0.started_at + timedelta(seconds=0.15)
    assert totals(run, now=later).eta_s == pytest.approx(0.05 + 3 * 0.2)  # r0's rest, then the other three


def test_a_slot_another_run_holds_frees_when_its_running_task_is_expected_to_end(launched, demo_agents):
    Agent.objects.filter(name="researcher").update(max_concurrency=1)
    other = launched({"x": ("researcher", [])})
    run = launched({"r": ("researcher", []), "w": ("writer", [])}, cap=4)
    x = other.tasks.get()
    start(x, ago_s=0.15)
    x.refresh_from_db()
    now = x.started_at + timedelta(seconds=0.15)
    # x has 0.05 s left, then r takes 0.2 s; the writer's slots are free: w ends at 0.2 s.
    assert totals(run, now=now).eta_s == pytest.approx(0.05 + 0.2)
    # The other run's pause holds its running task's slot all the same: a pause stops admission.
    runs.pause(other)
    assert totals(run, now=now).eta_s == pytest.approx(0.05 + 0.2)


def test_a_task_skipped_below_a_running_one_is_not_counted(launched):
    run = launched({"scope": ("researcher", []), "write": ("writer", ["scope"])})
    runs.skip_task(run.tasks.get(subtask__key="write"), reason="not needed after all")
    assert totals(run).eta_s == pytest.approx(0.2)  # scope only


def task_state(key: str, state: str, *, worked_s: float | None = None, waited_s: float = 0.0) -> TaskState:
    """A task as the ETA reads it: `worked_s` seconds of work by its last attempt (None: not
    started), then `waited_s` seconds before it finished (a review's wait)."""
    now = timezone.now()
    started = now - timedelta(seconds=(worked_s or 0) + waited_s) if worked_s is not None else None
    worked_until = started + timedelta(seconds=worked_s) if started and worked_s is not None else None
    finished = now if state in TaskRun.TERMINAL and started else None
    return TaskState(
        pk=0,
        key=key,
        title=key,
        agent_id=1,
        state=state,
        wait_reason="",
        wait_code="",
        progress=100 if worked_until else 0,
        attempt_count=1 if started else 0,
        started_at=started,
        finished_at=finished,
        input_tokens=0,
        output_tokens=0,
        cost_usd=Decimal("0"),
        earlier_tokens=0,
        worked_until=worked_until,
    )


def test_pace_is_one_until_a_task_has_done_its_work():
    estimates = {"a": 2.0, "b": 2.0}
    assert (
        pace(work_took([task_state("a", State.RUNNING, worked_s=5.0), task_state("b", State.PENDING)]), estimates)
        == 1.0
    )


def test_pace_measures_the_work_not_the_wait_for_a_reviewer():
    """The ETA jumped to 11 s just after a review was approved, and the run ended 3 s later: the
    pace read the reviewed task's wait for its reviewer as work (0.92 and 31.7 times its
    estimate, their median clamped to 5)."""
    reviewed = task_state("a", State.SUCCEEDED, worked_s=2.0, waited_s=60.0)
    in_review = task_state("b", State.AWAITING_REVIEW, worked_s=2.0, waited_s=60.0)
    assert work_took([reviewed, in_review]) == pytest.approx({"a": 2.0, "b": 2.0})
    assert pace(work_took([reviewed, in_review]), {"a": 2.0, "b": 2.0, "c": 2.0}) == pytest.approx(1.0)


def test_pace_weighs_a_task_by_its_estimate():
    """A fixed 25 s task was forecast at 45 s (it took 27 s): a quick task's second of overhead,
    1.8 times its estimate as a ratio, was applied to it whole."""
    estimates = {"quick": 1.0, "long": 25.0}
    assert 25.0 * pace({"quick": 1.8}, estimates) == pytest.approx(26.4, abs=0.1)
    # Ten seconds estimated that took ten, beside a second that took three: 1.1, not a median of 2.
    estimates = {"a": 1.0, "b": 10.0, "c": 5.5}
    assert pace({"a": 3.0, "b": 10.0}, estimates) == pytest.approx(18.5 / 16.5)


def test_pace_learns_a_run_that_is_slower_than_estimated_and_stays_within_bounds():
    estimates = {k: 2.0 for k in "abcde"}
    assert pace({"a": 6.0}, estimates) == pytest.approx(2.0)  # (6 + 2) / (2 + 2)
    assert pace({k: 6.0 for k in "abcd"}, estimates) == pytest.approx(2.6)  # (24 + 2) / (8 + 2)
    assert pace({k: 600.0 for k in "abcd"}, estimates) == 5.0
    assert pace({k: 0.0 for k in "abcd"}, estimates) == 0.2


def test_while_everything_left_waits_for_a_decision_the_eta_is_the_time_after_it(launched):
    run = launched({"a": ("researcher", [], {"gate": "before"}), "b": ("researcher", [])})
    moving = totals(run)  # b is queued: the run moves, a decision is pending beside it
    assert moving.counts_down and not moving.waits_for_decision
    assert (moving.eta_after, moving.eta_overdue) == ("", "after the decision")
    succeed(run.tasks.get(subtask__key="b"), took_s=0.2)  # as estimated: the pace stays 1
    waiting = totals(run)  # only a is left, at its gate
    assert waiting.waits_for_decision and not waiting.counts_down
    assert waiting.eta_s == pytest.approx(0.2) and waiting.eta_after == "after the decision"
    assert waiting.eta_note == "1 decision pending: nothing runs until a person decides"
    runs.pause(run)
    assert not totals(run).counts_down and totals(run).eta_placeholder == "paused"


def asked_to_call_a_tool(run: Run, key: str, *, ago_s: float) -> Checkpoint:
    """The run's task `key`, claimed by a (pretend) host, asked `ago_s` ago to call a tool granted
    with approval (the engine's own checkpoint: engine/tool_approvals.py)."""
    attempt = Attempt.objects.get(task_run__run=run, task_run__subtask__key=key, state=Attempt.State.QUEUED)
    claim = execution.claim_attempt(attempt.pk, "host:1")
    checkpoint = Checkpoint.objects.get(
        pk=tool_approvals.open_checkpoint(claim, tool_approvals.Asked("c1", "write", "workspace", "write_file", {}))
    )
    asked = timezone.now() - timedelta(seconds=ago_s)
    TaskRun.objects.filter(pk=claim.task.pk).update(started_at=asked - timedelta(seconds=0.05))
    Checkpoint.objects.filter(pk=checkpoint.pk).update(created_at=asked)
    return checkpoint


def test_while_a_task_waits_for_a_tool_calls_approval_the_eta_waits_for_the_decision(launched, personas):
    """The estimate of a task waiting for a person counted down as if it worked."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    checkpoint = asked_to_call_a_tool(run, "a", ago_s=30)
    now = timezone.now()
    waiting = totals(run, now=now)
    assert waiting.waits_for_decision and not waiting.counts_down
    assert waiting.eta_after == "after the decision"
    assert waiting.eta_note == "1 decision pending: nothing moves until a person decides"
    # a ran 0.05 s of its 0.2 s before it asked: the 30 s since do not wear its estimate down.
    assert waiting.eta_s == pytest.approx(0.15 + 0.2)
    assert totals(run, now=now + timedelta(seconds=60)).eta_s == pytest.approx(waiting.eta_s)

    runs.decide(checkpoint, approve=True, user=personas["approver"])
    decided = totals(run)
    assert decided.counts_down and not decided.waits_for_decision and decided.eta_after == ""
    assert decided.eta_note == "at the cap and each agent's limit, excluding approvals"


def test_once_a_tool_call_is_decided_the_wait_for_it_is_not_counted_as_work(launched, personas):
    """Once a person approved the call, the 30 s its task had waited counted as work: its estimate
    was worn off at once (the ETA said only b was left), and once it ended the pace read 150 times
    the work it did (the rest of the run forecast five times too long)."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    checkpoint = asked_to_call_a_tool(run, "a", ago_s=30)
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    decided_at = Checkpoint.objects.get(pk=checkpoint.pk).decided_at
    # a ran 0.05 s before it asked and none since the decision: 0.15 s of it left, then b's 0.2 s.
    assert totals(run, now=decided_at).eta_s == pytest.approx(0.15 + 0.2)
    assert totals(run, now=decided_at + timedelta(seconds=0.1)).eta_s == pytest.approx(0.05 + 0.2)

    # a's work ends 0.15 s after the decision: it worked 0.2 s, as estimated, so b's 0.2 s is left.
    ended = decided_at + timedelta(seconds=0.15)
    Attempt.objects.filter(task_run__run=run, task_run__subtask__key="a").update(
        state=Attempt.State.SUCCEEDED, finished_at=ended
    )
    run.tasks.filter(subtask__key="a").update(state=State.SUCCEEDED, finished_at=ended, progress=100)
    assert totals(run, now=ended).eta_s == pytest.approx(0.2)


def test_a_live_frames_totals_read_the_checkpoints_once_for_the_pending_ones_and_the_waits(
    launched, personas, django_assert_num_queries
):
    """The time tasks waited for people cost the totals a second read of the checkpoints, at almost
    every live frame of a running run: it comes with the pending ones' read, as before."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    checkpoint = asked_to_call_a_tool(run, "a", ago_s=30)
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    decided_at = Checkpoint.objects.get(pk=checkpoint.pk).decided_at
    run.refresh_from_db()
    states = task_states(run)
    agents = agents_of(states)
    elsewhere = other_runs.other_runs(run, list(agents))
    totals(run, states, now=decided_at, elsewhere=elsewhere, agents=agents)  # a first frame reads the plan
    with django_assert_num_queries(2) as captured:  # the providers' limits, the checkpoints
        frame = totals(run, states, now=decided_at, elsewhere=elsewhere, agents=agents)
    assert len([q for q in captured.captured_queries if "orchestrator_checkpoint" in q["sql"]]) == 1
    assert frame.pending_checkpoints == 0
    assert frame.eta_s == pytest.approx(0.15 + 0.2)  # the 30 s a waited for the decision are not work


def test_a_retried_tasks_earlier_wait_for_a_person_is_not_taken_off_its_new_attempt(launched, personas):
    """The totals read every tool call's checkpoint: those of an attempt that ended before its
    task was claimed again are not the new attempt's wait (its run time counts from that claim)."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    checkpoint = asked_to_call_a_tool(run, "a", ago_s=30)
    runs.decide(checkpoint, approve=True, user=personas["approver"])
    task = run.tasks.get(subtask__key="a")
    start(Attempt.objects.create(task_run=task, number=2).task_run, ago_s=0.1)  # claimed again
    started = TaskRun.objects.get(pk=task.pk).started_at
    Checkpoint.objects.filter(pk=checkpoint.pk).update(decided_at=started - timedelta(seconds=20))
    Attempt.objects.filter(task_run=task, number=1).update(
        state=Attempt.State.FAILED, finished_at=started - timedelta(seconds=19)
    )
    # The new attempt ran 0.1 s of a's 0.2 s: 0.1 s of it left, then b's 0.2 s.
    assert totals(run, now=started + timedelta(seconds=0.1)).eta_s == pytest.approx(0.1 + 0.2)


def test_overlapping_waits_for_tool_calls_count_once_and_only_within_the_attempt():
    from datetime import UTC, datetime

    t0 = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)

    def at(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    running = replace(task_state("a", State.RUNNING), started_at=at(0))
    spans = [
        (running.pk, at(-5), at(2)),  # opened before this start (an earlier claim): from 0
        (running.pk, at(10), at(20)),  # two calls of one turn, asked together
        (running.pk, at(12), at(25)),
        (running.pk, at(40), None),  # pending: until now
    ]
    assert waited_for_people([running], spans, at(45)) == {running.pk: pytest.approx(2 + 15 + 5)}


def test_a_tool_calls_approval_beside_moving_work_is_not_counted_and_the_eta_counts_down(launched):
    run = launched({"a": ("researcher", []), "b": ("writer", [])})
    asked_to_call_a_tool(run, "a", ago_s=30)
    moving = totals(run)  # b is queued: the run moves
    assert moving.counts_down and not moving.waits_for_decision
    assert moving.eta_note == "1 decision pending: the wait for it is not counted"


def test_a_task_that_runs_past_its_estimate_lets_the_countdown_run_out(launched):
    """One task left, running far past its estimate: the ETA said a tenth of its estimate for as
    long as it ran (each frame set it afresh), and never "past the estimate"."""
    run = launched({"a": ("researcher", []), "b": ("writer", ["a"])})
    start(run.tasks.get(subtask__key="a"), ago_s=0.1)  # within its 0.2 s estimate (fast_latency)
    within = totals(run)
    assert within.eta_s == pytest.approx(0.1 + 0.2, abs=0.05)
    start(run.tasks.get(subtask__key="a"), ago_s=60)  # far past it: counted as ending now, b left
    assert totals(run).eta_s == pytest.approx(0.2, abs=0.02)
    succeed(run.tasks.get(subtask__key="a"), took_s=0.2)
    start(run.tasks.get(subtask__key="b"), ago_s=60)
    overrun = totals(run)
    assert overrun.eta_s == 0 and overrun.counts_down and overrun.eta_run_out
    assert overrun.eta_overdue == "past the estimate"
