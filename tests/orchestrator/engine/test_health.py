"""orchestrator.engine.health: real round trips to the database, the broker and the channel layer."""

from __future__ import annotations

import functools
import json
import socket

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connections
from django_q.conf import Conf

from orchestrator.engine import health

pytestmark = pytest.mark.django_db

SECRET = "s3cret-pa55word"


def free_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def silent_server():
    """A port that accepts connections (the kernel completes the handshake) and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def redis_broker_at(monkeypatch):
    """Point django-q2 at a Redis broker URL of the test's choosing (Conf is read at import)."""

    def point(url: str) -> None:
        monkeypatch.setattr(Conf, "ORM", None)
        monkeypatch.setattr(Conf, "BROKER_CLASS", None)
        monkeypatch.setattr(Conf, "DJANGO_REDIS", None)
        monkeypatch.setattr(Conf, "REDIS", url)

    return point


def test_every_check_answers_on_the_configured_profile():
    report = health.check()
    assert report["status"] == "ok", report
    checks = report["checks"]
    assert set(checks) == {"database", "broker", "channel_layer"}
    assert all(check["ok"] and "error" not in check for check in checks.values())
    assert checks["database"]["backend"] == connections["default"].vendor
    assert checks["broker"]["backend"] == ("redis" if settings.REDIS_URL else "orm")
    assert checks["channel_layer"]["backend"] == ("redis" if settings.REDIS_URL else "in-memory")
    assert isinstance(checks["broker"]["queued"], int) and isinstance(checks["broker"]["clusters"], int)


def test_an_unreachable_database_is_reported_by_its_exception_class_only(monkeypatch, tmp_path):
    missing = tmp_path / f"no-such-dir-{SECRET}" / "db.sqlite3"
    broken = {**connections.settings["default"], "ENGINE": "django.db.backends.sqlite3", "NAME": str(missing)}
    broken["OPTIONS"] = {}
    monkeypatch.setattr(health, "check_database", functools.partial(health.check_database, broken))

    report = health.check()

    assert report["status"] == "unavailable"
    assert report["checks"]["database"] == {
        "ok": False,
        "backend": connections["default"].vendor,
        "latency_ms": report["checks"]["database"]["latency_ms"],
        "error": "OperationalError",
    }
    assert report["checks"]["broker"]["ok"] and report["checks"]["channel_layer"]["ok"]
    assert SECRET not in json.dumps(report)


def test_an_unreachable_broker_is_reported_without_its_url(redis_broker_at):
    port = free_port()
    redis_broker_at(f"redis://:{SECRET}@127.0.0.1:{port}/0")

    report = health.check()

    broker = report["checks"]["broker"]
    assert report["status"] == "unavailable"
    assert (broker["ok"], broker["backend"], broker["error"]) == (False, "redis", "ConnectionError")
    assert "queued" not in broker
    assert report["checks"]["database"]["ok"]
    assert SECRET not in json.dumps(report) and str(port) not in json.dumps(report)


def test_an_unreachable_channel_layer_is_reported_without_its_url(settings):
    port = free_port()
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://:{SECRET}@127.0.0.1:{port}/0"]},
        }
    }

    report = health.check()

    layer = report["checks"]["channel_layer"]
    assert report["status"] == "unavailable"
    assert (layer["ok"], layer["backend"], layer["error"]) == (False, "redis", "ConnectionError")
    assert SECRET not in json.dumps(report) and str(port) not in json.dumps(report)


def test_a_server_that_never_answers_times_out_instead_of_hanging_the_probe(redis_broker_at, silent_server):
    redis_broker_at(f"redis://127.0.0.1:{silent_server}/0")

    report = health.check(timeout_s=0.5)

    broker = report["checks"]["broker"]
    assert (broker["ok"], broker["error"]) == (False, "timed out after 0.5 s")
    assert broker["latency_ms"] >= 500
    assert report["checks"]["database"]["ok"] and report["checks"]["channel_layer"]["ok"]


def test_a_timeout_reads_as_a_person_sets_a_time_limit():
    """A probe's timeout of 1.23456 s read "timed out after 1.23456 s"; a time limit is said
    as wording.time_limit says it everywhere else: "1.2 s"."""

    async def never_answers() -> dict:
        raise TimeoutError

    result = async_to_sync(health._timed)("broker", "redis", never_answers, 1.23456)
    assert (result["ok"], result["error"]) == (False, "timed out after 1.2 s")


def test_no_channel_layer_configured_is_unavailable(settings):
    settings.CHANNEL_LAYERS = {}

    report = health.check()

    assert report["checks"]["channel_layer"] == {
        "ok": False,
        "backend": "none",
        "latency_ms": report["checks"]["channel_layer"]["latency_ms"],
        "error": "HealthCheckFailed",
    }
