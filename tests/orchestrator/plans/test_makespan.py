"""How long a DAG takes under the run's cap and each agent's own limit, and what sets it."""

from __future__ import annotations

import random

import pytest

from orchestrator.plans import makespan
from orchestrator.plans.dag import SinksFirst
from tests.large_run import large_plan_document

# The demo team's limits (seed_demo).
DEMO_LIMITS = {"researcher": 4, "architect": 2, "coder": 3, "tester": 3, "reviewer": 2, "writer": 2}


def work_of(tasks: dict[str, tuple[str, list[str]]], seconds: float | dict[str, float] = 1.0) -> makespan.Work:
    """Work from {key: (agent, upstream keys)}, each task `seconds` long (or as mapped)."""
    keys = list(tasks)
    edges = [(up, key) for key, (_, ups) in tasks.items() for up in ups]
    durations = seconds if isinstance(seconds, dict) else dict.fromkeys(keys, seconds)
    return makespan.Work(SinksFirst.of(keys, edges), {key: agent for key, (agent, _) in tasks.items()}, durations)


def research_brief() -> makespan.Work:
    """examples/research_brief.yaml: scope, four research angles, the brief."""
    angles = ["operations", "performance", "data_safety", "migration_cost"]
    tasks = {"scope": ("researcher", [])}
    tasks |= {angle: ("researcher", ["scope"]) for angle in angles}
    tasks["brief"] = ("writer", angles)
    return work_of(tasks)


def large_plan() -> makespan.Work:
    """tests/large_run.py's 293 tasks (240 of them researcher probes), a second each."""
    subtasks = large_plan_document()["subtasks"]
    return work_of({s["key"]: (s["agent"], s.get("depends_on", [])) for s in subtasks})


def test_a_wide_step_under_the_cap_takes_rounds_and_the_cap_sets_the_time():
    work = research_brief()
    limits = makespan.Limits(2, DEMO_LIMITS)
    forecast = makespan.forecast(work, limits)
    assert forecast.seconds == 4.0  # 1 + 2 rounds of the four angles + 1, not the critical path's 3
    assert forecast.peak_parallel == 2
    assert makespan.binding(work, limits, forecast.seconds).text == "the run's cap of 2"
    wide = makespan.Limits(4, DEMO_LIMITS)
    assert makespan.forecast(work, wide) == makespan.Forecast(seconds=3.0, peak_parallel=4)
    assert makespan.binding(work, wide, 3.0) == makespan.CRITICAL_PATH


def test_an_agents_own_limit_sets_the_time_of_a_plan_made_of_its_tasks():
    work = large_plan()
    limits = makespan.Limits(8, DEMO_LIMITS)
    forecast = makespan.forecast(work, limits)
    assert forecast.seconds >= 240 / 4  # the researcher's probes, four at once
    assert forecast.seconds >= makespan.lower_bound_s(work, limits) >= 60
    assert forecast.peak_parallel == 8
    binding = makespan.binding(work, limits, forecast.seconds)
    assert binding == makespan.Binding("agent", 4, "researcher")
    assert binding.text == "the researcher's limit of 4 at once"


def test_the_critical_path_sets_the_time_of_a_chain():
    work = work_of({"a": ("researcher", []), "b": ("writer", ["a"]), "c": ("writer", ["b"])}, {"a": 1, "b": 2, "c": 3})
    limits = makespan.Limits(1, DEMO_LIMITS)
    assert makespan.forecast(work, limits) == makespan.Forecast(seconds=6.0, peak_parallel=1)
    assert makespan.binding(work, limits, 6.0).text == "the critical path"


def test_limits_that_bind_only_together_name_the_larger_bound():
    # Eight researcher tasks and four coder tasks under a cap of 4, each agent limited to 3:
    # lifting the cap alone or one agent's limit alone leaves 3 s; the cap's bound, all the work
    # over 4, is the largest.
    work = work_of({f"r{i}": ("researcher", []) for i in range(8)} | {f"c{i}": ("coder", []) for i in range(4)})
    limits = makespan.Limits(4, {"researcher": 3, "coder": 3})
    forecast = makespan.forecast(work, limits)
    assert forecast.seconds == 3.0
    assert makespan.binding(work, limits, forecast.seconds).text == "the run's cap of 4"


def test_what_is_left_starts_after_the_running_tasks_free_their_slots():
    work = work_of({"a": ("researcher", []), "b": ("researcher", []), "c": ("researcher", []), "d": ("writer", ["a"])})
    limits = makespan.Limits(4, {"researcher": 1, "writer": 1})
    # b runs (0.25 s left) and holds the researcher's one slot, so c starts after it; a is done.
    left = makespan.forecast(work, limits, done={"a"}, running={"b": 0.25})
    assert left.seconds == 1.25
    assert makespan.forecast(work, limits, done={"a", "b", "c", "d"}) == makespan.Forecast(0.0, 0)


def test_a_slot_another_run_holds_is_free_only_once_its_task_is_expected_to_end():
    work = work_of({"r1": ("researcher", []), "r2": ("researcher", []), "w": ("writer", [])})
    alone = makespan.Limits(3, {"researcher": 2, "writer": 1})
    assert makespan.forecast(work, alone).seconds == 1.0
    # Another run holds both researcher slots, freeing at 0.5 s and 2 s: r1 starts at 0.5 s, r2
    # when r1 ends; the writer, whose slot is free, is not held up.
    beside = makespan.Limits(3, {"researcher": 2, "writer": 1}, held={"researcher": [0.5, 2.0]})
    assert makespan.forecast(work, beside) == makespan.Forecast(seconds=2.5, peak_parallel=2)


def test_slots_other_runs_hold_do_not_count_against_this_runs_cap():
    work = work_of({"r1": ("researcher", []), "r2": ("researcher", [])})
    limits = makespan.Limits(2, {"researcher": 4}, held={"researcher": [5.0, 5.0]})
    assert makespan.forecast(work, limits).seconds == 1.0  # two of four slots free, the cap of 2 too


def test_a_shared_cap_waits_for_the_slots_other_runs_hold_of_it():
    # A provider's in-flight limit of 2 as the cap, one of them held by another run for 0.5 s.
    work = work_of({"r1": ("researcher", []), "r2": ("researcher", [])})
    limits = makespan.Limits(2, {"researcher": 4}, cap_held=[0.5])
    assert makespan.forecast(work, limits) == makespan.Forecast(seconds=1.5, peak_parallel=2)  # r2 from 0.5 s


def test_a_task_that_ended_before_its_upstreams_does_not_run_again():
    # b was skipped by a person while a, its upstream, still runs.
    work = work_of({"a": ("researcher", []), "b": ("writer", ["a"])})
    left = makespan.forecast(work, makespan.Limits(2, {}), done={"b"}, running={"a": 0.5})
    assert left == makespan.Forecast(seconds=0.5, peak_parallel=1)


def test_a_task_runs_once_its_upstreams_end_whatever_their_agents():
    work = work_of(
        {"a": ("researcher", []), "b": ("writer", []), "c": ("writer", ["a", "b"])}, {"a": 3, "b": 1, "c": 1}
    )
    assert makespan.forecast(work, makespan.Limits(2, DEMO_LIMITS)).seconds == 4.0


@pytest.mark.parametrize("seed", range(20))
def test_the_forecast_is_never_under_a_lower_bound(seed):
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(rng.randint(1, 60))]
    tasks = {
        key: (rng.choice(list(DEMO_LIMITS)), [up for up in keys[:index] if rng.random() < 0.05])
        for index, key in enumerate(keys)
    }
    work = work_of(tasks, {key: rng.choice([0.5, 1.0, 2.0, 4.0]) for key in keys})
    limits = makespan.Limits(rng.randint(1, 10), DEMO_LIMITS)
    forecast = makespan.forecast(work, limits)
    assert forecast.seconds >= makespan.lower_bound_s(work, limits) - 1e-9
    assert forecast.peak_parallel >= 1  # something ran
    assert forecast.peak_parallel <= limits.cap  # and never more than the cap at once


def test_a_cap_under_one_is_refused():
    with pytest.raises(ValueError, match="cap must be at least 1, got 0"):
        makespan.Limits(0, {})


def test_an_agent_with_no_limit_of_its_own_has_the_cap():
    limits = makespan.Limits(3, {"researcher": 8, "writer": 1})
    assert (limits.of("researcher"), limits.of("writer"), limits.of("coder")) == (3, 1, 3)
