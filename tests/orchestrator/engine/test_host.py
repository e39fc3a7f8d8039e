"""The agent host in this process: many attempts at once, back-pressure, heartbeats, chaining, draining."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.engine import attempt_ends, execution, host, runs
from orchestrator.engine.host import AgentHost
from orchestrator.models import Attempt, Event, TaskRun
from tests.conftest import fast_latency, wait_for_run, wait_until
from tests.orchestrator.engine.test_processes import attempt_intervals, peak_overlap

State = TaskRun.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def make_host(settings):
    settings.GLASSBOX_LEASE_S = 3.0
    hosts: list[AgentHost] = []

    def make(slots: int = 50) -> AgentHost:
        hosts.append(AgentHost(slots=slots, db_threads_count=2))
        return hosts[-1]

    yield make
    for agent_host in hosts:
        agent_host.drain(grace_s=0)


def submit_queued(agent_host: AgentHost, run) -> None:
    """Deliver every queued attempt of `run` to the host, as a worker taking them all would."""
    for attempt in Attempt.objects.filter(task_run__run=run, state=Attempt.State.QUEUED).order_by("pk"):
        assert agent_host.submit(attempt.pk) in ("accepted", "claimed already by this worker")


def test_one_host_runs_many_attempts_at_once(make_agent, make_plan, make_host, broker):
    make_agent("researcher", max_concurrency=30, provider_options=fast_latency(1.5))
    run = runs.launch(make_plan({f"t{i:02}": ("researcher", []) for i in range(30)}), cap=30)
    broker.purge_queue()  # this test plays the worker that took every delivery
    submit_queued(make_host(slots=50), run)
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert peak_overlap(attempt_intervals(run)) == 30  # one process, thirty attempts in flight
    assert set(Attempt.objects.filter(task_run__run=run).values_list("worker", flat=True)) == {execution.worker_name()}


def test_a_full_host_blocks_the_hand_over_until_a_slot_frees(make_agent, make_plan, make_host, broker):
    make_agent("researcher", max_concurrency=3, provider_options=fast_latency(1.0))
    run = runs.launch(make_plan({k: ("researcher", []) for k in "abc"}), cap=3)
    broker.purge_queue()
    agent_host = make_host(slots=2)
    attempts = list(Attempt.objects.filter(task_run__run=run).order_by("pk"))
    assert agent_host.submit(attempts[0].pk) == "accepted"  # and the second with it, while there is room
    # Both running in the host (it remembers what it claimed ahead before it runs it; the rows
    # show them running a moment earlier, as the claim commits).
    wait_until(lambda: len(agent_host.attempts) == 2, 10)
    assert agent_host.submit(attempts[1].pk) == "claimed already by this worker"
    assert not agent_host.wait_for_room(0.1)  # so its worker takes no task from the queue
    handed: list[float] = []
    third = threading.Thread(target=lambda: handed.append(agent_host.submit(attempts[2].pk) and time.time()))
    third.start()
    third.join(30)
    wait_for_run(run, 30)
    for attempt in attempts:
        attempt.refresh_from_db()
    first_end = min(attempts[0].finished_at, attempts[1].finished_at).timestamp()
    assert handed and handed[0] >= first_end  # the third waited for a free slot
    assert attempts[2].started_at.timestamp() >= first_end
    assert agent_host.wait_for_room(10)  # its slots come back once their attempts have ended


def test_the_host_runs_the_downstream_task_it_admitted_itself(make_agent, make_plan, make_host, broker):
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("researcher", ["b"])}))
    broker.purge_queue()  # this test plays the worker that took a's delivery
    submit_queued(make_host(), run)
    run = wait_for_run(run, 30)
    assert run.status == "succeeded"
    assert broker.queue_size() == 0  # b and c were run by the same host, never enqueued
    # ... and claimed by it in the transaction of the success that admitted them: no claim of
    # their own, so no event came between their admission and their start.
    for key in "bc":
        kinds = list(
            Event.objects.filter(run=run, task_run__subtask__key=key, type__in=["task.queued", "task.started"])
            .order_by("seq")
            .values_list("seq", flat=True)
        )
        assert len(kinds) == 2 and kinds[1] == kinds[0] + 1


def recording_complete_all(monkeypatch, fail_with_several: bool = False) -> list[int]:
    """attempt_ends.complete_all, slowed so that successes pile up behind it; returns the number of
    successes each call was given. `fail_with_several`: a call with more than one fails."""
    batches: list[int] = []
    real = attempt_ends.complete_all

    def recording(run_id, successes, **kwargs):
        batches.append(len(successes))
        time.sleep(0.3)
        if fail_with_several and len(successes) > 1:
            raise RuntimeError("one of these successes cannot be recorded")
        return real(run_id, successes, **kwargs)

    monkeypatch.setattr(attempt_ends, "complete_all", recording)
    return batches


def test_successes_of_a_run_ending_together_are_recorded_in_one_transaction(
    make_agent, make_plan, make_host, broker, monkeypatch
):
    """Twelve tasks ending while a step of their run is under way: their successes wait for the
    next transaction, which records them all and takes one step for all of them."""
    make_agent("researcher", max_concurrency=12, provider_options=fast_latency(0.2))
    layer = {f"t{i:02}": ("researcher", []) for i in range(12)}
    run = runs.launch(make_plan({**layer, "end": ("researcher", list(layer))}), cap=12)
    broker.purge_queue()  # this test plays the worker that took every delivery
    batches = recording_complete_all(monkeypatch)
    submit_queued(make_host(slots=50), run)
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert sum(batches) == 13 and max(batches) > 1 and len(batches) < 13, batches
    attempts = Attempt.objects.filter(task_run__run=run)
    assert attempts.count() == 13 and set(attempts.values_list("state", flat=True)) == {"succeeded"}
    assert Event.objects.filter(run=run, type="task.succeeded").count() == 13


def test_successes_that_cannot_be_recorded_together_are_recorded_each_alone(
    make_agent, make_plan, make_host, broker, monkeypatch
):
    make_agent("researcher", max_concurrency=6, provider_options=fast_latency(0.2))
    layer = {f"t{i}": ("researcher", []) for i in range(6)}
    run = runs.launch(make_plan({**layer, "end": ("researcher", list(layer))}), cap=6)
    broker.purge_queue()
    batches = recording_complete_all(monkeypatch, fail_with_several=True)
    submit_queued(make_host(slots=50), run)
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert max(batches) > 1, batches  # a batch failed, and its successes were not lost with it
    attempts = Attempt.objects.filter(task_run__run=run)
    assert attempts.count() == 7 and set(attempts.values_list("state", flat=True)) == {"succeeded"}


def test_the_slots_a_step_may_keep_are_taken_while_it_runs(make_agent, make_plan, make_host, broker, monkeypatch):
    """A broker delivery that comes while a step may still keep attempts for the host's free
    slots finds the host full (its worker takes nothing from the queue); once the step has kept
    what it admitted, the slots it did not use are free again."""
    make_agent("researcher", provider_options=fast_latency(0.2))
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    broker.purge_queue()
    agent_host = make_host(slots=4)
    room_during_step: list[bool] = []
    real = attempt_ends.complete_all

    def looking(run_id, successes, **kwargs):
        room_during_step.append(agent_host.wait_for_room(0))
        return real(run_id, successes, **kwargs)

    monkeypatch.setattr(attempt_ends, "complete_all", looking)
    submit_queued(agent_host, run)
    run = wait_for_run(run, 30)
    assert run.status == "succeeded", run.summary
    assert room_during_step == [False, False]  # a's step and b's
    assert agent_host.wait_idle(5) and agent_host.free_slots() == 4 and agent_host.wait_for_room(0)


def test_a_wide_fan_out_ending_together_is_carried_on_by_the_host_itself(make_agent, make_plan, make_host, broker):
    """Twenty tasks ending at once: most record their ends without a step of their own and the
    host's coalesced step admits the next ones, claimed for it: nothing goes through the broker,
    every task runs once and the run finishes."""
    make_agent("researcher", max_concurrency=40, provider_options=fast_latency(0.5))
    layer = {f"t{i:02}": ("researcher", []) for i in range(20)}
    nxt = {f"u{i:02}": ("researcher", [f"t{i:02}"]) for i in range(20)}
    run = runs.launch(make_plan({**layer, **nxt, "end": ("researcher", list(nxt))}), cap=40)
    broker.purge_queue()  # this test plays the worker that took every delivery
    submit_queued(make_host(slots=50), run)
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert broker.queue_size() == 0
    attempts = Attempt.objects.filter(task_run__run=run)
    assert attempts.count() == 41 and set(attempts.values_list("state", flat=True)) == {"succeeded"}
    assert set(attempts.values_list("worker", flat=True)) == {execution.worker_name()}


def test_claiming_the_next_task_can_be_turned_off(make_agent, make_plan, make_host, broker, settings):
    settings.GLASSBOX_CLAIM_NEXT = False
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))
    broker.purge_queue()
    agent_host = make_host()
    submit_queued(agent_host, run)
    wait_until(lambda: run.tasks.get(subtask__key="b").state == State.QUEUED, 30, "b admitted")
    assert run.tasks.get(subtask__key="a").state == State.SUCCEEDED
    # b goes to the broker, once its admission has committed (from the host's thread: the state can
    # be seen here a moment before the delivery is sent).
    wait_until(lambda: broker.queue_size() == 1, 10, "b sent to the broker")
    assert Attempt.objects.get(task_run__run=run, task_run__subtask__key="b").state == Attempt.State.QUEUED


def test_cancelling_a_run_stops_its_running_attempt_at_the_next_heartbeat(make_agent, make_plan, make_host):
    make_agent("researcher", provider_options={"hang": True}, timeout_s=60)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    submit_queued(agent_host := make_host(), run)
    wait_until(lambda: run.tasks.get().state == State.RUNNING, 30, "the attempt to start")
    runs.cancel(run)
    assert agent_host.wait_idle(timeout=10)
    attempt = Attempt.objects.get(task_run__run=run)
    assert attempt.state == "cancelled" and attempt.input_tokens > 0  # it keeps what it had used
    assert run.tasks.get().state == State.CANCELLED


def test_an_attempt_whose_lease_the_reaper_took_is_stopped_and_discarded(make_agent, make_plan, make_host):
    from orchestrator.engine import reaper

    make_agent("researcher", provider_options={"hang": True}, timeout_s=60)
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    submit_queued(make_host(), run)
    wait_until(lambda: run.tasks.get().state == State.RUNNING, 30, "the attempt to start")
    TaskRun.objects.filter(run=run).update(lease_expires_at="2000-01-01T00:00:00Z")  # as if the host stalled
    assert reaper.reap_expired() == 1
    wait_until(lambda: Attempt.objects.get(task_run__run=run, number=1).late_result_discarded, 10, "the discard")
    first = Attempt.objects.get(task_run__run=run, number=1)
    assert first.state == "lost" and first.input_tokens > 0
    assert Event.objects.filter(run=run, type="attempt.late_result_discarded").count() == 1


def test_progress_is_saved_on_the_task_row_without_events(make_agent, make_plan, make_host, settings):
    settings.GLASSBOX_PROGRESS_SAVE_S = 0.5
    make_agent("researcher", provider_options=fast_latency(4.0))
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    submit_queued(make_host(), run)
    wait_until(lambda: run.tasks.get().progress > 0 and run.tasks.get().output, 30, "saved progress")
    assert run.tasks.get().state == State.RUNNING
    wait_for_run(run, 30)
    assert not Event.objects.filter(run=run, type="task.progress").exists()


def test_draining_lets_short_attempts_finish_and_hands_back_the_others(make_agent, make_plan, make_host):
    make_agent("quick", provider_options=fast_latency(0.5))
    make_agent("stuck", provider_options={"hang": True}, timeout_s=300)
    run = runs.launch(make_plan({"q": ("quick", []), "s": ("stuck", [])}), cap=2)
    agent_host = make_host()
    submit_queued(agent_host, run)
    wait_until(lambda: run.tasks.filter(state=State.RUNNING).count() == 2, 30, "both attempts to start")
    agent_host.drain(grace_s=2)
    assert run.tasks.get(subtask__key="q").state == State.SUCCEEDED
    stuck = run.tasks.get(subtask__key="s")
    attempt = Attempt.objects.get(task_run=stuck, number=1)
    assert attempt.state == "handed_back" and attempt.input_tokens > 0
    assert stuck.fault_count == 0  # no retry spent
    assert stuck.state == State.QUEUED and stuck.attempt_count == 2  # re-admitted at once, for another worker
    assert Event.objects.filter(run=run, type="attempt.handed_back").count() == 1
    assert agent_host.submit(attempt.pk) == "handed to the broker (this worker is stopping)"
    assert agent_host.loop.is_closed()  # its event loop's resources are released where it ran


def test_a_draining_host_hands_attempts_waiting_for_a_slot_to_the_broker(make_agent, make_plan, make_host, broker):
    make_agent("stuck", provider_options={"hang": True}, timeout_s=300, max_concurrency=2)
    run = runs.launch(make_plan({"a": ("stuck", []), "b": ("stuck", [])}), cap=2)
    broker.purge_queue()
    agent_host = make_host(slots=1)
    first, second = Attempt.objects.filter(task_run__run=run).order_by("pk")
    assert agent_host.submit(first.pk) == "accepted"
    waiting: list[str] = []
    blocked = threading.Thread(target=lambda: waiting.append(agent_host.submit(second.pk)))
    blocked.start()
    time.sleep(0.5)
    assert not waiting  # blocked: the host is full
    agent_host.drain(grace_s=0)
    blocked.join(10)
    assert waiting == ["handed to the broker (this worker is stopping)"]
    # b's delivery went back to the broker, and so did a's task, handed back and admitted again.
    assert broker.queue_size() == 2
    assert Attempt.objects.get(task_run__run=run, number=1, task_run__subtask__key="a").state == "handed_back"


def test_a_host_per_process(settings):
    settings.GLASSBOX_SLOTS_PER_WORKER = 3
    first = host.current()
    try:
        assert host.current() is first and first.slots == 3
    finally:
        first.drain(grace_s=0)
        host._host = None


def test_deliveries_arriving_together_are_claimed_together(
    make_agent, make_plan, make_host, broker, monkeypatch, settings
):
    settings.GLASSBOX_CLAIM_NEXT = False  # each delivery claims only what was delivered
    make_agent("researcher", max_concurrency=12, provider_options=fast_latency(0.2))
    run = runs.launch(make_plan({f"t{i:02}": ("researcher", []) for i in range(12)}), cap=12)
    broker.purge_queue()  # this test plays the worker that took every delivery
    batches: list[int] = []
    real = execution.claim_attempts

    def recording(attempt_ids, worker, **options):
        batches.append(len(attempt_ids))
        time.sleep(0.2)  # deliveries keep arriving while a claim is under way
        return real(attempt_ids, worker, **options)

    monkeypatch.setattr(execution, "claim_attempts", recording)
    submit_queued(make_host(slots=50), run)
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert sum(batches) == 12 and len(batches) < 12, batches  # the first wave: a claim for many
    assert Event.objects.filter(run=run, type="task.started").count() == 12


def test_the_first_delivery_of_a_wave_claims_as_much_of_it_as_the_host_has_room_for(
    make_agent, make_plan, make_host, broker, monkeypatch
):
    """The broker hands a wave over one delivery at a time; the first takes the rest of the wave
    as far as the host has slots, and the deliveries of what it took are answered at once."""
    make_agent("researcher", max_concurrency=12, provider_options=fast_latency(1.0))
    run = runs.launch(make_plan({f"t{i:02}": ("researcher", []) for i in range(12)}), cap=12)
    broker.purge_queue()  # this test plays the worker that took every delivery
    calls: list[tuple[int, int]] = []
    real = execution.claim_attempts

    def recording(attempt_ids, worker, *, more=0, pending=()):
        calls.append((len(attempt_ids), more))
        return real(attempt_ids, worker, more=more, pending=pending)

    monkeypatch.setattr(execution, "claim_attempts", recording)
    agent_host = make_host(slots=8)
    attempts = list(Attempt.objects.filter(task_run__run=run).order_by("pk"))
    assert agent_host.submit(attempts[0].pk) == "accepted"
    wait_until(lambda: len(agent_host.attempts) == 8, 10)  # running in the host, not only in the rows
    assert calls == [(1, 7)]  # the first delivery, and room for seven more
    answers = [agent_host.submit(attempt.pk) for attempt in attempts[1:]]
    assert answers[:7] == ["claimed already by this worker"] * 7  # no slot, no claim of their own
    assert answers[7:] == ["accepted"] * 4
    run = wait_for_run(run, 60)
    assert run.status == "succeeded", run.summary
    assert peak_overlap(attempt_intervals(run)) == 8  # never more than the host's slots
    assert Event.objects.filter(run=run, type="task.started").count() == 12
    assert Attempt.objects.filter(task_run__run=run).count() == 12  # each claimed once


def test_a_delivery_claimed_elsewhere_still_takes_the_rest_of_its_wave(make_agent, make_plan, make_host, broker):
    """Another worker's first delivery took part of the wave; this worker's first delivery is of an
    attempt that worker took, and it takes what is left instead of waiting for its own deliveries."""
    make_agent("researcher", max_concurrency=6, provider_options=fast_latency(0.5))
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(6)}), cap=6)
    broker.purge_queue()
    attempts = list(Attempt.objects.filter(task_run__run=run).order_by("pk"))
    elsewhere = execution.claim_attempts([attempts[0].pk], "elsewhere:1", more=2)
    assert set(elsewhere) == {a.pk for a in attempts[:3]}
    agent_host = make_host(slots=8)
    assert agent_host.submit(attempts[1].pk) == "accepted"  # taken elsewhere: not claimed here ...
    # ... but the three nobody took are, at once (the other worker never finishes its three)
    wait_until(
        lambda: (
            set(Attempt.objects.filter(task_run__run=run, state="running").values_list("worker", flat=True))
            == {"elsewhere:1", execution.worker_name()}
        ),
        10,
    )
    mine = Attempt.objects.filter(task_run__run=run, worker=execution.worker_name())
    assert sorted(mine.values_list("pk", flat=True)) == [a.pk for a in attempts[3:]]


@pytest.mark.parametrize("value", ["off", "on"])
def test_the_hosts_database_sessions_commit_as_configured(settings, make_host, value):
    settings.GLASSBOX_HOST_SYNCHRONOUS_COMMIT = value
    agent_host = make_host(slots=2)
    assert agent_host.pool.session_settings == {"synchronous_commit": value}
