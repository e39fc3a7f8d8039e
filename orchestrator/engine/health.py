"""Can this deployment work right now? Reachability of the database, the task broker and the
channel layer, for the `health/` endpoint, load balancers and monitoring (docs/deploy.md).

Each check is a real round trip, not a look at the settings: a `SELECT 1` on the database, the
queue length from the django-q2 broker (an LLEN in Redis, a count of the OrmQ table on the ORM
broker), and a message sent to a fresh channel of the channel layer and received back. The
checks run side by side, each bounded by a timeout, so a hung server answers "timed out" in a
few seconds instead of hanging the probe.

The report is public (the endpoint needs no login), so it names backends and exception classes
only: never a URL, host, user name or exception message, which can carry any of those. The full
error goes to the server log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NotRequired, TypedDict

import redis
from asgiref.sync import async_to_sync
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import load_backend

from orchestrator import wording
from orchestrator.engine import cluster

log = logging.getLogger(__name__)

# Per check. A load balancer's probe usually gives up after 5 to 10 seconds.
CHECK_TIMEOUT_S = 3.0


class CheckResult(TypedDict):
    ok: bool
    backend: str  # "postgresql", "sqlite", "redis", "orm", "in-memory", ...
    latency_ms: float
    error: NotRequired[str]  # exception class name, or "timed out after N s"
    queued: NotRequired[int]  # broker only: tasks waiting in the broker's queue
    clusters: NotRequired[
        int
    ]  # broker only: qclusters running (engine/cluster.py: their reports or their workers' signs of life)
    # broker only, under `manage.py serve`: its qclusters, running and being restarted
    serve: NotRequired[dict[str, Any]]


class HealthReport(TypedDict):
    status: Literal["ok", "unavailable"]
    checks: dict[str, CheckResult]


class HealthCheckFailed(Exception):
    """A round trip that completed but gave the wrong answer."""


# --- the checks --------------------------------------------------------------------------------


def database_backend() -> str:
    return connections[DEFAULT_DB_ALIAS].vendor


def check_database(database: dict[str, Any] | None = None) -> dict[str, Any]:
    """`SELECT 1` on the default database (or on `database`, a complete DATABASES entry).

    Uses this thread's connection and closes it afterwards: checks run in threads of their own.
    """
    if database is None:
        connection = connections[DEFAULT_DB_ALIAS]
    else:
        connection = load_backend(database["ENGINE"]).DatabaseWrapper(database, alias="health-check")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            row = cursor.fetchone()
        if not row or row[0] != 1:
            raise HealthCheckFailed("SELECT 1 did not answer 1")
        return {}
    finally:
        connection.close()


def broker_backend() -> str:
    """The broker django_q.brokers.get_broker() would build, named without connecting."""
    from django_q.conf import Conf

    if Conf.BROKER_CLASS == "orchestrator.orm_broker.DoorbellORM":
        return "orm"  # the ORM broker, rung awake when a task is queued
    if Conf.BROKER_CLASS:
        return Conf.BROKER_CLASS.rsplit(".", 1)[-1].lower()
    if Conf.IRON_MQ:
        return "ironmq"
    if isinstance(Conf.SQS, dict):
        return "sqs"
    if Conf.ORM:
        return "orm"
    if Conf.MONGO:
        return "mongo"
    return "redis"


def check_broker() -> dict[str, Any]:
    """The django-q2 broker's queue length (a real round trip) and the clusters reporting in."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf
    from django_q.status import Stat

    from orchestrator.engine.cluster import workers_seen_recently

    broker = get_broker()
    try:
        queued = broker.queue_size()
        if queued is None:
            raise HealthCheckFailed("the broker did not report its queue length")
        running = [stat for stat in Stat.get_all(broker) if stat.status not in (Conf.STOPPED, Conf.STOPPING)]
        # A busy cluster on SQLite can miss django-q2's 3-second report: its workers' own signs
        # of life count too (engine/cluster.py).
        result: dict[str, Any] = {
            "queued": int(queued),
            "clusters": len(running) or (1 if workers_seen_recently() else 0),
        }
        if serve_id := os.environ.get(cluster.SERVE_ID_ENV):
            if (supervised := cluster.supervisor_report(serve_id)) is not None:
                result["serve"] = supervised
        return result
    finally:
        if isinstance(broker.connection, redis.Redis):
            broker.connection.close()  # get_broker() opened a pool of its own
        connections.close_all()  # the ORM broker and cache queried this thread's connection


def channel_layer_backend() -> str:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return "none"
    name = type(layer).__name__
    return {
        "RedisChannelLayer": "redis",
        "RedisPubSubChannelLayer": "redis-pubsub",
        "InMemoryChannelLayer": "in-memory",
    }.get(name, name)


async def check_channel_layer() -> dict[str, Any]:
    """Send a message to a fresh channel and receive it back."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        raise HealthCheckFailed("no channel layer is configured")
    channel = await layer.new_channel("health")
    nonce = uuid.uuid4().hex
    await layer.send(channel, {"type": "health.ping", "nonce": nonce})
    message = await layer.receive(channel)
    if message.get("nonce") != nonce:
        raise HealthCheckFailed("the channel layer returned another message")
    return {}


# --- running them ------------------------------------------------------------------------------


async def _timed(
    name: str, backend: str, work: Callable[[], Awaitable[dict[str, Any]]], timeout_s: float
) -> CheckResult:
    started = time.perf_counter()
    result: CheckResult = {"ok": False, "backend": backend, "latency_ms": 0.0}
    try:
        extra = await asyncio.wait_for(work(), timeout_s)
    except TimeoutError:
        result["error"] = f"timed out after {wording.time_limit(timeout_s)}"
        log.warning("health: %s (%s) timed out after %s s", name, backend, timeout_s)
    except Exception as exc:
        result["error"] = type(exc).__name__
        log.warning("health: %s (%s) unreachable: %s: %s", name, backend, type(exc).__name__, exc)
    else:
        result["ok"] = True
        result.update(extra)  # type: ignore[typeddict-item]
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def _in_thread(function: Callable[[], dict[str, Any]]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """Run a blocking check in a thread of its own, so that a timeout can abandon it."""

    async def run() -> dict[str, Any]:
        return await asyncio.to_thread(function)

    return run


def _backend(describe: Callable[[], str]) -> str:
    try:
        return describe()
    except Exception:  # a broken configuration still gets a report, naming it
        log.warning("health: cannot tell the backend", exc_info=True)
        return "misconfigured"


async def acheck(timeout_s: float = CHECK_TIMEOUT_S) -> HealthReport:
    """Check the database, the broker and the channel layer at once; `status` is "ok" when all answer."""
    database, broker, layer = await asyncio.gather(
        _timed("database", _backend(database_backend), _in_thread(check_database), timeout_s),
        _timed("broker", _backend(broker_backend), _in_thread(check_broker), timeout_s),
        _timed("channel_layer", _backend(channel_layer_backend), check_channel_layer, timeout_s),
    )
    checks = {"database": database, "broker": broker, "channel_layer": layer}
    status: Literal["ok", "unavailable"] = "ok" if all(c["ok"] for c in checks.values()) else "unavailable"
    return {"status": status, "checks": checks}


def check(timeout_s: float = CHECK_TIMEOUT_S) -> HealthReport:
    """`acheck` for synchronous callers (commands, scripts)."""
    return async_to_sync(acheck)(timeout_s)
