"""The approvals inbox: every pending checkpoint across runs, the longest waiting first, decided in place.

Deciding goes through runs.decide (which checks the state and writes the event); these views
check the permission (DECIDE_CHECKPOINT, audited when denied) and show ActionError messages.
With htmx the decision answers the checkpoint's own fragment plus the header count
(out of band); without JavaScript it redirects back to the inbox with a message.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from orchestrator import wording
from orchestrator.engine import approvers, checkpoint_questions, runs, tool_approvals
from orchestrator.models import Checkpoint, TaskRun

from ..formatting import format_duration
from ..forms import DecisionForm
from ..fragments import PLAN_REVIEW_WHOLE, TEMPLATES, PlanRow, plan_review_rows
from ..permissions import DECIDE_CHECKPOINT, VIEW_RUN, permission_required
from .runs import run_url

# The inbox shows what a decision is about as sanitised Markdown, up to this much of it (cut at a
# paragraph); the whole text is on the run page.
EXCERPT_CHARS = 6000


def with_context(checkpoints):
    """What an inbox item shows of its checkpoint, read with it."""
    return checkpoints.select_related("run__plan", "task_run__subtask", "task_run__agent")


@dataclass
class Approval:
    """One pending checkpoint as the inbox shows it: what is asked, about what, since when."""

    checkpoint: Checkpoint
    waited: str
    run_url: str
    # Separation of duties: why this user may reject the plan but not approve it ("" when they may).
    blocked_reason: str = ""

    @property
    def approve_blocked(self) -> bool:
        return bool(self.blocked_reason)

    @property
    def kind_label(self) -> str:
        return {
            "plan": "plan approval",
            "before": "gate before the task",
            "after": "review of the task's output",
            "tool": "tool call awaiting approval",
        }[self.checkpoint.kind]

    @property
    def task(self) -> TaskRun:
        """The task of a gate or review checkpoint (a plan checkpoint has none)."""
        if self.checkpoint.task_run is None:
            raise ValueError(f"{self.checkpoint} belongs to no task")
        return self.checkpoint.task_run

    @property
    def ask(self) -> str:
        """What the checkpoint asks, in the run page's and the command line's words."""
        return checkpoint_questions.question(self.checkpoint).text()

    @property
    def holds_up(self) -> str:
        """A task's checkpoint's (gate, review, tool call): what else waits while it does, in the
        run page's words; "" for the plan's."""
        if self.checkpoint.task_run is None:
            return ""
        return checkpoint_questions.holds_up(self.checkpoint)

    @property
    def plan_terms(self) -> str:
        """A plan's checkpoint: what approving lets start, "5 tasks · estimated $0.0802 of a $10.00
        budget · cap 4" ("" for other kinds). The inbox showed the goal alone, so an approver
        approved a 300-task run as blind as a 5-task one."""
        if self.checkpoint.kind != Checkpoint.Kind.PLAN:
            return ""
        run = self.checkpoint.run
        money = f"a {wording.budget(run.budget_usd)} budget"
        if run.estimate_usd is not None:
            money = f"estimated {wording.usd(run.estimate_usd)} of {money}"
        return " · ".join([wording.counted(run.tasks.count(), "task"), money, f"cap {run.cap}"])

    @functools.cached_property
    def plan_subtasks(self) -> list[PlanRow]:
        """A plan's checkpoint: its subtasks as the run page's plan review lists them (title, key,
        gate, agent, what each depends on, instructions), read-only; [] for other kinds. The inbox
        let an approver approve a plan whose subtasks it never showed."""
        if self.checkpoint.kind != Checkpoint.Kind.PLAN:
            return []
        return plan_review_rows(self.checkpoint.run)

    @property
    def plan_count(self) -> str:
        return wording.counted(len(self.plan_subtasks), "subtask")

    @property
    def plan_scrolls(self) -> bool:
        return len(self.plan_subtasks) > PLAN_REVIEW_WHOLE

    @property
    def run_goal(self) -> str:
        """The run's goal beside its number, for a task's checkpoint; "" for the plan's, whose
        excerpt is the goal (the inbox showed it twice, cut beside the number and whole below)."""
        return "" if self.checkpoint.kind == Checkpoint.Kind.PLAN else self.checkpoint.run.plan.goal

    @property
    def excerpt_label(self) -> str:
        return {"plan": "Goal", "before": "Instructions", "after": "Output", "tool": "Arguments"}[self.checkpoint.kind]

    @property
    def excerpt_cut(self) -> bool:
        return len(self._excerpt_text) > EXCERPT_CHARS

    @property
    def excerpt_is_markdown(self) -> bool:
        """A goal, instructions or output are Markdown; a tool call's arguments are JSON, shown as
        they are in a box of their own (as Markdown's code block they were a box in a box)."""
        return self.checkpoint.kind != Checkpoint.Kind.TOOL

    @property
    def excerpt(self) -> str:
        """What the decision is about, as Markdown (the template sanitises it) or a tool call's
        arguments as indented JSON, cut at a paragraph."""
        text = self._excerpt_text
        if len(text) <= EXCERPT_CHARS:
            return text
        cut = text[:EXCERPT_CHARS]
        paragraph = cut.rfind("\n\n")
        return (cut[:paragraph] if paragraph > EXCERPT_CHARS // 2 else cut).rstrip() + " …"

    @property
    def _excerpt_text(self) -> str:
        checkpoint = self.checkpoint
        if checkpoint.kind == Checkpoint.Kind.PLAN:
            text = checkpoint.run.plan.goal
        elif checkpoint.kind == Checkpoint.Kind.BEFORE:
            text = self.task.subtask.instructions
        elif checkpoint.kind == Checkpoint.Kind.TOOL:
            text = tool_approvals.arguments_json(checkpoint)
        else:
            text = self.task.output or self.task.summary
        return text.strip()


def approvals(checkpoints, user) -> list[Approval]:
    now = timezone.now()
    return [
        Approval(
            checkpoint,
            waited=format_duration((now - checkpoint.created_at).total_seconds()),
            run_url=run_url(checkpoint.run_id),
            blocked_reason=approvers.separation_of_duties(checkpoint, checkpoint.run, user),
        )
        for checkpoint in checkpoints
    ]


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


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
