"""Fixtures for the production-profile fault tests: a Redis server of the test's own.

Tests here restart Redis, so they never touch the shared server on 6379 (other sessions use
it): `own_redis` runs `redis-server` on a free port, without persistence, so that a restart
loses everything it held, exactly like a crash of a cache-only Redis.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

REDIS_START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """`redis-server` on 127.0.0.1:<port>, no snapshots, no append-only file."""

    def __init__(self, port: int, log_path: Path):
        self.port = port
        self.log_path = log_path
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server): the Redis fault tests need it")
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                executable,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"redis-server on port {self.port} exited: {self.log_path.read_text()[-2000:]}")
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        pytest.fail(f"redis-server on port {self.port} did not answer within {REDIS_START_TIMEOUT_S} s")

    def kill(self) -> None:
        """SIGKILL: whatever the server held is gone (it persists nothing)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def client(self) -> redis.Redis:
        return redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=5)


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(free_port(), tmp_path / "redis-server.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def broker_at(monkeypatch):
    """Point this process's django-q2 at a Redis URL (its Conf is read once, at import).

    Workers get the same URL through REDIS_URL; the queue name stays the session's. The broker
    this process made for an earlier test (dispatch.process_broker keeps one per process) is
    dropped: it would still hand attempts to the old server.
    """
    from django_q.conf import Conf

    from orchestrator.engine import dispatch

    def point(url: str) -> None:
        monkeypatch.setattr(Conf, "ORM", None)
        monkeypatch.setattr(Conf, "BROKER_CLASS", None)
        monkeypatch.setattr(Conf, "DJANGO_REDIS", None)
        monkeypatch.setattr(Conf, "REDIS", url)
        monkeypatch.setattr(dispatch, "_broker", None)

    return point


def queue_key() -> str:
    from django_q.conf import Conf

    return f"django_q:{Conf.CLUSTER_NAME}:q"
