"""`python manage.py serve`: the web server (daphne) and the task workers (qcluster) together.

Each child runs in its own process group, so a Ctrl-C in the terminal reaches only this
command, which then stops both children in order: the same signal to each (SIGINT for
Ctrl-C, SIGTERM for SIGTERM), a grace period, then SIGKILL to whatever is left of its group.
When either child dies on its own, the other is stopped too and the command fails naming it:
a dashboard without workers (or workers without a dashboard) would look alive but do nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from orchestrator.management.commands.seed_demo import DEMO_PASSWORD_ENV, DEMO_USERNAME

POLL_S = 0.2
STOP_TIMEOUT_S = 15.0
LISTEN_TIMEOUT_S = 20.0


@dataclass
class Child:
    name: str
    process: subprocess.Popen

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

    def kill_group(self) -> None:
        """SIGKILL the child's whole process group (its leader has the same id as the group)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def start_child(name: str, argv: list[str], env: dict[str, str]) -> Child:
    process = subprocess.Popen(argv, cwd=settings.BASE_DIR, env=env, start_new_session=True)
    return Child(name, process)


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
        parser.add_argument("--workers", type=int, help="qcluster worker processes (default: GLASSBOX_WORKERS, else 4)")
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
        manage_py = str(settings.BASE_DIR / "manage.py")
        children = [
            start_child(
                "daphne",
                [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "glassbox.asgi:application"],
                env,
            ),
        ]
        for index in range(clusters):
            name = "qcluster" if clusters == 1 else f"qcluster-{index + 1}"
            children.append(start_child(name, [sys.executable, manage_py, "qcluster"], env))
        self.workers_label = "qcluster" if clusters == 1 else f"{clusters} qclusters"
        died = self.wait_until_listening(children, connect_host(host), port)
        if died is None and not self.signals_received:
            self.print_banner(host, port)
            died = self.supervise(children)
        if died is None:
            self.stop(children, self.signals_received[0])
            self.stdout.write(f"Stopped daphne and {self.workers_label}.")
            return
        others = [child for child in children if child is not died]
        self.stop(others, signal.SIGTERM)
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

    def supervise(self, children: list[Child]) -> Child | None:
        """Block until a stop signal arrives (returns None) or a child exits (returns it)."""
        while not self.signals_received:
            if died := self.first_exited(children):
                return died
            time.sleep(POLL_S)
        return None

    def stop(self, children: list[Child], signum: int) -> None:
        """Signal each child, wait up to STOP_TIMEOUT_S, then SIGKILL the rest.

        Another Ctrl-C while waiting skips the grace period.
        """
        signals_before = len(self.signals_received)
        for child in children:
            child.signal(signum)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(not child.exited for child in children):
            if time.monotonic() >= deadline or len(self.signals_received) > signals_before:
                break
            time.sleep(POLL_S)
        for child in children:
            if not child.exited:
                self.stderr.write(f"{child.name} did not stop in time: killing it.")
                child.kill_group()
            child.process.wait()

    def print_banner(self, host: str, port: int) -> None:
        self.stdout.write(self.style.SUCCESS(f"Glassbox is running at http://{url_host(host)}:{port}/"))
        self.stdout.write(f"Log in as {self.login_hint()}.")
        self.stdout.write(f"Ctrl-C stops both the web server (daphne) and the workers ({self.workers_label}).")

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
