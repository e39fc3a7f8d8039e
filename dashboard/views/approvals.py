"""The approvals inbox: every pending checkpoint across runs, oldest first, decided in place.

Deciding goes through runs.decide (which checks the state and writes the event); these views
check the permission (DECIDE_CHECKPOINT, audited when denied) and show ActionError messages.
With htmx the decision answers the checkpoint's own fragment plus the header count
(out of band); without JavaScript it redirects back to the inbox with a message.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from orchestrator.engine import runs
from orchestrator.models import Checkpoint, Run, TaskRun

from ..formatting import format_duration
from ..forms import DecisionForm
from ..permissions import DECIDE_CHECKPOINT, permission_required
from .runs import run_url

EXCERPT_CHARS = 600


def pending_checkpoints():
    """Checkpoints waiting for a person, on runs that have not ended, oldest first."""
    return (
        Checkpoint.objects.filter(status=Checkpoint.Status.PENDING)
        .exclude(run__status__in=Run.FINISHED)
        .select_related("run__plan", "task_run__subtask", "task_run__agent")
        .order_by("created_at", "pk")
    )


@dataclass
class Approval:
    """One pending checkpoint as the inbox shows it: what is asked, about what, since when."""

    checkpoint: Checkpoint
    waited: str
    run_url: str
    # Separation of duties: the user launched this run, so they may reject its plan, not approve it.
    approve_blocked: bool = False

    @property
    def kind_label(self) -> str:
        return {"plan": "plan approval", "before": "gate before the task", "after": "review of the task's output"}[
            self.checkpoint.kind
        ]

    @property
    def task(self) -> TaskRun:
        """The task of a gate or review checkpoint (a plan checkpoint has none)."""
        if self.checkpoint.task_run is None:
            raise ValueError(f"{self.checkpoint} belongs to no task")
        return self.checkpoint.task_run

    @property
    def ask(self) -> str:
        checkpoint = self.checkpoint
        if checkpoint.kind == Checkpoint.Kind.PLAN:
            return "Approve the plan before anything runs"
        subtask = self.task.subtask
        if checkpoint.kind == Checkpoint.Kind.BEFORE:
            return f"May “{subtask.title}” start?"
        return f"Review the output of “{subtask.title}”"

    @property
    def excerpt_label(self) -> str:
        return {"plan": "Goal", "before": "Instructions", "after": "Output"}[self.checkpoint.kind]

    @property
    def excerpt(self) -> str:
        """What the decision is about; agent output is shown as escaped text by the template."""
        checkpoint = self.checkpoint
        if checkpoint.kind == Checkpoint.Kind.PLAN:
            text = checkpoint.run.plan.goal
        elif checkpoint.kind == Checkpoint.Kind.BEFORE:
            text = self.task.subtask.instructions
        else:
            text = self.task.output or self.task.summary
        text = text.strip()
        return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def approvals(checkpoints, user) -> list[Approval]:
    now = timezone.now()
    return [
        Approval(
            checkpoint,
            waited=format_duration((now - checkpoint.created_at).total_seconds()),
            run_url=run_url(checkpoint.run_id),
            approve_blocked=(
                settings.GLASSBOX_SEPARATION_OF_DUTIES
                and checkpoint.kind == Checkpoint.Kind.PLAN
                and checkpoint.run.launched_by_id == user.pk
            ),
        )
        for checkpoint in checkpoints
    ]


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


@permission_required(DECIDE_CHECKPOINT)
def inbox(request):
    items = approvals(pending_checkpoints(), request.user)
    return render(request, "dashboard/approvals.html", {"approvals": items, "form": DecisionForm()})


@permission_required(DECIDE_CHECKPOINT)
def count(request):
    """The header's count of pending checkpoints (polled every 5 s)."""
    return render(request, "dashboard/partials/approvals_count.html", {"count": pending_checkpoints().count()})


@permission_required(DECIDE_CHECKPOINT)
@require_POST
def approve(request, checkpoint_id: int):
    return _decide(request, checkpoint_id, approve=True)


@permission_required(DECIDE_CHECKPOINT)
@require_POST
def reject(request, checkpoint_id: int):
    return _decide(request, checkpoint_id, approve=False)


def _decide(request, checkpoint_id: int, *, approve: bool):
    checkpoint = get_object_or_404(
        Checkpoint.objects.select_related("run__plan", "task_run__subtask", "task_run__agent"), pk=checkpoint_id
    )
    form = DecisionForm(request.POST)
    error = ""
    if not form.is_valid():
        error = " ".join(str(message) for message in form.errors["comment"])
    else:
        try:
            checkpoint = runs.decide(
                checkpoint, approve=approve, user=request.user, comment=form.cleaned_data["comment"]
            )
        except runs.ActionError as refused:
            error = str(refused)
    if is_htmx(request):
        context = {"count": pending_checkpoints().count(), "oob": True, "form": form}
        if error:
            checkpoint.refresh_from_db()
            item = approvals([checkpoint], request.user)[0]
            context.update(approval=item, error=error)
            return render(request, "dashboard/partials/approvals_item.html", context)
        context.update(checkpoint=checkpoint, run_url=run_url(checkpoint.run_id))
        return render(request, "dashboard/partials/approvals_decided.html", context)
    if error:
        messages.error(request, f"Checkpoint {checkpoint_id}: {error}")
    else:
        verb = "approved" if approve else "rejected"
        messages.success(request, f"Checkpoint {checkpoint_id} on run #{checkpoint.run_id} {verb}.")
    return redirect("approvals")
