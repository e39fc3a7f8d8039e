"""Claims about processes, proved with real qcluster processes against the test database.

Caps are checked from what workers did (attempt start and finish times), not from the
scheduler's own counters; crashes are real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import runs
from orchestrator.models import Attempt, Event, Run, TaskRun
from tests.conftest import (
    child_pids,
    fast_latency,
    kill_session,
    pid_written_to,
    process_group,
    session_members,
    wait_for_run,
    wait_until,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def peak_overlap(intervals) -> int:
    """Most intervals open at one instant (an end before a start at the same instant)."""
    points = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals], key=lambda p: (p[0], p[1])
    )
    peak = current = 0
    for _, step in points:
        current += step
        peak = max(peak, current)
    return peak


def attempt_intervals(run: Run, **filters):
    rows = Attempt.objects.filter(task_run__run=run, started_at__isnull=False, **filters)
    return [(a.started_at, a.finished_at or a.heartbeat_at) for a in rows]


def assert_each_task_succeeded_exactly_once(run: Run) -> None:
    succeeded = Counter(
        Attempt.objects.filter(task_run__run=run, state=Attempt.State.SUCCEEDED).values_list("task_run_id", flat=True)
    )
    task_ids = list(run.tasks.values_list("pk", flat=True))
    assert {t: succeeded[t] for t in task_ids} == {t: 1 for t in task_ids}
    assert set(run.tasks.values_list("state", flat=True)) == {TaskRun.State.SUCCEEDED}


def no_task_ran_twice_at_once(run: Run) -> bool:
    by_task = defaultdict(list)
    for attempt in Attempt.objects.filter(task_run__run=run, started_at__isnull=False):
        if attempt.state != Attempt.State.LOST:  # a lost attempt's worker is dead: it runs nothing
            by_task[attempt.task_run_id].append((attempt.started_at, attempt.finished_at))
    return all(peak_overlap(iv) <= 1 for iv in by_task.values())


def start_running_every_task(qcluster, make_agent, make_plan, *, tasks: int, latency_s: float):
    """Start a cluster whose workers drain for 1 s, and a run of `tasks` tasks (each `latency_s`
    long) that it runs all at once; returns the cluster's main process and the run, once they run."""
    make_agent("researcher", max_concurrency=tasks, provider_options=fast_latency(latency_s))
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(tasks)})
    qcluster.env["GLASSBOX_DRAIN_S"] = "1"
    first = qcluster.start()
    run = runs.launch(plan, cap=tasks)
    running = Attempt.objects.filter(task_run__run=run, state="running")
    wait_until(lambda: running.count() == tasks, 60, f"{tasks} running attempts")
    return first, run


def assert_drained_then_finished_by_another_cluster(qcluster, run: Run) -> None:
    """What a stopped cluster's workers ran ended or was handed back (none lost to a lease), and
    another cluster finishes the run, each task succeeding once."""
    started = Attempt.objects.filter(task_run__run=run, started_at__isnull=False)  # by the stopped cluster
    states = set(started.values_list("state", flat=True))
    assert states <= {Attempt.State.SUCCEEDED, Attempt.State.HANDED_BACK}, states
    qcluster.start()
    run = wait_for_run(run, 120, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert no_task_ran_twice_at_once(run)
    assert not Attempt.objects.filter(task_run__run=run, state=Attempt.State.LOST).exists()


def fan_out_plan(make_plan, width: int, agents: list[str]):
    tasks = {"scope": (agents[0], [])}
    for i in range(width):
        tasks[f"part_{i}"] = (agents[i % len(agents)], ["scope"])
    tasks["synthesis"] = (agents[-1], [f"part_{i}" for i in range(width)])
    return make_plan(tasks)


def test_a_plan_runs_end_to_end_without_exceeding_any_cap(qcluster, make_agent, make_plan):
    make_agent("researcher", max_concurrency=2, provider_options=fast_latency(0.4))
    make_agent("writer", max_concurrency=3, provider_options=fast_latency(0.4))
    plan = fan_out_plan(make_plan, 16, ["researcher", "writer"])
    qcluster.workers = 6
    qcluster.start()
    run = wait_for_run(runs.launch(plan, cap=4), 120, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert 2 <= peak_overlap(attempt_intervals(run)) <= 4
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="researcher")) <= 2
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="writer")) <= 3
    synthesis = run.tasks.get(subtask__key="synthesis")
    assert synthesis.started_at >= max(run.tasks.exclude(pk=synthesis.pk).values_list("finished_at", flat=True))


def test_sigkill_of_a_worker_mid_task_leads_to_a_new_attempt_and_the_run_succeeds(qcluster, make_agent, make_plan):
    make_agent("researcher", provider_options=fast_latency(2.5))
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(4)})
    qcluster.start()
    run = runs.launch(plan, cap=2)
    wait_until(lambda: Attempt.objects.filter(task_run__run=run, state="running").exists(), 60, "a running attempt")
    victim = Attempt.objects.filter(task_run__run=run, state="running").first()
    os.kill(int(victim.worker.rsplit(":", 1)[1]), signal.SIGKILL)
    run = wait_for_run(run, 120, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    victim.refresh_from_db()
    assert victim.state == Attempt.State.LOST
    assert Event.objects.filter(run=run, type="attempt.lost", task_run=victim.task_run).exists()
    assert no_task_ran_twice_at_once(run)


def test_sigkill_of_a_worker_holding_fifty_attempts_loses_none_and_applies_none_twice(qcluster, make_agent, make_plan):
    """One worker process hosts many attempts (orchestrator/engine/host.py): killing it loses all of
    them at once. The reaper declares each lost when its lease expires; each is retried, and every
    task still succeeds exactly once."""
    make_agent("researcher", max_concurrency=100, provider_options=fast_latency(6.0))
    plan = make_plan({f"t{i:03}": ("researcher", []) for i in range(100)})
    qcluster.workers = 2
    qcluster.env["GLASSBOX_SLOTS_PER_WORKER"] = "50"
    qcluster.start()
    run = runs.launch(plan, cap=100, budget_usd="5")

    def busiest() -> tuple[str, int]:
        running = Counter(Attempt.objects.filter(task_run__run=run, state="running").values_list("worker", flat=True))
        return running.most_common(1)[0] if running else ("", 0)

    wait_until(lambda: busiest()[1] >= 50, 90, "a worker holding 50 running attempts")
    victim, _ = busiest()
    os.kill(int(victim.rsplit(":", 1)[1]), signal.SIGKILL)
    held = set(Attempt.objects.filter(task_run__run=run, worker=victim, state="running").values_list("pk", flat=True))
    assert len(held) >= 50  # nothing it ran can change any more: its attempts died with it
    run = wait_for_run(run, 180, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    lost = set(Attempt.objects.filter(task_run__run=run, state=Attempt.State.LOST).values_list("pk", flat=True))
    assert lost == held
    assert Event.objects.filter(run=run, type="attempt.lost").count() == len(held)
    assert no_task_ran_twice_at_once(run)
    assert Event.objects.filter(run=run, type="task.succeeded").count() == 100


def test_killing_a_whole_qcluster_then_starting_another_completes_the_run(qcluster, make_agent, make_plan, settings):
    """With no retry to spare (max_retries 0): a worker's death is not the task's fault and spends
    none. The tasks it ran said they would be retried, then failed "after 1 attempt" and their
    downstream was skipped."""
    settings.GLASSBOX_QUEUED_GRACE_S = 5  # admissions made in this process
    qcluster.env["GLASSBOX_QUEUED_GRACE_S"] = "5"
    make_agent("researcher", provider_options=fast_latency(2.0), max_retries=0)
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(6)})
    first = qcluster.start()
    run = runs.launch(plan, cap=3)
    wait_until(lambda: Attempt.objects.filter(task_run__run=run, state="running").count() >= 2, 60, "running attempts")
    qcluster.kill(first)
    qcluster.start()
    run = wait_for_run(run, 150, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert Attempt.objects.filter(task_run__run=run, state=Attempt.State.LOST).count() >= 2
    assert Event.objects.filter(run=run, type="attempt.lost").count() >= 2
    assert set(run.tasks.values_list("fault_count", flat=True)) == {0}


def test_sigkill_of_a_clusters_main_process_alone_stops_the_rest_of_it_and_loses_nothing(
    qcluster, make_agent, make_plan
):
    """`kill -9` of `manage.py qcluster` only: its sentinel, re-parented to PID 1, ran its workers on
    with nobody to stop them. It now stops its cluster as the main process would have: every
    process of the cluster ends, the workers drain (attempts finish or are handed back, none is
    lost) and another cluster finishes the run."""
    first, run = start_running_every_task(qcluster, make_agent, make_plan, tasks=4, latency_s=4.0)
    assert len(process_group(first.pid)) >= 5  # main process, sentinel, pusher, monitor, workers

    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)

    wait_until(lambda: not process_group(first.pid), 60, "every process of the killed cluster to end")
    assert_drained_then_finished_by_another_cluster(qcluster, run)


def test_sigkill_of_a_clusters_sentinel_alone_drains_its_workers_and_loses_nothing(qcluster, make_agent, make_plan):
    """`kill -9` of the sentinel only (the OOM killer picks a process, not a group): its workers,
    re-parented, hosted their attempts on with nobody to stop them, and its pusher went on taking
    tasks from the broker. Each worker now drains as on a stop (attempts finish or are handed
    back, none is lost) and every process of the cluster ends, the main process with a failure (it
    exited 0 in silence); another cluster finishes the run."""
    first, run = start_running_every_task(qcluster, make_agent, make_plan, tasks=4, latency_s=4.0)
    (sentinel,) = child_pids(first.pid)
    assert len(child_pids(sentinel)) >= 3  # pusher, monitor, workers

    os.kill(sentinel, signal.SIGKILL)

    assert first.wait(timeout=30) == 1  # the cluster is gone: a failure, for people and process managers
    assert f"sentinel (pid {sentinel}) was killed by SIGKILL" in qcluster.logs()
    wait_until(lambda: not process_group(first.pid), 60, "every process of the cluster to end")
    assert_drained_then_finished_by_another_cluster(qcluster, run)


def test_sigkill_of_a_worker_mid_tool_call_leaves_nothing_of_its_stdio_tool_server(
    qcluster, make_agent, make_plan, settings, tmp_path, monkeypatch
):
    """A stdio tool server blocked in a synchronous call reads nothing, not even the end of its
    stdin: when its worker was SIGKILLed, it ran on re-parented to PID 1 until the call returned
    (an hour here). The kernel now kills it with its worker (orchestrator/tools/stdio_launcher.py),
    and with it what it started (orchestrator/process_group.py): here the server is a shell script
    that runs the MCP server beside a helper, both of which outlived the script."""
    from orchestrator.governance import tool_registry
    from orchestrator.tools.workspace import run_directory
    from tests.orchestrator.tools.conftest import WRAPPED_SERVER_SCRIPT

    settings.GLASSBOX_ARTIFACTS_DIR = tmp_path / "artifacts"
    qcluster.env["GLASSBOX_ARTIFACTS_DIR"] = str(settings.GLASSBOX_ARTIFACTS_DIR)
    monkeypatch.chdir(tmp_path)  # registration lists the tools with the server in this directory
    tool_registry.add_server("testsrv", command=["sh", "-c", WRAPPED_SERVER_SCRIPT], actor="test")
    make_agent("researcher")
    tool_registry.grant("researcher", "testsrv:block", actor="test")
    plan = make_plan({"t": ("researcher", [], {"instructions": "Use the block tool."})})
    qcluster.workers = 1
    qcluster.start()
    run = runs.launch(plan)
    directory = run_directory(run.pk, create=False)
    server = pid_written_to(directory / "blocking.pid")  # written by the server in the call
    script, helper = pid_written_to(directory / "script.pid"), pid_written_to(directory / "helper.pid")
    worker = Attempt.objects.get(task_run__run=run, state="running").worker
    try:
        # The host's loop thread, which started the script, lives on; so does the launcher's watcher.
        assert {script, server, helper} < set(session_members(script))
        os.kill(int(worker.rsplit(":", 1)[1]), signal.SIGKILL)
        wait_until(lambda: not session_members(script), 15, "every process of the tool server to end")
    finally:
        kill_session(script)


def test_timeouts_retry_then_fail_and_only_the_failed_branch_stops(qcluster, make_agent, make_plan):
    make_agent("researcher", provider_options={"hang": True}, timeout_s=1, max_retries=2)
    make_agent("writer", provider_options=fast_latency(0.2))
    plan = make_plan({"a": ("researcher", []), "b": ("writer", ["a"]), "x": ("writer", []), "y": ("writer", ["x"])})
    qcluster.start()
    run = wait_for_run(runs.launch(plan), 120, qcluster)
    states = dict(run.tasks.values_list("subtask__key", "state"))
    assert states == {"a": "failed", "b": "skipped", "x": "succeeded", "y": "succeeded"}
    attempts = list(
        Attempt.objects.filter(task_run__subtask__key="a", task_run__run=run).values_list("state", flat=True)
    )
    assert attempts == ["timed_out"] * 3
    assert run.tasks.get(subtask__key="b").error == "upstream a did not succeed"
    assert run.status == "failed" and "a — timed out after 1 s, after 3 attempts;" in run.summary


def test_a_rate_limit_storm_backs_off_and_the_run_completes(qcluster, make_agent, make_plan):
    options = {**fast_latency(0.1), "server_limit": {"requests_per_minute": 8}}
    # Ten tasks, not more: past the limit's minute window the limit lets one more request in
    # every 7.5 s, so each task beyond the limit adds that much to the slowest test of the suite.
    make_agent("researcher", provider_options=options, max_concurrency=10, max_retries=0)
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(10)})
    qcluster.workers = 6
    qcluster.start()
    run = wait_for_run(runs.launch(plan, cap=10), 240, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    limited = Attempt.objects.filter(task_run__run=run, state="failed", error__contains="429")
    assert limited.count() >= 2  # 10 requests against 8 a minute: at least 2 answered 429
    assert Event.objects.filter(run=run, type="provider.backoff").count() == limited.count()


def test_two_qclusters_share_the_work_without_running_a_task_twice(qcluster, make_agent, make_plan):
    make_agent(
        "researcher", max_concurrency=3, provider_options={"latency": {"dist": "uniform", "low_s": 0.05, "high_s": 0.3}}
    )
    make_agent(
        "writer", max_concurrency=2, provider_options={"latency": {"dist": "uniform", "low_s": 0.05, "high_s": 0.3}}
    )
    plan = make_plan({f"t{i}": ("researcher" if i % 2 else "writer", []) for i in range(60)})
    qcluster.workers = 3
    # One attempt per worker process at a time: a host of 50 slots would take every attempt of so
    # small a cap by itself (and keep each success's successor), leaving nothing to share.
    qcluster.env["GLASSBOX_SLOTS_PER_WORKER"] = 1
    qcluster.start()
    qcluster.start()
    run = wait_for_run(runs.launch(plan, cap=5), 180, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert no_task_ran_twice_at_once(run)
    assert peak_overlap(attempt_intervals(run)) <= 5
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="researcher")) <= 3
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="writer")) <= 2
    workers = set(Attempt.objects.filter(task_run__run=run).values_list("worker", flat=True))
    assert len(workers) >= 2


# --- Graceful shutdown (orchestrator/engine/host.py: draining) -----------------------------------------


def test_sigterm_to_a_whole_cluster_hands_back_what_it_runs_and_another_cluster_finishes(
    qcluster, make_agent, make_plan
):
    """What systemd does: SIGTERM to every process of the cluster at once. Each worker stops taking
    work, lets its attempts run for GLASSBOX_DRAIN_S, hands back the rest (their tasks ready again
    at once, no retry spent, no lease left to expire) and exits."""
    first, run = start_running_every_task(qcluster, make_agent, make_plan, tasks=6, latency_s=8.0)
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(timeout=30)
    first_attempts = Attempt.objects.filter(task_run__run=run, number=1)
    assert set(first_attempts.values_list("state", flat=True)) == {Attempt.State.HANDED_BACK}
    assert Event.objects.filter(run=run, type="attempt.handed_back").count() == 6
    assert set(run.tasks.values_list("fault_count", flat=True)) == {0}
    assert not run.tasks.filter(state="running").exists()
    qcluster.start()
    run = wait_for_run(run, 120, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    assert not Attempt.objects.filter(task_run__run=run, state=Attempt.State.LOST).exists()


def test_sigterm_to_a_clusters_main_process_stops_it_taking_work_and_lets_its_attempts_finish(
    qcluster, make_agent, make_plan
):
    make_agent("researcher", max_concurrency=4, provider_options=fast_latency(2.0))
    plan = make_plan({f"t{i:02}": ("researcher", []) for i in range(16)})
    qcluster.env["GLASSBOX_DRAIN_S"] = "10"
    first = qcluster.start()
    run = runs.launch(plan, cap=4)
    wait_until(lambda: Attempt.objects.filter(task_run__run=run, state="running").count() == 4, 60, "four running")
    running_at_term = set(Attempt.objects.filter(task_run__run=run, state="running").values_list("pk", flat=True))
    term_at = timezone.now()
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=60)
    workers = set(Attempt.objects.filter(pk__in=running_at_term).values_list("worker", flat=True))
    # It finished what it ran (2 s each, well within the grace) ...
    assert set(Attempt.objects.filter(pk__in=running_at_term).values_list("state", flat=True)) == {"succeeded"}
    # ... and took no new work once its heartbeat saw the cluster stopping (about a second).
    late = Attempt.objects.filter(
        task_run__run=run, worker__in=workers, started_at__gt=term_at + timedelta(seconds=2.5)
    )
    assert not late.exists(), list(late.values_list("started_at", flat=True))
    qcluster.start()
    run = wait_for_run(run, 120, qcluster)
    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)


def test_the_workspace_report_runs_its_tools_and_leaves_its_artifacts(qcluster, tmp_path, settings):
    """seed_demo, then examples/workspace_report.yaml on the simulated provider with real workers:
    the agents call the demo tool server over MCP and what they write is in the run's workspace."""
    from io import StringIO

    from django.core.management import call_command

    from orchestrator import plans
    from orchestrator.engine import launching
    from orchestrator.engine.run_settings import RunSettings
    from orchestrator.models import Agent
    from orchestrator.tools.workspace import artifacts
    from tests.conftest import ROOT

    settings.GLASSBOX_ARTIFACTS_DIR = tmp_path / "artifacts"
    qcluster.env["GLASSBOX_ARTIFACTS_DIR"] = str(settings.GLASSBOX_ARTIFACTS_DIR)
    call_command("seed_demo", stdout=StringIO())
    Agent.objects.update(provider_options=fast_latency(0.1))
    spec, document = plans.load_file(str(ROOT / "examples" / "workspace_report.yaml"))
    run = launching.launch_spec(
        spec,
        document=document,
        settings=RunSettings.of(budget_usd="5", require_plan_approval=False),
        source_name="workspace_report.yaml",
    )
    qcluster.start()
    run = wait_for_run(run, timeout=120, cluster=qcluster)
    assert run.status == Run.Status.SUCCEEDED, run.summary
    written = [
        e.payload
        for e in Event.objects.filter(run=run, type="tool.result").order_by("seq")
        if e.payload["server_tool"] == "write_file"
    ]
    assert written and not any(p["error"] for p in written)
    files = dict(artifacts(run.pk))
    assert files and all(size > 0 for size in files.values()), files
    # What the example's header says the simulated agents write: one of the tool's example files
    # (drawn from the run's seed), not the figures, and no report.md.
    assert set(files) <= {"notes/findings.md", "report/draft.md"}, files
    calculated = Event.objects.filter(run=run, type="tool.result", payload__server_tool="calculate")
    assert calculated.exists()
