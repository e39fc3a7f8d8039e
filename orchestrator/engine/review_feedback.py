"""What a retried task's agent is told about the review that rejected its output.

A task with ``gate: after`` waits for a person to approve its output; a rejection fails it with
the reviewer's comment, and a person may then retry or re-run it. Without the rejection in its
request, the next attempt was asked exactly what the first was, and wrote the same answer:
reject-then-retry could not steer the agent. So the next attempt's prompt ends with the review
(context.build_prompt): who rejected which attempt's output, and their comment, which the
attempt's page shows under "Request sent" as every other part of the prompt.

Only a task's latest review counts: one approved since, or closed without a decision (the run
was cancelled), has nothing to tell. A first attempt has had no review, so only later attempts
are looked up (one query for a step's claims, and one more when any of them was rejected).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Max

from orchestrator.models import Attempt, Checkpoint

# At most this many tokens of a reviewer's comment go into a prompt (cut with "…" as a summary is).
COMMENT_TOKENS = 500


@dataclass(frozen=True)
class Rejection:
    """A review that rejected a task's output: the reviewer as the audit log names them, their
    comment, and the attempt whose output they read (None if it is no longer known)."""

    reviewer: str
    comment: str
    attempt: int | None

    def in_words(self, comment: str | None = None) -> str:
        """The prompt's section on this review; `comment`: the reviewer's, bounded for the prompt
        (context.build_prompt bounds it as the agent counts tokens)."""
        comment = self.comment if comment is None else comment
        attempt = f" (attempt {self.attempt})" if self.attempt is not None else ""
        by = f" by {self.reviewer}" if self.reviewer else ""
        lines = ["## Review of your previous output", f"Your previous output{attempt} was rejected in review{by}."]
        if comment:
            lines.append(f"The reviewer's comment:\n{comment}")
        lines.append("Do the task again, and address this feedback in your new output.")
        return "\n".join(lines)


def rejections(task_ids: Iterable[int]) -> dict[int, Rejection]:
    """The tasks among `task_ids` whose latest review rejected their output, by task id."""
    ids = sorted(set(task_ids))
    if not ids:
        return {}
    latest: dict[int, Checkpoint] = {}
    reviews = (
        Checkpoint.objects.filter(task_run_id__in=ids, kind=Checkpoint.Kind.AFTER)
        .select_related("decided_by")
        .order_by("task_run_id", "-created_at", "-pk")
    )
    for review in reviews:
        if review.task_run_id is not None:
            latest.setdefault(review.task_run_id, review)
    rejected = {task_id: c for task_id, c in latest.items() if c.status == Checkpoint.Status.REJECTED}
    if not rejected:
        return {}
    # The attempt a review read: its task's last success (a later success would have opened a
    # later review).
    reviewed = dict(
        Attempt.objects.filter(task_run_id__in=list(rejected), state=Attempt.State.SUCCEEDED)
        .values("task_run_id")
        .annotate(last=Max("number"))
        .values_list("task_run_id", "last")
    )
    return {
        task_id: Rejection(reviewer=c.decider, comment=c.comment.strip(), attempt=reviewed.get(task_id))
        for task_id, c in rejected.items()
    }
