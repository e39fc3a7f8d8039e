"""The cluster check sees a cluster that is alive: from django-q2's reports, or, when a busy
SQLite database delays those past their 3-second life, from the workers' own signs of life."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import cluster, dispatch, runs
from orchestrator.engine.health import check
from orchestrator.engine.ticker import TICKER_KEY, claim_tick
from orchestrator.models import Attempt, RateCounter

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_reports(monkeypatch):
    """No django-q2 report in the cache: as while the sentinel waits on a locked database."""
    monkeypatch.setattr(cluster, "running_clusters", list)


def test_without_reports_or_workers_no_cluster_runs():
    assert not cluster.workers_seen_recently() and not cluster.cluster_is_running()


def test_a_worker_that_ticked_recently_means_a_cluster_runs():
    assert claim_tick(1.0)  # what every worker process's ticker does each second
    assert cluster.cluster_is_running()
    RateCounter.objects.filter(key=TICKER_KEY).update(expires_at=time.time() - cluster.ALIVE_WINDOW_S - 1)
    assert not cluster.cluster_is_running()  # a ticker silent for longer than the window: gone


def test_an_attempt_renewing_its_lease_means_a_cluster_runs(make_agent, make_plan, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = Attempt.objects.get(task_run__run=run)
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, heartbeat_at=timezone.now())
    assert cluster.cluster_is_running()
    stale = timezone.now() - timedelta(seconds=cluster.ALIVE_WINDOW_S + 1)
    Attempt.objects.filter(pk=attempt.pk).update(heartbeat_at=stale)
    assert not cluster.cluster_is_running()


@pytest.mark.django_db(transaction=True)  # the checks run in threads of their own
def test_health_counts_a_cluster_whose_workers_are_alive():
    assert check()["checks"]["broker"]["clusters"] == 0
    claim_tick(1.0)
    report = check()
    assert report["checks"]["broker"]["clusters"] == 1
