"""Audit entries that are not state changes: denied attempts and exports of the audit log."""

from __future__ import annotations

from django.db import transaction

from orchestrator import events
from orchestrator.models import Event, Run


def record_denial(user, permission: str, *, action: str, run: Run | int | None = None, caller: str = "") -> Event:
    """Write an `access.denied` event: who tried what, lacking which permission.

    `caller` names a caller that is no logged-in user (a refused API token, by its prefix);
    without it an unauthenticated caller is "anonymous".
    """
    if isinstance(run, int) and not Run.objects.filter(pk=run).exists():
        run = None  # a denied look at a run that does not exist is still audited, without the run
    authenticated = getattr(user, "is_authenticated", False)
    who = user.get_username() if authenticated else (caller or "anonymous")
    with transaction.atomic():
        return events.record(
            "access.denied",
            run=run,
            user=user if authenticated else None,
            actor_name="" if authenticated else who[:100],
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
