"""`python manage.py serve`: the web server (daphne) and the task workers (qclusters) together.

Signals. Each child runs in its own process group, so a Ctrl-C in the terminal reaches only
this command. SIGINT or SIGTERM to `serve` is forwarded, the same signal, to daphne and to each
qcluster's main process (which stops its own workers); `serve` then waits for them up to the
stop grace — the lease (GLASSBOX_LEASE_S) plus STOP_MARGIN_S, at least MIN_STOP_TIMEOUT_S — so
that attempts in flight can finish or expire, and SIGKILLs the groups of whatever is left. It
waits for every process of each child's group, not only the child itself: a qcluster's sentinel
and workers outlive a main process that was killed (they stop on their own, see qcluster.py). A
second signal while waiting skips the grace. When a process manager signals every process at
once (systemd's default KillMode=control-group), django-q2's sentinel and workers die on the
spot and its main process can hang in its own shutdown (it waits, in a multiprocessing Event,
for the dead sentinel to acknowledge): a qcluster whose main process is left without any child
process is killed at once instead of after the grace, with a line saying so.

Faults. While daphne lives, `serve` keeps serving: a qcluster that dies on its own is started
again after a backoff (RESTART_BASE_S doubling up to RESTART_MAX_S, reset once it has run for
STABLE_AFTER_S) and once what its main process left in its group has stopped (its sentinel
stops its workers, which drain their agent hosts; killed after the stop grace), so that two
clusters never run in its place; each step said on stderr and published for `/health/` (the
daphne it started reads it: `checks.broker.serve`). If daphne dies, the qclusters are stopped
and the command fails naming it: workers without a dashboard would look alive and be unreachable.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from orchestrator import wording
from orchestrator.engine.cluster import SERVE_ID_ENV, publish_supervisor_report
from orchestrator.management.commands.seed_demo import (
    APPROVER_PASSWORD_ENV,
    APPROVER_USERNAME,
    DEMO_PASSWORD_ENV,
    DEMO_USERNAME,
)

POLL_S = 0.2
LISTEN_TIMEOUT_S = 20.0
# Stop grace: an attempt in flight ends or its lease expires within GLASSBOX_LEASE_S.
STOP_MARGIN_S = 15.0
MIN_STOP_TIMEOUT_S = 30.0
# A qcluster main process left without any child process for this long is hung (see above).
HUNG_AFTER_S = 3.0
# Restart backoff of a qcluster that died on its own.
RESTART_BASE_S = 1.0
RESTART_MAX_S = 60.0
STABLE_AFTER_S = 60.0
# How often the clusters' state is published for /health/ (besides every change).
REPORT_EVERY_S = 5.0


def stop_timeout_s() -> float:
    return max(MIN_STOP_TIMEOUT_S, settings.GLASSBOX_LEASE_S + STOP_MARGIN_S)


@dataclass(eq=False)
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen = field(init=False)
    started_at: float = 0.0
    restarts: int = 0
    failures: int = 0  # deaths since it last ran for STABLE_AFTER_S: the backoff's exponent
    restart_at: float | None = None  # when a dead child is due to start again
    died_at: float = 0.0
    awaiting_group: bool = False  # said that its restart waits for what it left to stop
    last_exit: str = ""

    def start(self) -> Child:
        self.process = subprocess.Popen(self.argv, cwd=settings.BASE_DIR, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None
        self.awaiting_group = False
        return self

    @property
    def exited(self) -> bool:
        return self.process.poll() is not None

    def signal(self, signum: int) -> None:
        """Signal the child itself; it stops its own workers."""
        if not self.exited:
            try:
                os.kill(self.process.pid, signum)
            except ProcessLookupError:
                pass

    @property
    def stopped(self) -> bool:
        """Whether every process of the child's group has ended, not only the child itself."""
        return self.exited and not group_alive(self.process.pid)

    def kill_group(self) -> None:
        """SIGKILL the child's whole process group (its leader has the same id as the group)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def has_children(self) -> bool | None:
        """Whether the child has living processes of its own (None where /proc cannot tell).

        A dead child its parent has not reaped yet (a zombie: the hung main process reaps nothing)
        does not count.
        """
        tasks = Path(f"/proc/{self.process.pid}/task")
        try:
            pids = [pid for task in tasks.iterdir() for pid in (task / "children").read_text().split()]
        except OSError:
            return None
        return any(_is_alive(int(pid)) for pid in pids)


def _is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a living member. A zombie does not count: the one left
    re-parented to PID 1 may never be reaped where PID 1 reaps nothing (a container's)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stats = list(Path("/proc").glob("[0-9]*/stat"))
    if not stats:  # no /proc to tell zombies apart
        return True
    for stat in stats:
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def start_child(name: str, argv: list[str], env: dict[str, str]) -> Child:
    return Child(name, argv, env).start()


class ReportPublisher:
    """Publishes the clusters' state for /health/ from a thread of its own: the cache (Redis or
    the database) may be slow or down, and the supervising loop must never wait for it."""

    def __init__(self, serve_id: str):
        self.serve_id = serve_id
        self.report: dict | None = None
        self.changed = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name="serve-report", daemon=True)

    def publish(self, report: dict) -> None:
        self.report = report
        self.changed.set()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.changed.wait(REPORT_EVERY_S)
            self.changed.clear()
            if self.report is None:
                continue
            try:
                publish_supervisor_report(self.serve_id, self.report)
            except Exception:  # best effort: /health/ then shows no report
                pass
            finally:
                connections.close_all()


def connect_host(host: str) -> str:
    """Where to reach a server bound to `host` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def port_in_use(host: str, port: int) -> str:
    """Why `host:port` cannot be bound now ("" when it can), checked before starting anything.

    Without this check a port held by another server would answer the readiness probe and the
    banner would point at the wrong server while daphne fails to start.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.strerror or str(error)
    return ""


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Command(BaseCommand):
    help = "Run the dashboard (daphne) and the task workers (qcluster) together; Ctrl-C stops both."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="Port to listen on (default 8000)")
        parser.add_argument("--workers", type=int, help="qcluster worker processes (default: GLASSBOX_WORKERS, else 2)")
        parser.add_argument(
            "--clusters", type=int, default=1, help="qcluster processes, each with --workers workers (default 1)"
        )

    def handle(self, *args, host, port, workers, clusters=1, **options):
        self.signals_received: list[int] = []
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)

        if problem := port_in_use(host, port):
            raise CommandError(f"Cannot listen on {host}:{port}: {problem}. Choose another port with --port.")
        env = dict(os.environ)
        env.setdefault("DJANGO_SETTINGS_MODULE", "glassbox.settings")
        if workers is not None:
            if workers < 1:
                raise CommandError("--workers must be at least 1")
            env["GLASSBOX_WORKERS"] = str(workers)
        if clusters < 1:
            raise CommandError("--clusters must be at least 1")
        serve_id = uuid.uuid4().hex
        self.publisher = ReportPublisher(serve_id)
        manage_py = str(settings.BASE_DIR / "manage.py")
        daphne = start_child(
            "daphne",
            [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "glassbox.asgi:application"],
            {**env, SERVE_ID_ENV: serve_id},
        )
        self.clusters = [
            start_child(
                "qcluster" if clusters == 1 else f"qcluster-{index + 1}", [sys.executable, manage_py, "qcluster"], env
            )
            for index in range(clusters)
        ]
        children = [daphne, *self.clusters]
        self.workers_label = "qcluster" if clusters == 1 else f"{clusters} qclusters"
        self.publisher.thread.start()
        self.publish()
        died = self.wait_until_listening(children, connect_host(host), port)
        if died is None and not self.signals_received:
            self.print_banner(host, port)
            died = self.supervise(daphne)
        if died is None:
            self.stop(children, self.signals_received[0])
            self.publisher.stopped.set()
            self.stdout.write(f"Stopped daphne and {self.workers_label}.")
            return
        others = [child for child in children if child is not died]
        self.stop(others, signal.SIGTERM)
        self.publisher.stopped.set()
        stopped = " and ".join(child.name for child in others)
        raise CommandError(
            f"{died.name} {describe_exit(died.process.returncode)} on its own; stopped {stopped}. "
            "Its output above says why."
        )

    def on_signal(self, signum, frame) -> None:
        self.signals_received.append(signum)

    def first_exited(self, children: list[Child]) -> Child | None:
        return next((child for child in children if child.exited), None)

    def wait_until_listening(self, children: list[Child], host: str, port: int) -> Child | None:
        """Wait until daphne accepts connections, so the URL printed works. Returns a child that died."""
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while time.monotonic() < deadline and not self.signals_received:
            if died := self.first_exited(children):
                return died
            try:
                with socket.create_connection((host, port), timeout=POLL_S):
                    return None
            except OSError:
                time.sleep(POLL_S)
        return None

    def supervise(self, daphne: Child) -> Child | None:
        """Block until a stop signal arrives (returns None) or daphne exits (returns it); restart
        each qcluster that dies meanwhile, with backoff."""
        while not self.signals_received:
            if daphne.exited:
                return daphne
            now = time.monotonic()
            for cluster in self.clusters:
                if cluster.restart_at is None and cluster.exited:
                    self.schedule_restart(cluster, now)
                elif cluster.restart_at is not None and now >= cluster.restart_at and self.left_nothing(cluster, now):
                    cluster.start()
                    cluster.restarts += 1
                    self.stderr.write(f"{cluster.name} restarted (restart {cluster.restarts}).")
                    self.publish()
            time.sleep(POLL_S)
        return None

    def left_nothing(self, cluster: Child, now: float) -> bool:
        """Whether nothing of a dead qcluster runs any more, so that it may start again.

        A main process killed alone leaves its sentinel and workers in its group; they stop on
        their own (qcluster.py), the workers draining their agent hosts. Whatever is left after the
        stop grace is killed.
        """
        if cluster.stopped:
            return True
        if now - cluster.died_at >= stop_timeout_s():
            self.stderr.write(f"{cluster.name}: what its main process left did not stop in time: killing it.")
            cluster.kill_group()
        elif not cluster.awaiting_group:
            cluster.awaiting_group = True
            self.stderr.write(f"{cluster.name}: waiting for its sentinel and workers to stop before restarting it.")
        return False

    def schedule_restart(self, cluster: Child, now: float) -> None:
        cluster.died_at = now
        cluster.last_exit = describe_exit(cluster.process.returncode)
        if now - cluster.started_at >= STABLE_AFTER_S:
            cluster.failures = 0
        delay = min(RESTART_MAX_S, RESTART_BASE_S * 2**cluster.failures)
        cluster.failures += 1
        cluster.restart_at = now + delay
        running = sum(not c.exited for c in self.clusters)
        self.stderr.write(
            f"{cluster.name} {cluster.last_exit} on its own; restarting it in {wording.time_limit(delay)} "
            f"({running} of {len(self.clusters)} qclusters running)."
        )
        self.publish()

    def publish(self) -> None:
        now = time.monotonic()
        members = []
        for cluster in self.clusters:
            member = {"name": cluster.name, "running": cluster.restart_at is None, "restarts": cluster.restarts}
            if cluster.restart_at is not None:
                member["exit"] = cluster.last_exit
                member["restart_in_s"] = round(max(0.0, cluster.restart_at - now), 1)
            members.append(member)
        self.publisher.publish(
            {"clusters": len(members), "running": sum(m["running"] for m in members), "qclusters": members}
        )

    def stop(self, children: list[Child], signum: int) -> None:
        """Signal each running child, wait up to the stop grace for every process of their groups
        (a dead qcluster's too: what its main process left stops on its own), then SIGKILL the
        groups of the rest.

        Another Ctrl-C while waiting skips the grace. A qcluster whose main process has been
        left without children for HUNG_AFTER_S is hung in django-q2's shutdown: killed at once.
        """
        signals_before = len(self.signals_received)
        running = [child for child in children if child.restart_at is None]
        for child in running:
            child.signal(signum)
        deadline = time.monotonic() + stop_timeout_s()
        orphaned_since: dict[str, float] = {}
        while not all(child.stopped for child in children):
            now = time.monotonic()
            if now >= deadline or len(self.signals_received) > signals_before:
                break
            for child in running:
                if child in self.clusters and not child.exited and child.has_children() is False:
                    since = orphaned_since.setdefault(child.name, now)
                    if now - since >= HUNG_AFTER_S:
                        self.stderr.write(
                            f"{child.name}: its workers have stopped but its main process hangs in "
                            "django-q2's shutdown: killing it."
                        )
                        child.kill_group()
                else:
                    orphaned_since.pop(child.name, None)
            time.sleep(POLL_S)
        for child in children:
            if not child.stopped:
                self.stderr.write(f"{child.name} did not stop in time: killing it.")
                child.kill_group()
            child.process.wait()

    def print_banner(self, host: str, port: int) -> None:
        self.stdout.write(self.style.SUCCESS(f"Glassbox is running at http://{url_host(host)}:{port}/"))
        self.stdout.write(f"Log in as {self.login_hint()}.")
        if approver := self.approver_hint():
            self.stdout.write(approver)
        self.stdout.write(f"Ctrl-C stops both the web server (daphne) and the workers ({self.workers_label}).")

    def approver_hint(self) -> str:
        """The demo approver, who approves the plans the demo user launches ("" without it)."""
        try:
            exists = get_user_model().objects.filter(username=APPROVER_USERNAME).exists()
        except DatabaseError:
            exists = False
        if not exists:
            return ""
        password = f"the password in {APPROVER_PASSWORD_ENV}" if os.environ.get(APPROVER_PASSWORD_ENV) else "approver"
        return f"Approve plans that {DEMO_USERNAME} launched as {APPROVER_USERNAME} / {password} (another browser or a private window)."

    def login_hint(self) -> str:
        try:
            has_demo_user = get_user_model().objects.filter(username=DEMO_USERNAME).exists()
        except DatabaseError:
            has_demo_user = False
        if not has_demo_user:
            return "your superuser (`python manage.py createsuperuser`, or `python manage.py seed_demo` for a demo)"
        if os.environ.get(DEMO_PASSWORD_ENV):
            return f"{DEMO_USERNAME}, with the password in {DEMO_PASSWORD_ENV} (unless it was changed since)"
        return f"{DEMO_USERNAME} / demo (unless the password was changed), or your superuser"
