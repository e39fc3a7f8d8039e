"""What an agent is told: the goal, its instructions and bounded summaries of upstream work.

A summary is the first N tokens (≈ words) of an upstream task's output, cut at a sentence
end when one falls in the last quarter, and marked with "…" when cut. A fan-in task (one with
two or more upstreams and no downstream) receives its direct upstreams' full outputs instead,
within a total token budget shared equally among them.
"""

from __future__ import annotations

from django.conf import settings

from orchestrator.models import Dependency, TaskRun

FAN_IN_BUDGET_TOKENS = 8000


def summarize(text: str, max_tokens: int | None = None) -> str:
    """Bound `text` to about `max_tokens` tokens, counting words as tokens."""
    max_tokens = max_tokens or settings.GLASSBOX_SUMMARY_TOKENS
    words = text.split()
    if len(words) <= max_tokens:
        return " ".join(words)
    cut = " ".join(words[:max_tokens])
    end = max(cut.rfind(". "), cut.rfind(".\n"))
    if end >= len(cut) * 3 // 4:
        cut = cut[: end + 1]
    return cut + " …"


def upstream_tasks(task: TaskRun) -> list[TaskRun]:
    upstream_ids = Dependency.objects.filter(downstream_id=task.subtask_id).values_list("upstream_id", flat=True)
    return list(
        TaskRun.objects.filter(run_id=task.run_id, subtask_id__in=list(upstream_ids))
        .select_related("subtask")
        .order_by("subtask__position")
    )


def is_fan_in(task: TaskRun, upstreams: list[TaskRun]) -> bool:
    return len(upstreams) >= 2 and not Dependency.objects.filter(upstream_id=task.subtask_id).exists()


def prompt_token_bound(task: TaskRun) -> int:
    """An upper bound of the prompt's tokens, known before the prompt is built (4 chars a token).

    Admission reserves cost with it, so a plan whose estimates are too low cannot overspend.
    """
    subtask = task.subtask
    own = (
        len(task.run.plan.goal) + len(subtask.title) + len(subtask.instructions) + len(task.agent.system_prompt)
    ) // 4
    upstreams = Dependency.objects.filter(downstream_id=task.subtask_id).count()
    context_tokens = FAN_IN_BUDGET_TOKENS if upstreams >= 2 else upstreams * (settings.GLASSBOX_SUMMARY_TOKENS + 20)
    return own + context_tokens + 50


def build_prompt(task: TaskRun) -> str:
    subtask = task.subtask
    upstreams = upstream_tasks(task)
    parts = [f"# {subtask.title}", f"Goal of the whole team: {task.run.plan.goal}"]
    if subtask.instructions:
        parts.append(f"Instructions:\n{subtask.instructions}")
    if upstreams:
        if is_fan_in(task, upstreams):
            share = max(1, FAN_IN_BUDGET_TOKENS // len(upstreams))
            body = [f"## {u.subtask.title} ({u.subtask.key})\n{summarize(u.output, share)}" for u in upstreams]
            parts.append("Outputs of the tasks you bring together:\n\n" + "\n\n".join(body))
        else:
            body = [f"- {u.subtask.title} ({u.subtask.key}): {u.summary}" for u in upstreams]
            parts.append("Summaries of the work you build on:\n" + "\n".join(body))
    return "\n\n".join(parts)
