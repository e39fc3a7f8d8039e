"""Is a qcluster running? From django-q2's stats in the shared cache, and from the workers' own
signs of life.

django-q2's sentinel reports its cluster every half second with a stat that lives 3 seconds in
the cache. On the embedded profile that cache is a SQLite table: while the workers are busy
writing (finishing a run after a restart, say), the sentinel's report can wait on the database
lock longer than those 3 seconds, and the cluster seems to be gone for as long as the burst
lasts — `launch` refused to start and `/health/` said 0 clusters while workers were plainly
working. So a cluster also counts as running when a worker process showed itself within
ALIVE_WINDOW_S: the reaper's ticker claimed a tick (every worker process runs one), or an
attempt renewed its lease.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone
from django_q.conf import Conf
from django_q.status import Stat

from orchestrator.engine.ticker import TICKER_KEY
from orchestrator.models import Attempt, RateCounter

# A worker's sign of life counts for this long (a few ticks, or a third of a lease, and margin).
ALIVE_WINDOW_S = 15.0


def running_clusters() -> list[Stat]:
    return [stat for stat in Stat.get_all() if stat.status not in (Conf.STOPPED, Conf.STOPPING)]


def workers_seen_recently(window_s: float = ALIVE_WINDOW_S) -> bool:
    """True when a worker process ticked or heartbeat within `window_s` seconds."""
    ticked = RateCounter.objects.filter(key=TICKER_KEY, expires_at__gte=time.time() - window_s).exists()
    if ticked:
        return True
    since = timezone.now() - timedelta(seconds=window_s)
    return Attempt.objects.filter(state=Attempt.State.RUNNING, heartbeat_at__gte=since).exists()


def cluster_is_running() -> bool:
    return bool(running_clusters()) or workers_seen_recently()


# --- `manage.py serve`'s view of its qclusters, for /health/ --------------------------------------

# `serve` gives its daphne this variable: the id under which it publishes its clusters' state.
SERVE_ID_ENV = "GLASSBOX_SERVE_ID"
# A report older than this is from a `serve` that is gone (it publishes every few seconds).
SUPERVISOR_REPORT_TTL_S = 30


def _supervisor_key(serve_id: str) -> str:
    return f"glassbox:serve:{serve_id}:clusters"


def publish_supervisor_report(serve_id: str, report: dict) -> None:
    """Store what `serve` knows of its qclusters (see `supervisor_report`), in the shared cache."""
    from django.core.cache import cache

    cache.set(_supervisor_key(serve_id), report, timeout=SUPERVISOR_REPORT_TTL_S)


def supervisor_report(serve_id: str) -> dict | None:
    """What the `serve` that started this process last said of its qclusters, or None.

    {"clusters": N, "running": K, "qclusters": [{"name", "running", "restarts"} and, for one waiting
    to be restarted, "exit" (how it ended) and "restart_in_s"]}
    """
    from django.core.cache import cache

    return cache.get(_supervisor_key(serve_id))
