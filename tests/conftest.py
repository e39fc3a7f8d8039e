"""Shared fixtures: small agents and plans built in code, and real qcluster processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from orchestrator.models import Agent, Plan, ProviderLimit, Run

ROOT = Path(__file__).resolve().parent.parent


def fast_latency(seconds: float = 0.2) -> dict:
    return {"latency": {"dist": "fixed", "seconds": seconds}}


@pytest.fixture
def make_agent(db):
    def make(name: str = "researcher", **fields) -> Agent:
        fields.setdefault("provider_options", fast_latency())
        fields.setdefault("max_concurrency", 4)
        return Agent.objects.create(name=name, role=name.title(), **fields)

    return make


@pytest.fixture
def demo_agents(make_agent):
    """Simulated agents with the demo team's names, fast enough for tests."""
    return {name: make_agent(name) for name in ["researcher", "architect", "coder", "tester", "reviewer", "writer"]}


@pytest.fixture
def priced_limit(db):
    return ProviderLimit.objects.create(
        provider="simulated", model="sim-1", input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
    )


@pytest.fixture
def make_plan(db):
    """Build and save a plan from a compact description: {key: (agent, [upstream keys], extra fields)}."""
    from orchestrator import plans

    def make(tasks: dict, goal: str = "Test goal", defaults: dict | None = None) -> Plan:
        subtasks = []
        for key, spec in tasks.items():
            agent, deps, *extra = spec
            item = {"key": key, "agent": agent, "title": key.replace("_", " ").title(), "depends_on": list(deps)}
            if extra:
                item.update(extra[0])
            subtasks.append(item)
        data = {"goal": goal, "subtasks": subtasks}
        if defaults:
            data["defaults"] = defaults
        spec = plans.validate(data)
        return plans.save_plan(spec, source=Plan.Source.MANUAL)

    return make


def child_database_url() -> str:
    """A DATABASE_URL that points a child process at the database this test uses."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    auth = f"{user}:{s['PASSWORD']}@" if s.get("PASSWORD") else (f"{user}@" if user else "")
    return f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def child_env(**overrides) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": child_database_url(),
            "DJANGO_SETTINGS_MODULE": "orchestrator.settings",
            "GLASSBOX_LEASE_S": "3",
            "GLASSBOX_TICK_S": "0.5",
            "GLASSBOX_RETRY_BASE_S": "0.2",
            "GLASSBOX_RETRY_MAX_S": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class QCluster:
    """A real `manage.py qcluster` process group against the test database."""

    def __init__(self, log_dir: Path, workers: int = 4, **env):
        self.log_dir = log_dir
        self.workers = workers
        self.env = env
        self.procs: list[subprocess.Popen] = []

    def start(self) -> subprocess.Popen:
        index = len(self.procs)
        log = open(self.log_dir / f"qcluster-{index}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "qcluster"],
            cwd=ROOT,
            env=child_env(GLASSBOX_WORKERS=self.workers, **self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
        """Kill a whole cluster: its main process and every worker in its process group."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM to each cluster's main process (q2 then stops its workers), SIGKILL what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a cluster that did not stop
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.log_dir.glob("qcluster-*.log")))


@pytest.fixture
def qcluster(transactional_db, tmp_path):
    """Start real qcluster processes on demand: `qcluster.start()`; all are stopped afterwards."""
    cluster = QCluster(tmp_path)
    yield cluster
    cluster.stop()


def wait_for_run(run: Run, timeout: float = 90, cluster: QCluster | None = None) -> Run:
    """Poll until the run ends; fail with the cluster's logs when it does not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_finished:
            return run
        time.sleep(0.2)
    states = list(run.tasks.values_list("subtask__key", "state", "wait_reason", "error"))
    logs = cluster.logs() if cluster else ""
    pytest.fail(f"run {run.pk} still {run.status} after {timeout} s; tasks: {states}\n{logs}")


def wait_until(predicate, timeout: float = 30, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {message}")
