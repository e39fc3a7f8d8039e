"""Concurrent `manage.py launch` processes while a qcluster advances runs (issue 14, found 1).

On PostgreSQL, plan saving used to lock the plan's agents FOR UPDATE in name order, before the
run and the provider limits, while every `advance` locks run, provider limits, then agents by id:
launches deadlocked with the workers (and the error blamed a missing `migrate`). Here five
launches of the 22-task exploration plan start at once against a running cluster, twice; every
one must launch, and every run must finish.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.models import Run
from tests.conftest import ROOT, child_env, wait_for_run, wait_until

pytestmark = [pytest.mark.services, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LAUNCHES_AT_ONCE = 5
ROUNDS = 2


def launch_processes(count: int) -> list[subprocess.Popen]:
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "launch",
        str(ROOT / "examples" / "exploration.yaml"),
        "--budget",
        "5",
        "--cap",
        "8",
    ]
    env = child_env()
    return [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]


def test_concurrent_launches_against_a_busy_cluster_all_launch(qcluster, demo_agents, priced_limit):
    from orchestrator.engine.cluster import cluster_is_running

    qcluster.start()
    wait_until(cluster_is_running, 60, "the qcluster to report in")

    for _ in range(ROUNDS):
        processes = launch_processes(LAUNCHES_AT_ONCE)
        results = [(p.wait(timeout=120), *p.communicate()) for p in processes]
        failures = [f"exit {code}: {err.strip()}" for code, _, err in results if code != 0]
        assert failures == [], "\n".join(failures)
        assert all("Launched run" in out for _, out, _ in results)

    launched = list(Run.objects.order_by("pk"))
    assert len(launched) == LAUNCHES_AT_ONCE * ROUNDS
    for run in launched:
        assert wait_for_run(run, 180, qcluster).status == Run.Status.SUCCEEDED, run.summary
