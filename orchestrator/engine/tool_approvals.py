"""Tool checkpoints: a call of a tool granted with approval waits for a person (issue 12, point 4).

The agent loop asks its ``approve(call)`` hook; the runtime (engine/tool_attempt.py) opens a
checkpoint here, naming the agent, the tool, its server and the arguments (capped), and polls it
until a person decides through the one approval path (``runs.decide``: permissions, audit
events naming who decided). Only that task waits: it stays running, says why
(``waits.ToolApproval``) and keeps its lease; the run and its other tasks go on.

A checkpoint belongs to one call of one attempt. When the attempt ends without a decision (its
run or task was cancelled, its worker shut down, its lease was lost) the checkpoint is closed without
a decision (``undecided.close_undecided``: status ``closed``, the reason, ``checkpoint.closed``), so that no pending question is left that nobody waits for; a retried
attempt asks again for its own calls. The reaper closes those of a worker that died
(``close_open``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator import events
from orchestrator.engine import waits
from orchestrator.engine.execution import Claim, owned
from orchestrator.engine.undecided import close_undecided
from orchestrator.models import Checkpoint, TaskRun

PENDING = Checkpoint.Status.PENDING


@dataclass(frozen=True)
class Asked:
    """What a tool checkpoint asks: shown in the inbox and on the run page."""

    call_id: str
    name: str  # as the model called it
    server: str
    tool: str  # the server's own name
    arguments: Any  # capped (agent_steps.capped_arguments)

    @property
    def qualified(self) -> str:
        return f"{self.server}:{self.tool}"


@dataclass(frozen=True)
class Answer:
    """A checkpoint's state as the waiting call reads it."""

    status: str
    comment: str = ""
    decided_by: str = ""

    @property
    def pending(self) -> bool:
        return self.status == PENDING


def open_checkpoint(claim: Claim, asked: Asked) -> int:
    """The pending checkpoint of this call (opened now, or the one already open for it); the task
    says it waits for a person. Returns the checkpoint's id."""
    task = claim.task
    with events.atomic():
        checkpoint, created = Checkpoint.objects.get_or_create(
            attempt_id=claim.attempt.pk,
            call_id=asked.call_id,
            kind=Checkpoint.Kind.TOOL,
            defaults={
                "run_id": task.run_id,
                "task_run": task,
                "details": {
                    "agent": task.agent.name,
                    "attempt": claim.attempt.number,
                    "name": asked.name,
                    "server": asked.server,
                    "tool": asked.tool,
                    "arguments": asked.arguments,
                },
            },
        )
        if created:
            wait = waits.ToolApproval(asked.qualified)
            owned(claim).update(wait_code=wait.code, wait_reason=wait.message)
            events.record(
                "checkpoint.created",
                run=task.run_id,
                task=task,
                actor_name=f"agent:{task.agent.name}",
                message=f"{task.agent.name} wants to call {asked.qualified}: approval needed",
                payload={
                    "checkpoint": checkpoint.pk,
                    "kind": Checkpoint.Kind.TOOL,
                    "attempt": claim.attempt.number,
                    "call_id": asked.call_id,
                    "tool": asked.qualified,
                },
            )
    return checkpoint.pk


def read(checkpoint_id: int) -> Answer:
    """The checkpoint's status, comment and who decided (a deleted one reads as rejected)."""
    row = (
        Checkpoint.objects.filter(pk=checkpoint_id)
        .values("status", "comment", "decided_by_name", "decided_by__username")
        .first()
    )
    if row is None:
        return Answer(Checkpoint.Status.REJECTED, "the checkpoint no longer exists")
    return Answer(row["status"], row["comment"], row["decided_by_name"] or row["decided_by__username"] or "")


def close(checkpoint_id: int, why: str) -> bool:
    """Close a checkpoint still pending (its call will not run: the attempt ended). True if it was."""
    with events.atomic():
        checkpoint = Checkpoint.objects.filter(pk=checkpoint_id, status=PENDING).select_related("task_run").first()
        if checkpoint is None:
            return False
        closed = close_undecided(Checkpoint.objects.filter(pk=checkpoint_id), why)
        if closed and checkpoint.task_run is not None:
            refresh_wait(checkpoint.task_run)
    return bool(closed)


def close_open(task_ids: list[int], why: str) -> int:
    """Close every pending tool checkpoint of these tasks (their attempts are gone). In the
    caller's transaction."""
    return close_undecided(
        Checkpoint.objects.filter(task_run_id__in=task_ids, kind=Checkpoint.Kind.TOOL, status=PENDING), why
    )


def refresh_wait(task: TaskRun) -> None:
    """After a tool checkpoint closed: the task still waits if another call of it does, else not."""
    still = (
        Checkpoint.objects.filter(task_run=task, kind=Checkpoint.Kind.TOOL, status=PENDING)
        .order_by("created_at")
        .values_list("details", flat=True)
        .first()
    )
    rows = TaskRun.objects.filter(pk=task.pk, wait_code=waits.ToolApproval.code)
    if still is None:
        rows.update(wait_code="", wait_reason="")
    else:
        wait = waits.ToolApproval(f"{still.get('server', '')}:{still.get('tool', '')}")
        rows.update(wait_reason=wait.message)


def qualified(checkpoint: Checkpoint) -> str:
    """SERVER:TOOL of a tool checkpoint."""
    details = checkpoint.details or {}
    return f"{details.get('server', '?')}:{details.get('tool', '?')}"


def arguments_json(checkpoint: Checkpoint) -> str:
    """The arguments the call would be made with, as indented JSON (capped when opened)."""
    return json.dumps((checkpoint.details or {}).get("arguments"), indent=2, ensure_ascii=False, default=str)


def describe(checkpoint: Checkpoint) -> str:
    """ "coder wants to call workspace:write_file" — a tool checkpoint in words."""
    return f"{(checkpoint.details or {}).get('agent', 'the agent')} wants to call {qualified(checkpoint)}"
