"""A running task whose worker has gone quiet: what the page and `run_status` say of it between
the worker's death and the end of its lease.

A worker's agent host renews the leases of the attempts it runs every third of GLASSBOX_LEASE_S
(engine/host.py; execution.renew_leases), each renewal setting the lease to end GLASSBOX_LEASE_S
after it: so a running task's lease says when its worker was last heard of (its end less
GLASSBOX_LEASE_S, as every write of a running task's lease sets it). Once that is SILENT_AFTER
renewals ago, a renewal was missed beyond a late beat: the worker is dead or stalled, and the
reaper retries the task when the lease runs out unless the worker speaks again — or fails it when
no retry is left (`TaskRun.no_retry_after_loss`, the rule the reaper decides by, so the words
never promise a retry that will not come). Until then the task read "running" as if all were
fine, for up to GLASSBOX_LEASE_S (15 s by default).

The words name moments, not a count of seconds (a page that no event redraws would keep a count
that stopped being true at once): "no word from worker vm:4121 since 10:30:52 UTC — retried when
its lease runs out at 10:31:07 UTC if it stays silent", or "— fails when its lease runs out at
10:31:07 UTC if it stays silent (no retry left: 3 attempts lost)". Derived
from the task's row alone, so the
task row, the panel's head, the agent's lane and `run_status` say it without a query of their own.
The ticker's check (engine/silences.py) records when a task turns silent and when it is heard
again, so that open pages redraw it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator import wording
from orchestrator.models import Attempt, TaskRun
from orchestrator.wording import clock

# Renewals a worker may miss before its task reads silent: one late beat is not news.
SILENT_AFTER = 2


def renewal_s() -> float:
    """How often a worker renews its leases (the host's heartbeat that the database hears)."""
    return settings.GLASSBOX_LEASE_S / 3


def silent_after_s() -> float:
    """How long without a renewal makes a running task's worker read silent."""
    return SILENT_AFTER * renewal_s()


@dataclass(frozen=True)
class Silence:
    """A running task's worker has not renewed its lease for `silent_after_s` or more."""

    worker: str
    heard_at: datetime  # its last renewal
    lease_expires_at: datetime
    now: datetime
    # Why the reaper would fail the task, not retry it, when the lease runs out ("": it retries it).
    no_retry: str = ""

    @property
    def seconds(self) -> float:
        return (self.now - self.heard_at).total_seconds()

    @property
    def text(self) -> str:
        """The task's note while its worker is silent (the row, the panel's head, run_status)."""
        since = f"no word from worker {self.worker or '?'} since {clock(self.heard_at)}"
        then, left = ("fails", f" (no retry left: {self.no_retry})") if self.no_retry else ("retried", "")
        if self.now >= self.lease_expires_at:
            return (
                f"{since} — its lease ran out at {clock(self.lease_expires_at)}: {then} at the reaper's next pass{left}"
            )
        return f"{since} — {then} when its lease runs out at {clock(self.lease_expires_at)} if it stays silent{left}"

    @property
    def short(self) -> str:
        """As the agent's lane says it beside the task: "no word since 10:30:52 UTC"."""
        return f"no word since {clock(self.heard_at)}"


def worked_s(attempt: Attempt) -> float | None:
    """How long an ended attempt ran (None while it has not started or not ended): from its start to
    its end, but a lost attempt's to when its worker was last heard (its last lease renewal). The
    silence after that, until the reaper declared it lost (up to GLASSBOX_LEASE_S), was no work:
    the attempts table said "took 27 s" of an attempt that ran 12.3 s and then lay silent."""
    if attempt.started_at is None or attempt.finished_at is None:
        return None
    end = attempt.finished_at
    if attempt.state == Attempt.State.LOST and attempt.heartbeat_at is not None:
        end = min(end, attempt.heartbeat_at)
    return max(0.0, (end - attempt.started_at).total_seconds())


def lost_text(attempt: Attempt) -> str:
    """A lost attempt's time, said as it was: "ran 12.3 s until last heard from at 10:30:52 UTC;
    declared lost at 10:31:07 UTC" ("" for any other attempt)."""
    worked = worked_s(attempt)
    if attempt.state != Attempt.State.LOST or worked is None or attempt.heartbeat_at is None:
        return ""
    assert attempt.finished_at is not None  # worked_s has an end
    return (
        f"ran {wording.duration(worked)} until last heard from at {clock(attempt.heartbeat_at)}; "
        f"declared lost at {clock(attempt.finished_at)}"
    )


def silence_of(
    state: str,
    worker: str,
    lease_expires_at: datetime | None,
    now: datetime | None = None,
    *,
    lost_before: int,
    attempts: int,
) -> Silence | None:
    """The silence of a task with these columns, or None while its worker is heard (or it is not
    running). `lost_before`: its start's attempts lost so far (`TaskRun.lost_count`); `attempts`:
    its start's attempts, the running one included: whether losing this one leaves a retry."""
    if state != TaskRun.State.RUNNING or lease_expires_at is None:
        return None
    now = now or timezone.now()
    heard_at = lease_expires_at - timedelta(seconds=settings.GLASSBOX_LEASE_S)
    if (now - heard_at).total_seconds() < silent_after_s():
        return None
    no_retry = TaskRun.no_retry_after_loss(lost_before, attempts)
    return Silence(worker, heard_at, lease_expires_at, now, no_retry.why if no_retry else "")


def silent_lease_bound(now: datetime) -> datetime:
    """A running task whose lease ends by this reads silent at `now` (the same rule, for a query)."""
    return now + timedelta(seconds=settings.GLASSBOX_LEASE_S - silent_after_s())
