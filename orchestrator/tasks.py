"""django-q2 entry points. Arguments are primary keys; each reloads its rows and calls the engine."""

from __future__ import annotations

from orchestrator.engine import host, reaper, scheduler


def execute_attempt(attempt_id: int) -> str:
    """Hand the attempt to this worker process's agent host; returns once the host accepted it
    (blocking while the host is full). The attempt runs on in the host (orchestrator/engine/host.py)."""
    return host.submit(attempt_id)


def advance(run_id: int) -> None:
    scheduler.advance(run_id)


def tick() -> dict[str, int]:
    """The reaper Schedule's task (a safety net beside the per-process ticker)."""
    return reaper.tick()
