"""A plan under review as an approver reads it: its subtasks in order, each with its title, key,
gate, agent, what it depends on and its instructions.

The run page's plan review (with its edit forms) and the approvals inbox (read-only) list the
same rows, so that an approver never approves a subtask neither of them showed.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models import Run
from orchestrator.wording import counted

# A plan under review shows every subtask in the page up to this many (an approver must not approve
# a subtask they never saw); a longer one scrolls in a box that says how many it holds and that it
# scrolls, so that the graph and the rest of the run stay within reach.
PLAN_REVIEW_WHOLE = 15


@dataclass
class PlanRow:
    key: str
    title: str
    agent: str
    instructions: str
    depends_on: list[str]
    gate: str


@dataclass(frozen=True)
class PlanReview:
    """The rows of a plan under review, and how the page holds them."""

    rows: list[PlanRow]

    @property
    def count(self) -> str:
        """ "2 subtasks": the review's heading."""
        return counted(len(self.rows), "subtask")

    @property
    def scrolls(self) -> bool:
        """Too many to show whole: they scroll in a box (PLAN_REVIEW_WHOLE)."""
        return len(self.rows) > PLAN_REVIEW_WHOLE


def plan_review_rows(run: Run) -> list[PlanRow]:
    """The subtasks of the run's plan, in the plan's order, each with the keys it depends on."""
    subtasks = list(run.plan.subtasks.select_related("agent").order_by("position"))
    ups: dict[int, list[str]] = {s.pk: [] for s in subtasks}
    edges = run.plan.dependencies.order_by("upstream__position").values_list("downstream_id", "upstream__key")
    for down, up_key in edges:
        ups.setdefault(down, []).append(up_key)
    return [PlanRow(s.key, s.title, s.agent.name, s.instructions, ups.get(s.pk, []), s.gate) for s in subtasks]


def plan_review(run: Run) -> PlanReview:
    """The run's plan as its review lists it."""
    return PlanReview(plan_review_rows(run))
