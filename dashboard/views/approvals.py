"""The approvals inbox: every pending checkpoint across runs, the longest waiting first, decided in place.

What each item shows is orchestrator/engine/approval_inbox.py's. Deciding goes through
runs.decide (which checks the state and writes the event); these views check the permission
(DECIDE_CHECKPOINT, audited when denied) and show ActionError messages.
With htmx the decision answers the checkpoint's own fragment plus the header count
(out of band); without JavaScript it redirects back to the inbox with a message.
"""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from orchestrator.engine import approval_inbox, approvers, runs
from orchestrator.engine.approval_inbox import with_context
from orchestrator.models import Checkpoint

from ..forms import DecisionForm
from ..fragments import TEMPLATES
from ..permissions import DECIDE_CHECKPOINT, VIEW_RUN, permission_required
from .run import is_htmx
from .runs import run_url


def approvals(checkpoints, user) -> list[approval_inbox.Approval]:
    """The inbox's items for `user`, each linking to its run's page."""
    return approval_inbox.approvals(checkpoints, user, run_url=run_url)


@permission_required(DECIDE_CHECKPOINT)
def inbox(request):
    """What waits for this person's decision (as many as the header's badge counts), then the plans
    of their own runs that wait for another approver."""
    user = request.user
    context = {
        "approvals": approvals(with_context(approvers.awaiting(user)), user),
        "for_another": approvals(with_context(approvers.awaiting_another_approver(user)), user),
        "form": DecisionForm(),
    }
    return render(request, "dashboard/approvals.html", context)


COUNT_PART = TEMPLATES["approvals_count"]


@permission_required(DECIDE_CHECKPOINT)
def count(request):
    """The header's count of the checkpoints waiting for this person's decision, as the inbox lists
    them (polled every 5 s; the run page's frames and answers also bring it out of band as a
    checkpoint opens or closes: fragments.render_parts)."""
    return render(request, COUNT_PART, {"count": approvers.awaiting(request.user).count()})


@permission_required(VIEW_RUN)
def checkpoint_redirect(request, checkpoint_id: int):
    """`/approvals/<id>/`: the checkpoint where it is decided — on its run's page."""
    checkpoint = get_object_or_404(Checkpoint, pk=checkpoint_id)
    return redirect(run_url(checkpoint.run_id) + f"#checkpoint-{checkpoint.pk}")


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
                checkpoint,
                approve=approve,
                user=request.user,
                comment=form.cleaned_data["comment"],
                plan_version=request.POST.get("plan_version") or None,
            )
        except runs.ActionError as refused:
            error = refused.sentence
    if is_htmx(request):
        context = {"count": approvers.awaiting(request.user).count(), "oob": True, "form": form}
        if error:
            checkpoint.refresh_from_db()
            item = approvals([checkpoint], request.user)[0]
            context.update(approval=item, error=error)
            return render(request, "dashboard/partials/approvals_item.html", context)
        context.update(checkpoint=checkpoint, run_url=run_url(checkpoint.run_id))
        return render(request, "dashboard/partials/approvals_decided.html", context)
    if error:
        messages.error(request, f"Could not {'approve' if approve else 'reject'} checkpoint {checkpoint_id}. {error}")
    else:
        verb = "approved" if approve else "rejected"
        messages.success(request, f"Checkpoint {checkpoint_id} on run #{checkpoint.run_id} {verb}.")
    return redirect("approvals")
