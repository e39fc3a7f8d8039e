"""The run page's agent lanes."""

from __future__ import annotations

from decimal import Decimal

from orchestrator.engine import runs
from orchestrator.models import TaskRun
from orchestrator.readmodels.lanes import lanes

from .conftest import start, succeed

State = TaskRun.State


def test_lanes_show_running_work_slots_across_runs_queue_tokens_and_cost(launched, demo_agents):
    run = launched(
        {"s1": ("researcher", []), "s2": ("researcher", []), "s3": ("researcher", []), "w": ("writer", ["s1"])}
    )
    other = launched({"x": ("researcher", [])})
    s1, s2, s3 = (run.tasks.get(subtask__key=k) for k in ("s1", "s2", "s3"))
    start(s1)
    TaskRun.objects.filter(pk=s2.pk).update(state=State.QUEUED)
    TaskRun.objects.filter(pk=s3.pk).update(state=State.THROTTLED, wait_reason="provider busy")
    start(other.tasks.get())
    succeed(run.tasks.get(subtask__key="w"), tokens=(10, 20), cost="0.002")
    by_agent = {lane.agent.name: lane for lane in lanes(run)}
    researcher = by_agent["researcher"]
    assert [v.key for v in researcher.running] == ["s1"]
    assert researcher.queued == 1
    assert [count.text for count in researcher.not_admitted] == ["1 throttled"]
    assert researcher.slots_used == 3  # s1 and s2 here, x in the other run
    assert (researcher.slots_here, researcher.slots_elsewhere) == (2, 1)
    assert researcher.cap == demo_agents["researcher"].max_concurrency == 4
    assert researcher.slot_marks == ["here", "here", "elsewhere", ""]
    assert researcher.slots_text == "2/4 +1 in other runs"  # the shared count says whose it is
    assert researcher.slots_title == "This run holds 2 of researcher's 4 slots; other runs hold 1; 1 free"
    writer = by_agent["writer"]
    assert writer.done == 1 and writer.total == 1
    assert writer.tokens == 30 and writer.cost_usd == Decimal("0.002")
    assert list(by_agent) == ["researcher", "writer"]


def test_a_lane_whose_slots_this_runs_queued_tasks_hold_says_they_wait_for_a_worker(launched, demo_agents):
    demo_agents["researcher"].max_concurrency = 4
    demo_agents["researcher"].save()
    run = launched({f"t{i}": ("researcher", []) for i in range(6)}, cap=4)
    (lane,) = lanes(run)
    assert (lane.running, lane.queued, lane.slots_used) == ([], 4, 4)
    assert lane.idle_text == "4 queued, waiting for a worker; 2 wait for a slot under the run's cap"


def test_a_lane_says_its_slots_are_busy_in_other_runs_only_when_other_runs_hold_them(launched, demo_agents):
    demo_agents["researcher"].max_concurrency = 2
    demo_agents["researcher"].save()
    first = launched({"a": ("researcher", []), "b": ("researcher", [])})
    second = launched({"x": ("researcher", [])})
    (lane,) = lanes(second)
    assert (lane.queued, lane.slots_used) == (0, 2)
    assert lane.idle_text == "its slots are busy in other runs"

    TaskRun.objects.filter(pk=first.tasks.get(subtask__key="b").pk).update(state=State.CANCELLED)
    TaskRun.objects.filter(pk=second.tasks.get().pk).update(state=State.QUEUED)
    (lane,) = lanes(second)
    assert lane.idle_text == "1 queued, waiting for a worker; 1 of 2 slots busy in other runs"


def test_a_lanes_ready_tasks_are_counted_in_the_task_tables_words(launched):
    run = launched({f"s{i}": ("researcher", []) for i in range(4)})
    s0, s1, s2, s3 = (run.tasks.get(subtask__key=f"s{i}") for i in range(4))
    TaskRun.objects.filter(pk__in=[s0.pk, s1.pk]).update(state=State.READY, wait_reason="run cap 2 reached")
    TaskRun.objects.filter(pk=s2.pk).update(state=State.THROTTLED, wait_reason="provider busy")
    TaskRun.objects.filter(pk=s3.pk).update(state=State.READY, wait_reason="")
    (lane,) = lanes(run)
    assert [count.text for count in lane.not_admitted] == ["1 throttled", "2 held back", "1 ready"]
    assert "rate budget" in lane.not_admitted[0].meaning and "cap" in lane.not_admitted[1].meaning

    TaskRun.objects.filter(run=run).update(state=State.QUEUED, wait_reason="")
    (lane,) = lanes(run)
    assert lane.not_admitted == [] and lane.queued == 4


def test_a_paused_runs_held_back_tasks_say_the_pause_holds_them_not_a_cap(launched, demo_agents):
    demo_agents["researcher"].max_concurrency = 1
    demo_agents["researcher"].save()
    run = launched({f"s{i}": ("researcher", []) for i in range(3)})  # one queued, two held by the limit
    (lane,) = lanes(run)
    (held,) = lane.not_admitted
    assert held.text == "2 held back" and "concurrency cap" in held.meaning
    runs.pause(run)
    (held,) = lanes(run)[0].not_admitted
    assert held.meaning == "held back: the run is paused, nothing new starts until it is resumed"
    runs.resume(run)
    (held,) = lanes(run)[0].not_admitted
    assert "concurrency cap" in held.meaning


def test_an_ended_runs_lane_holds_no_slots_whatever_other_runs_use(launched, demo_agents):
    cancelled = launched({"a": ("researcher", []), "b": ("researcher", [])})
    other = launched({"x": ("researcher", []), "y": ("researcher", [])})
    start(other.tasks.get(subtask__key="x"))  # y stays queued: two of the agent's slots in use
    runs.cancel(cancelled)
    (lane,) = lanes(cancelled)
    assert (lane.slots_here, lane.slots_elsewhere, lane.slots_used) == (0, 0, 0)
    assert lane.slots_text == "0/4" and lane.slot_marks == ["", "", "", ""]
    assert lane.slots_title == "This run has ended: it holds none of researcher's 4 slots"
    assert lane.idle_text == "ended before any of its tasks ran"  # "ended" read as if it had worked
    (running,) = lanes(other)
    assert (running.slots_here, running.slots_elsewhere, running.slots_text) == (2, 0, "2/4")


def test_a_lane_whose_tasks_the_run_cap_holds_back_says_so_not_idle(launched, demo_agents):
    """Seen on a 300-task fan-out at its cap: "tester 0/3 · idle · 18 held back", as if the agent
    had nothing to do; the run's cap, full with other agents' tasks, held them."""
    run = launched({"a": ("researcher", []), "b": ("writer", []), "c": ("writer", [])}, cap=1)
    by_agent = {lane.agent.name: lane for lane in lanes(run)}
    assert by_agent["researcher"].queued == 1  # the one the cap admitted
    writer = by_agent["writer"]
    assert [count.text for count in writer.not_admitted] == ["2 held back"]
    assert writer.idle_text == "2 wait for a slot under the run's cap"
    runs.pause(run)
    writer = {lane.agent.name: lane for lane in lanes(run)}["writer"]
    assert writer.idle_text == "paused: nothing new starts until the run is resumed"  # the pause holds them now


def test_a_lane_says_ended_once_one_of_its_tasks_ran_and_finished_when_all_succeeded(launched, demo_agents):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    start(run.tasks.get(subtask__key="a"))
    runs.cancel(run)
    (lane,) = lanes(run)
    assert lane.idle_text == "ended"
    done = launched({"a": ("researcher", [])})
    succeed(done.tasks.get(), tokens=(10, 20), cost="0.002")
    (lane,) = lanes(done)
    assert lane.idle_text == "finished"
