"""The scheduler benchmark: `bench_scheduler --quick --json` end to end, and its pure parts.

No timing is asserted (machines are shared and noisy): the smoke test checks that the command
runs real workers to the end and reports numbers in their possible ranges.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bench import dags, harness, strategies
from bench.harness import percentile
from bench.report import _probe_text
from tests.conftest import ROOT


@pytest.mark.processes
def test_bench_scheduler_quick_json_prints_one_object_with_the_headline_numbers():
    proc = subprocess.run(
        [sys.executable, "manage.py", "bench_scheduler", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert {"efficiency", "makespan_s", "lower_bound_s", "vs_waves", "dispatch_p95_ms"} <= set(result)
    assert result["profile"] == "embedded" and result["cap"] == 4 and result["repeats"] == 1
    assert 0 < result["lower_bound_s"] <= result["makespan_s"]
    assert 0 < result["efficiency"] <= 1
    assert result["efficiency"] == pytest.approx(result["lower_bound_s"] / result["makespan_s"], abs=0.002)
    assert result["vs_waves"] > 0
    assert 0 <= result["dispatch_p50_ms"] <= result["dispatch_p95_ms"]
    assert result["scheduler_cpu_ms_per_task"] > 0  # the hooks measured advance() in the workers


def test_durations_are_a_deterministic_function_of_seed_and_node():
    first, again, other = dags.layered(seed=7), dags.layered(seed=7), dags.layered(seed=8)
    assert first.durations == again.durations and first.edges == again.edges
    assert first.durations != other.durations
    assert dags.duration_s(7, "l00_00", 0.5, 0.6) == first.durations["l00_00"]
    assert all(0.5 / dags.CLIP <= d <= 0.5 * dags.CLIP for d in first.durations.values())


def test_generators_build_the_shapes_of_the_issue():
    layered, fan, chain, random_dag = dags.layered(), dags.fan(), dags.chain(), dags.random_dag()
    assert len(layered.keys) == 200 and len(fan.keys) == 102 and len(chain.keys) == 50 and len(random_dag.keys) == 300
    assert len(fan.upstreams["sink"]) == 100 and all(fan.upstreams[f"m{i:03d}"] == ["source"] for i in range(100))
    order = {k: i for i, k in enumerate(random_dag.keys)}
    assert all(order[up] < order[down] for up, down in random_dag.edges)  # keys are a topological order
    assert chain.critical_path_s == pytest.approx(chain.total_work_s)


def test_lower_bound_and_policy_schedule():
    dag = dags.Dag(
        "t", "test", 1, ["a", "b", "c", "d"], [("a", "b")], 1.0, 0.0, {"a": 1.0, "b": 2.0, "c": 1.0, "d": 1.0}
    )
    assert dag.critical_path_s == 3.0
    assert dag.lower_bound_s(1) == 5.0 and dag.lower_bound_s(2) == 3.0 and dag.lower_bound_s(None) == 3.0
    # cap 2: "a" (two hops to the end) first with "c"; then "b" and "d": 1 + 2 = 3
    assert dags.policy_schedule_s(dag, 2) == 3.0
    assert dags.policy_schedule_s(dag, 1) == 5.0


def test_sliding_window_bound_follows_the_limiters_rule():
    # 60 per minute, 10 s left in the window: 60 at once, then room again as the old window fades
    times = strategies.sliding_window_accept_times(1000.0, 62, 60, first_window_end=1010.0)
    assert times[:60] == [1000.0] * 60
    assert 1010.0 <= times[60] <= 1011.1 and times[61] > times[60]
    bound = strategies.rate_limit_bound_s([1.0, 5.0], [0.0, 2.0], 0.0)
    assert bound == 5.0  # the 5 s task takes the first slot: max(0 + 5, 2 + 1)


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert math.isclose(percentile([0.0, 10.0], 95), 9.5)


def test_cpu_probe_times_its_fixed_loop(monkeypatch):
    monkeypatch.setattr(harness, "PROBE_STEPS", 200_000)
    short = harness.cpu_probe_s(repeats=1)
    monkeypatch.setattr(harness, "PROBE_STEPS", 4_000_000)
    long = harness.cpu_probe_s(repeats=1)
    assert 0 < short < long  # twenty times the steps cannot take less


def test_machine_table_gives_the_probe_of_the_runs_start_and_end():
    both = _probe_text({"cpu_probe_s_at_start": 0.861, "cpu_probe_s_at_end": 0.9})
    assert both.startswith("0.86 s at the run's start, 0.90 s at its end (a 10-million-step Python loop")
    assert _probe_text({"cpu_probe_s_at_start": 1.5}).startswith("1.50 s at the run's start (")
    assert _probe_text({}) == "not measured"  # results from before the probe
