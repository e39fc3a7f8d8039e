"""Admission (orchestrator/engine/admission.py), through the scheduling step: every cap at once,
the order ready tasks start in, rate budgets, and why the others wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator import ratelimit
from orchestrator.engine import runs, scheduler
from orchestrator.models import Attempt, Event, ProviderLimit, TaskRun
from tests.orchestrator.engine.conftest import BUDGETS
from tests.orchestrator.engine.steps import finish, states

State = TaskRun.State


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
    assert all(t.wait_reason == "run cap reached (3 queued or running)" and t.wait_code == "run_cap" for t in waiting)


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
def test_admission_meters_requests_per_minute_and_shows_throttled_tasks(demo_agents, make_plan, still_budgets):
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
def test_admission_meters_output_tokens_per_minute(demo_agents, make_plan, still_budgets):
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
    assert set(held.values_list("wait_reason", flat=True)) == {"run cap reached (2 queued or running)"}
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


@pytest.mark.django_db
def test_a_step_takes_each_budget_once_for_all_it_admits_and_each_attempt_holds_its_share(
    demo_agents, make_plan, still_budgets, monkeypatch
):
    """A launch at cap 64 took its budgets one Redis round trip per task: one taking per budget."""
    ProviderLimit.objects.create(
        provider="simulated", model="sim-1", requests_per_minute=100, output_tokens_per_minute=100_000
    )
    demo_agents["researcher"].max_concurrency = 10
    demo_agents["researcher"].save()
    takings = []
    reserve = ratelimit.reserve

    def counted(key, amount, per_minute, **kw):
        takings.append((key, amount))
        return reserve(key, amount, per_minute, **kw)

    monkeypatch.setattr(ratelimit, "reserve", counted)
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(5)}), cap=5)
    assert run.tasks.filter(state=State.QUEUED).count() == 5
    assert takings == [(BUDGETS["rpm"], 5), (BUDGETS["otpm"], 5 * 1024)]
    attempts = Attempt.objects.filter(task_run__run=run)
    assert [a.reserved_output_tokens for a in attempts] == [1024] * 5  # settled one by one at their end
    assert len({a.rate_window for a in attempts}) == 1 and attempts[0].rate_window is not None
    assert ratelimit.peek(BUDGETS["rpm"], 100)[0] == 95


@pytest.mark.django_db
def test_when_a_step_admits_more_than_a_budget_holds_as_many_start_as_fit_and_nothing_more_is_taken(
    demo_agents, make_plan, still_budgets
):
    ProviderLimit.objects.create(
        provider="simulated", model="sim-1", requests_per_minute=10, output_tokens_per_minute=3 * 1024 + 100
    )
    demo_agents["researcher"].max_concurrency = 10
    demo_agents["researcher"].save()
    run = runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(5)}), cap=5)
    assert run.tasks.filter(state=State.QUEUED).count() == 3  # 3 × 1,024 output tokens fit
    throttled = run.tasks.filter(state=State.THROTTLED)
    assert {t.wait_code for t in throttled} == {"rate_limit_output"} and throttled.count() == 2
    # The requests taken for all five together were given back when their output tokens did not fit.
    assert ratelimit.peek(BUDGETS["rpm"], 10)[0] == 10 - 3
    assert ratelimit.peek(BUDGETS["otpm"], 3 * 1024 + 100)[0] == 100
