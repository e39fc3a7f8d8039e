"""The approvals inbox as a person reads it: each pending checkpoint with what it asks, about what,
since when, and whether this person may approve it.

The inbox's view only lists and renders these; the words come from where the run page's and the
command line's come from (`checkpoint_questions`, `approvers`), so the three never drift apart.
It lives in the engine, not in readmodels/, because those words do: a read model may not import
the engine (docs/architecture.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from orchestrator import wording
from orchestrator.engine import approvers, checkpoint_questions, tool_approvals
from orchestrator.models import Checkpoint, TaskRun
from orchestrator.readmodels import prices
from orchestrator.readmodels.plan_review import PlanReview, PlanRow, plan_review

# The inbox shows what a decision is about as sanitised Markdown, up to this much of it (cut at a
# paragraph); the whole text is on the run page.
EXCERPT_CHARS = 6000

KIND_LABELS = {
    "plan": "plan approval",
    "before": "gate before the task",
    "after": "review of the task's output",
    "tool": "tool call awaiting approval",
}
EXCERPT_LABELS = {"plan": "Goal", "before": "Instructions", "after": "Output", "tool": "Arguments"}


def with_context(checkpoints: QuerySet[Checkpoint]) -> QuerySet[Checkpoint]:
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
        return KIND_LABELS[self.checkpoint.kind]

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
        approved a 300-task run as blind as a 5-task one. An estimate of $0 is none: its models
        had no price ("5 tasks · no estimate: no price was known for its models · a $10.00 budget ·
        cap 4", as the run page says it), where it read "estimated $0.00", as if the run were free."""
        if self.checkpoint.kind != Checkpoint.Kind.PLAN:
            return ""
        run = self.checkpoint.run
        money = [f"a {wording.budget(run.budget_usd)} budget"]
        if run.estimate_usd is not None and run.estimate_usd > 0:
            money = [f"estimated {wording.usd(run.estimate_usd)} of {money[0]}"]
        elif run.estimate_usd is not None:
            money.insert(0, "no estimate: no price was known for its models")
        return " · ".join([wording.counted(run.tasks.count(), "task"), *money, f"cap {run.cap}"])

    @functools.cached_property
    def plan_unpriced(self) -> str:
        """A plan's checkpoint: the models of its agents without a price, which its estimate counts
        at $0, in the pre-flight's words ("No price is known for simulated:sim-1: counted as $0
        (set prices in the admin under provider limits)."); "" when every one has a price, and for
        other kinds."""
        if self.checkpoint.kind != Checkpoint.Kind.PLAN:
            return ""
        models = self.checkpoint.run.tasks.order_by().values_list("agent__provider", "agent__model").distinct()
        return prices.estimate_note(prices.unpriced_models(models, prices.price_list()))

    @functools.cached_property
    def review(self) -> PlanReview:
        """A plan's checkpoint: its subtasks as the run page's plan review lists them (title, key,
        gate, agent, what each depends on, instructions), read-only; none for other kinds. The
        inbox let an approver approve a plan whose subtasks it never showed."""
        if self.checkpoint.kind != Checkpoint.Kind.PLAN:
            return PlanReview([])
        return plan_review(self.checkpoint.run)

    @property
    def plan_subtasks(self) -> list[PlanRow]:
        return self.review.rows

    @property
    def plan_count(self) -> str:
        return self.review.count

    @property
    def plan_scrolls(self) -> bool:
        return self.review.scrolls

    @property
    def run_goal(self) -> str:
        """The run's goal beside its number, for a task's checkpoint; "" for the plan's, whose
        excerpt is the goal (the inbox showed it twice, cut beside the number and whole below)."""
        return "" if self.checkpoint.kind == Checkpoint.Kind.PLAN else self.checkpoint.run.plan.goal

    @property
    def excerpt_label(self) -> str:
        return EXCERPT_LABELS[self.checkpoint.kind]

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


def approvals(checkpoints: Iterable[Checkpoint], user, *, run_url: Callable[[int], str]) -> list[Approval]:
    """The inbox's items for `user`, in the order of `checkpoints` (read `with_context`); each
    links to its run at `run_url(run id)` (the dashboard's address of the run page)."""
    now = timezone.now()
    return [
        Approval(
            checkpoint,
            waited=wording.duration((now - checkpoint.created_at).total_seconds()),
            run_url=run_url(checkpoint.run_id),
            blocked_reason=approvers.separation_of_duties(checkpoint, checkpoint.run, user),
        )
        for checkpoint in checkpoints
    ]
