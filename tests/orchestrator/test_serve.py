"""`manage.py serve` as a supervisor (issue 14, found 3 and 5), with real processes.

* a qcluster that dies on its own is restarted with backoff while daphne keeps serving; stderr
  and `/health/` say so;
* SIGTERM to every process at once (what systemd's default KillMode does) stops everything
  without waiting out the grace period: django-q2's main process, left hanging in its own
  shutdown once its sentinel was killed, is recognised and killed at once;
* a qcluster whose main process alone is killed is restarted only once its sentinel and workers
  have stopped, and stopping `serve` leaves none of the processes it started;
* the stop grace covers a lease.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.management.commands import serve as serve_command
from tests.conftest import ROOT, child_env, child_pids, process_group, wait_until
from tests.orchestrator.test_cli import free_port, read_until

BANNER = "Ctrl-C stops both"


def health(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=15) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read())


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        children = child_pids(frontier.pop())
        found += children
        frontier += children
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def serve(tmp_path):
    """Start `manage.py serve --clusters N --workers 1` on a free port; stopped (SIGKILL to every
    process it left, and to the process groups of its children) afterwards."""
    started = []

    def start(clusters: int = 2) -> subprocess.Popen:
        port = free_port()
        errors_path = tmp_path / f"serve-{len(started)}.err"
        process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "serve",
                "--port",
                str(port),
                "--clusters",
                str(clusters),
                "--workers",
                "1",
            ],
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=open(errors_path, "w"),
            text=True,
            start_new_session=True,
        )
        process.port, process.errors_path = port, errors_path
        started.append((process, []))
        read_until(process.stdout, BANNER, timeout=90)
        started[-1][1].extend(descendants(process.pid))
        return process

    yield start
    for process, family in started:
        for pid in [process.pid, *family, *descendants(process.pid)]:
            for kill in (os.kill, os.killpg):  # a child's group holds what it left re-parented to PID 1
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        process.wait(timeout=30)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_dead_cluster_is_restarted_while_daphne_and_the_other_cluster_go_on(serve):
    server = serve(clusters=2)
    qclusters = [pid for pid in child_pids(server.pid) if "qcluster" in command_line(pid)]
    assert len(qclusters) == 2
    wait_until(lambda: health(server.port)["checks"]["broker"]["clusters"] == 2, 60, "both clusters to report in")

    os.killpg(qclusters[0], signal.SIGKILL)  # the whole cluster: main process, sentinel, workers

    def restarted() -> bool:
        return "restarted (restart 1)." in server.errors_path.read_text()

    wait_until(restarted, 60, "serve to restart the dead cluster")
    assert server.poll() is None, "serve stopped when one cluster died"
    stderr = server.errors_path.read_text()
    assert "qcluster-1 was killed by SIGKILL on its own; restarting it in 1 s (1 of 2 qclusters running)." in stderr
    assert "qcluster-1 restarted (restart 1)." in stderr
    assert alive(qclusters[1]), "the other cluster was stopped"

    def health_shows_the_restart() -> bool:
        supervised = health(server.port)["checks"]["broker"].get("serve")
        return supervised is not None and supervised["running"] == 2 and supervised["qclusters"][0]["restarts"] == 1

    wait_until(health_shows_the_restart, 30, "/health/ to show the restarted cluster")
    assert health(server.port)["checks"]["broker"]["serve"] == {
        "clusters": 2,
        "running": 2,
        "qclusters": [
            {"name": "qcluster-1", "running": True, "restarts": 1},
            {"name": "qcluster-2", "running": True, "restarts": 0},
        ],
    }
    wait_until(lambda: health(server.port)["checks"]["broker"]["clusters"] == 2, 60, "the new cluster to report in")

    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=90) == 0, server.errors_path.read_text()
    assert "Stopped daphne and 2 qclusters." in server.stdout.read()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sigterm_to_every_process_at_once_stops_serve_without_waiting_out_the_grace(serve):
    server = serve(clusters=2)
    # daphne, and per cluster its main process, sentinel, pusher, monitor and one worker
    wait_until(lambda: len(descendants(server.pid)) >= 1 + 2 * 5, 60, "every cluster's processes to start")
    wait_until(lambda: health(server.port)["checks"]["broker"]["clusters"] == 2, 60, "both clusters to report in")
    family = descendants(server.pid)

    for pid in [server.pid, *family]:  # as systemd stops a unit (KillMode=control-group)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    assert server.wait(timeout=90) == 0, server.errors_path.read_text()
    stderr = server.errors_path.read_text()
    assert "did not stop in time" not in stderr
    wait_until(lambda: not any(alive(pid) for pid in family), 10, "every process of serve to end")


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_qcluster_whose_main_process_was_killed_leaves_nothing_beside_its_restart_or_after_serve(serve):
    """`kill -9` of a qcluster's main process only: its sentinel and workers ran on beside the
    cluster serve started in its place (two clusters), and outlived serve's stop."""
    server = serve(clusters=1)
    [cluster] = [pid for pid in child_pids(server.pid) if "qcluster" in command_line(pid)]
    wait_until(lambda: len(process_group(cluster)) >= 5, 60, "its sentinel, pusher, monitor and worker to start")
    groups = child_pids(server.pid)  # daphne and the qcluster, each the leader of its own group

    os.kill(cluster, signal.SIGKILL)

    wait_until(lambda: "qcluster restarted (restart 1)." in server.errors_path.read_text(), 90, "the restart")
    assert not process_group(cluster), "the new cluster was started beside what the killed one left"
    groups += [pid for pid in child_pids(server.pid) if pid not in groups]
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=90) == 0, server.errors_path.read_text()
    assert "Stopped daphne and qcluster." in server.stdout.read()
    wait_until(lambda: not any(process_group(pgid) for pgid in groups), 30, "every process serve started to end")


def test_the_stop_grace_covers_a_lease_and_a_margin(settings):
    settings.GLASSBOX_LEASE_S = 60
    assert serve_command.stop_timeout_s() == 60 + serve_command.STOP_MARGIN_S
    settings.GLASSBOX_LEASE_S = 3
    assert serve_command.stop_timeout_s() == serve_command.MIN_STOP_TIMEOUT_S


def test_a_restarts_delay_reads_as_a_person_sets_a_time_limit():
    """After six quick deaths a cluster's restart waited the longest backoff and serve said
    "restarting it in 60 s"; it says the wait as wording.time_limit does: "1 min 00 s"."""
    from io import StringIO
    from types import SimpleNamespace

    said = StringIO()
    command = serve_command.Command(stderr=said)
    cluster = serve_command.Child("qcluster-1", [], {}, started_at=100.0, failures=6)
    cluster.process = SimpleNamespace(returncode=-9, poll=lambda: -9)  # died by SIGKILL
    command.clusters = [cluster]
    command.publisher = SimpleNamespace(publish=lambda report: None)
    command.schedule_restart(cluster, now=101.0)
    assert said.getvalue() == (
        "qcluster-1 was killed by SIGKILL on its own; restarting it in 1 min 00 s (0 of 1 qclusters running).\n"
    )
