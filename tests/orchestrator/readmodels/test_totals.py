"""The run page's totals: ETA, effective cap, pace, budget used."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.models import ProviderLimit, Run, TaskRun
from orchestrator.plans.dag import SinksFirst
from orchestrator.readmodels.tasks import DISPLAY_ORDER, tasks_query
from orchestrator.readmodels.totals import effective_cap, pace, remaining_seconds, totals

from .conftest import succeed

State = TaskRun.State


def test_remaining_seconds_is_the_larger_of_critical_path_and_work_over_cap():
    chain = SinksFirst.of(["a", "b", "c"], [("a", "b"), ("b", "c")])
    assert remaining_seconds(chain, {"a": 1, "b": 2, "c": 3}, cap=4) == 6
    keys = [f"t{i}" for i in range(8)]
    wide = SinksFirst.of(keys, [])
    assert remaining_seconds(wide, {k: 2.0 for k in keys}, cap=2) == 8
    assert remaining_seconds(wide, {k: 2.0 for k in keys}, cap=100) == 2
    assert remaining_seconds(SinksFirst.of([], []), {}, cap=1) == 0


def test_finished_tasks_weigh_nothing_in_the_remaining_time():
    assert remaining_seconds(SinksFirst.of(["a", "b"], [("a", "b")]), {"a": 0.0, "b": 5.0}, cap=1) == 5


def test_totals_count_states_and_estimate_the_time_left(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", ["a"]), "c": ("writer", ["b"])}, cap=3)
    result = totals(run)
    assert result.total == 3 and result.done == 0
    assert result.eta_s is not None and result.eta_s > 0
    full = result.eta_s
    succeed(run.tasks.get(subtask__key="a"), took_s=0.2)  # as fast as estimated (fast_latency)
    later = totals(run)
    assert later.done == 1
    assert later.eta_s == pytest.approx(full * 2 / 3)  # two of three equal steps left
    succeed(run.tasks.get(subtask__key="b"), took_s=0.6)  # three times slower: the ETA learns
    assert totals(run).eta_s == pytest.approx(full / 3 * 2)  # median pace 2
    counts = {c.state: c.count for c in later.counts}
    assert counts[State.SUCCEEDED] == 1
    assert [c.state for c in later.counts] == [s for s in DISPLAY_ORDER if s in counts]


def test_no_eta_once_the_run_ended(launched):
    run = launched({"a": ("researcher", [])})
    runs.cancel(run)
    result = totals(run)
    assert result.eta_s is None
    assert result.status == Run.Status.CANCELLED


def test_effective_cap_is_the_tightest_limit(launched, demo_agents):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])}, cap=10)
    cap = effective_cap(run)
    assert (cap.value, cap.limited_by) == (demo_agents["researcher"].max_concurrency, "agent limits")
    ProviderLimit.objects.filter(provider="simulated", model="sim-1").update(max_in_flight=8, effective_in_flight=2)
    cap = effective_cap(run)
    assert (cap.value, cap.limited_by) == (2, "provider in-flight limit")
    Run.objects.filter(pk=run.pk).update(cap=1)
    run.refresh_from_db()
    assert effective_cap(run).value == 1


def test_pace_scales_estimates_by_this_run_s_finished_tasks(launched):
    run = launched({"a": ("researcher", []), "b": ("researcher", [])})
    tasks = list(tasks_query(run.pk))
    estimates = {"a": 2.0, "b": 2.0}
    assert pace(tasks, estimates) == 1.0
    succeed(run.tasks.get(subtask__key="a"), took_s=6.0)
    tasks = list(tasks_query(run.pk))
    assert pace(tasks, estimates) == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize(
    ("cost", "budget", "percent", "text"),
    [
        ("0.0143", "0.50", 3, "3%"),  # 2.86%: the nearest, not 2%
        ("0.0001", "0.50", 1, "<1%"),
        ("0", "0.50", 0, "0%"),
        ("0.4999", "0.50", 99, "99%"),  # not 100% before the budget is reached
        ("0.50", "0.50", 100, "100%"),
    ],
)
def test_the_budget_used_rounds_to_the_nearest_percent(launched, cost, budget, percent, text):
    run = launched({"a": ("researcher", [])})
    Run.objects.filter(pk=run.pk).update(cost_usd=cost, budget_usd=budget)
    result = totals(run)
    assert (result.cost_percent, result.cost_percent_text) == (percent, text)
