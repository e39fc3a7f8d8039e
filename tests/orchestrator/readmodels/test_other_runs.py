"""What other runs hold of a run's agents' slots, and for how long."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.engine import runs
from orchestrator.models import Agent
from orchestrator.readmodels.other_runs import NONE, OtherRuns, other_runs

from .conftest import start


def test_other_runs_queued_and_running_tasks_hold_their_agents_slots_until_expected_to_end(launched, demo_agents):
    Agent.objects.filter(name="researcher").update(max_concurrency=3)
    other = launched({"x": ("researcher", []), "y": ("researcher", []), "w": ("writer", [])})
    run = launched({"r": ("researcher", [])})
    researcher = demo_agents["researcher"].pk
    x = other.tasks.get(subtask__key="x")
    start(x, ago_s=0.15)
    x.refresh_from_db()
    now = x.started_at + timedelta(seconds=0.15)

    held = other_runs(run, [researcher])
    # The writer's task too: it holds a request of the same provider and model in flight.
    assert held.counts() == {researcher: 2, demo_agents["writer"].pk: 1}  # not this run's own task
    assert held.in_flight() == {("simulated", "sim-1"): 3}
    held = held.on([("simulated", "sim-1")])
    assert held.on([("anthropic", "claude")]).slots == ()
    held = OtherRuns(tuple(slot for slot in held.slots if slot.agent_id == researcher))
    left = sorted(slot.seconds_left(now) for slot in held.slots)
    assert left == pytest.approx([0.05, 0.2])  # x ran 0.15 of its 0.2 s; y is queued: all of it
    assert sorted(slot.seconds_left(now, pace=2.0) for slot in held.slots) == pytest.approx([0.25, 0.4])
    long_over = x.started_at + timedelta(seconds=5)
    assert min(slot.seconds_left(long_over) for slot in held.slots) == pytest.approx(0.02)  # a tenth of 0.2 s


def test_an_ended_run_is_told_of_no_other_runs_slots(launched, demo_agents):
    launched({"x": ("researcher", [])})
    run = launched({"r": ("researcher", [])})
    assert other_runs(run, [demo_agents["researcher"].pk]).counts() == {demo_agents["researcher"].pk: 1}
    runs.cancel(run)
    assert other_runs(run, [demo_agents["researcher"].pk]) == NONE
