"""A lost attempt's time as it was: the seconds its worker was heard, then when it was declared
lost (readmodels/silence.py: worked_s, lost_text), not the silence counted as work."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.engine import execution, reaper
from orchestrator.models import Attempt, TaskRun
from orchestrator.readmodels.silence import clock, lost_text, worked_s

pytestmark = pytest.mark.django_db(transaction=True)


def reaped_after_silence(launched, settings) -> Attempt:
    """An attempt that ran 8.3 s, its worker last heard 17.7 s ago, reaped now (lease 15 s)."""
    settings.GLASSBOX_LEASE_S = 15.0
    run = launched({"a": ("researcher", [])})
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "vm:4121")
    assert claim is not None
    heard = timezone.now() - timedelta(seconds=17.7)
    Attempt.objects.filter(pk=claim.attempt.pk).update(started_at=heard - timedelta(seconds=8.3), heartbeat_at=heard)
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=heard + timedelta(seconds=15))
    assert reaper.tick()["reaped"] == 1
    return Attempt.objects.get(pk=claim.attempt.pk)


def test_a_lost_attempt_ran_until_its_worker_was_last_heard_not_until_it_was_declared_lost(launched, settings):
    lost = reaped_after_silence(launched, settings)
    assert lost.state == Attempt.State.LOST and lost.finished_at is not None and lost.heartbeat_at is not None
    assert (lost.finished_at - lost.started_at).total_seconds() >= 26  # what "took" said
    assert worked_s(lost) == pytest.approx(8.3, abs=0.01)
    assert lost_text(lost) == (
        f"ran 8.3 s until last heard from at {clock(lost.heartbeat_at)}; declared lost at {clock(lost.finished_at)}"
    )


def test_any_other_attempt_ran_from_its_start_to_its_end(launched):
    run = launched({"a": ("researcher", [])})
    now = timezone.now()
    Attempt.objects.filter(task_run__run=run).update(
        state=Attempt.State.FAILED,
        started_at=now - timedelta(seconds=40),
        heartbeat_at=now - timedelta(seconds=30),
        finished_at=now,
    )
    attempt = Attempt.objects.get(task_run__run=run)
    assert worked_s(attempt) == pytest.approx(40)
    assert lost_text(attempt) == ""
    Attempt.objects.filter(pk=attempt.pk).update(state=Attempt.State.RUNNING, finished_at=None)
    assert worked_s(Attempt.objects.get(pk=attempt.pk)) is None  # still running
