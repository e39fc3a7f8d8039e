"""The run page's agent lanes."""

from __future__ import annotations

from decimal import Decimal

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
    assert researcher.waiting == 1
    assert researcher.slots_used == 3  # s1 and s2 here, x in the other run
    assert researcher.cap == demo_agents["researcher"].max_concurrency
    assert researcher.slot_marks.count(True) == 3
    writer = by_agent["writer"]
    assert writer.done == 1 and writer.total == 1
    assert writer.tokens == 30 and writer.cost_usd == Decimal("0.002")
    assert list(by_agent) == ["researcher", "writer"]
