"""Audit entries that are not state changes: denied attempts and exports of the audit log."""

from __future__ import annotations

from django.db import transaction

from orchestrator import events
from orchestrator.models import Event, Run


def record_denial(user, permission: str, *, action: str, run: Run | int | None = None) -> Event:
    """Write an `access.denied` event: who tried what, lacking which permission."""
    if isinstance(run, int) and not Run.objects.filter(pk=run).exists():
        run = None  # a denied look at a run that does not exist is still audited, without the run
    who = user.get_username() if getattr(user, "is_authenticated", False) else "anonymous"
    with transaction.atomic():
        return events.record(
            "access.denied",
            run=run,
            user=user if getattr(user, "is_authenticated", False) else None,
            actor_name=who if who == "anonymous" else "",
            message=f"{who} was denied {action} (needs {permission})",
            payload={"permission": permission, "action": action},
        )


def record_export(user, fmt: str, filters: dict[str, str]) -> Event:
    """Write an `audit.exported` event: who took a copy of the audit log, in which format, filtered how."""
    described = ", ".join(f"{key}={value}" for key, value in sorted(filters.items())) or "no filter"
    with transaction.atomic():
        return events.record(
            "audit.exported",
            user=user,
            message=f"audit log exported as {fmt} ({described})"[:500],
            payload={"format": fmt, "filters": dict(sorted(filters.items()))},
        )
