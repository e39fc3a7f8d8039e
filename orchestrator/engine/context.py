"""What an agent is told: the goal, its instructions, and bounded context from upstream work.

A subtask receives from its direct upstreams either their **summaries** or their **full
outputs** (``inputs`` in the plan document; by default summaries, and full outputs for a fan-in
task: two or more upstreams and no downstream). Both are bounded in tokens, counted as the
receiving agent's provider counts them (``orchestrator.providers.token_counting``: Claude's own
token counting, the simulated provider's words), not by a guess:

* a summary is the start of an upstream's output, at most ``GLASSBOX_SUMMARY_TOKENS`` (200)
  tokens, cut back to a sentence end when one falls in the last quarter, marked with "…" when cut
  (the marker counted too). It is made when the upstream succeeds (:func:`summary_for`, counted
  for the agents downstream) and bounded again, for the agent that receives it, when a prompt is
  built;
* full outputs share :data:`FULL_INPUTS_BUDGET_TOKENS` equally.

:func:`prompt_token_bound` is what admission reserves for a prompt, and
:func:`estimated_input_tokens` what the cost estimate (pre-flight, launch) counts: the plan's
estimate plus the bound of what the subtask receives. Both follow the same choice of inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from django.conf import settings

from orchestrator import sql
from orchestrator.engine import run_shape
from orchestrator.engine.review_feedback import COMMENT_TOKENS, Rejection
from orchestrator.engine.run_shape import RunShape, SubtaskShape
from orchestrator.models import Agent, Dependency, Subtask, TaskRun
from orchestrator.providers.token_counting import MaxCounter, TokenCounter, counter_for

FULL_INPUTS_BUDGET_TOKENS = 8000
FAN_IN_BUDGET_TOKENS = FULL_INPUTS_BUDGET_TOKENS  # the name earlier callers know
CUT_MARKER = " …"
# Tokens of one upstream's heading ("- Title (key): ") on top of its summary, and of the prompt's frame.
PER_UPSTREAM_TOKENS = 20
FRAME_TOKENS = 50
CHARS_PER_TOKEN_BOUND = 4

Count = Callable[[str], int]


def _words(text: str) -> int:
    return len(text.split())


def summarize(text: str, max_tokens: int | None = None, *, count: Count | None = None) -> str:
    """``text`` bounded to ``max_tokens`` tokens as ``count`` counts them (default: words)."""
    max_tokens = max_tokens or settings.GLASSBOX_SUMMARY_TOKENS
    count = count or _words
    words = text.split()
    whole = " ".join(words)
    if count(whole) <= max_tokens:
        return whole
    fits = _longest_prefix(words, max_tokens, count)
    cut = " ".join(words[:fits])
    end = max(cut.rfind(". "), cut.rfind(".\n"))
    if end >= len(cut) * 3 // 4:
        cut = cut[: end + 1]
    return cut + CUT_MARKER if cut else CUT_MARKER.strip()


def _longest_prefix(words: list[str], max_tokens: int, count: Count) -> int:
    """The most words whose text, with the cut marker, counts at most ``max_tokens``.

    A counter may be a network call: start from the proportional guess, then bisect a narrow range.
    """

    def fits(n: int) -> bool:
        return count(" ".join(words[:n]) + CUT_MARKER) <= max_tokens

    total = max(1, count(" ".join(words)))
    guess = max(0, min(len(words), int(len(words) * max_tokens / total)))
    if fits(guess):
        low, high = guess, min(len(words), guess + max(8, guess // 4) + 1)
        if fits(high):
            low, high = high, len(words)
    else:
        low, high = max(0, guess - max(8, guess // 4) - 1), guess
        if not fits(low):
            low = 0
    while high - low > 1:  # fits(low) holds (or low is 0); fits(high) does not
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


# --- Whose count -----------------------------------------------------------------------------------


def agent_counter(agent: Agent) -> TokenCounter:
    """How ``agent``'s provider counts the tokens it receives."""
    return counter_for(agent.provider, agent.model)


def summary_counter(task: TaskRun) -> TokenCounter:
    """The strictest count among the agents that will receive ``task``'s summary (its downstream
    subtasks' agents), or its own agent's when nothing is downstream. Read from the database
    unless the run's shape says they are all the task's own agent — a chain's or a team's usual
    case, on the path from one task to the next."""
    known = run_shape.downstream_agents(task)
    if known is not None and known <= {task.agent_id}:
        return agent_counter(task.agent)
    downstream = Agent.objects.filter(subtasks__upstream_edges__upstream_id=task.subtask_id).values_list(
        "provider", "model"
    )
    pairs = sorted(set(downstream)) or [(task.agent.provider, task.agent.model)]
    counters = [counter_for(provider, model) for provider, model in pairs]
    return counters[0] if len(counters) == 1 else MaxCounter(counters)


def summary_for(task: TaskRun, output: str) -> str:
    """``task``'s summary of ``output``, bounded as its downstream agents count tokens.

    May ask the provider's token counting over the network: call it before the transaction that
    records the result, not inside it.
    """
    return summarize(output, count=summary_counter(task).count)


# --- What a subtask receives ------------------------------------------------------------------------


def upstream_tasks(task: TaskRun, upstream_subtasks: tuple[int, ...] | None = None) -> list[TaskRun]:
    """The task's direct upstreams in the run, in plan order (`upstream_subtasks`, the upstreams'
    subtask ids, when the caller knows them from the run's shape)."""
    if upstream_subtasks is None:
        upstream_subtasks = tuple(
            Dependency.objects.filter(downstream_id=task.subtask_id).values_list("upstream_id", flat=True)
        )
    return upstream_tasks_of(task.run_id, {task.subtask_id: upstream_subtasks})[task.subtask_id]


def upstream_tasks_of(
    run_id: int,
    upstreams: Mapping[int, Iterable[int]],
    known: Iterable[TaskRun] = (),
    shape: RunShape | None = None,
) -> dict[int, list[TaskRun]]:
    """The direct upstream tasks of each subtask in `upstreams` (subtask id → its upstreams' subtask
    ids), in plan order, read in one query for all of them: a fan-out's scheduling step claims
    dozens of tasks with the same upstream. `known`: tasks the caller holds as they now are (the
    one whose success takes the step), which are not read again — a chain's next task reads none.
    `shape`: the run's shape, whose subtasks the tasks read then take (orchestrator/sql.py reads
    them: a claim's statement)."""
    found = {t.subtask_id: t for t in known}
    ids = {up for ups in upstreams.values() for up in ups} - found.keys()
    if ids and shape is not None:
        for task in sql.objects(TaskRun, run_id=run_id, subtask_id__in=sorted(ids)):
            task.subtask = shape.subtask(task.subtask_id)
            found[task.subtask_id] = task
    elif ids:
        found.update(
            (t.subtask_id, t)
            for t in TaskRun.objects.filter(run_id=run_id, subtask_id__in=ids).select_related("subtask")
        )
    return {
        sid: sorted((found[up] for up in ups if up in found), key=lambda t: t.subtask.position)
        for sid, ups in upstreams.items()
    }


def is_fan_in(task: TaskRun, upstreams: list[TaskRun]) -> bool:
    return len(upstreams) >= 2 and not Dependency.objects.filter(upstream_id=task.subtask_id).exists()


def inputs_mode(inputs: str, upstreams: int, has_downstream: bool) -> str:
    """ "summaries" or "full": the subtask's choice, else the default (full for a fan-in)."""
    if inputs in (Subtask.Inputs.SUMMARIES, Subtask.Inputs.FULL):
        return str(inputs)
    return Subtask.Inputs.FULL if upstreams >= 2 and not has_downstream else Subtask.Inputs.SUMMARIES


def received_tokens_bound(mode: str, upstreams: int) -> int:
    """At most how many tokens of upstream context a subtask receives."""
    if not upstreams:
        return 0
    if mode == Subtask.Inputs.FULL:
        return FULL_INPUTS_BUDGET_TOKENS + upstreams * PER_UPSTREAM_TOKENS
    return upstreams * (settings.GLASSBOX_SUMMARY_TOKENS + PER_UPSTREAM_TOKENS)


def estimated_input_tokens(estimate: int, *, inputs: str, upstreams: int, has_downstream: bool) -> int:
    """The input tokens the cost estimate counts for a subtask: the plan's estimate of its own
    prompt, plus the bound of what it receives from its upstreams (summaries or full outputs)."""
    return estimate + received_tokens_bound(inputs_mode(inputs, upstreams, has_downstream), upstreams)


def own_tokens_bound(*texts: str) -> int:
    """A bound of the tokens of the prompt's own texts, known before it is built (4 chars a token)."""
    return sum(len(text) for text in texts) // CHARS_PER_TOKEN_BOUND


def subtask_token_bound(
    *, goal: str, title: str, instructions: str, system_prompt: str, inputs: str, upstreams: int, has_downstream: bool
) -> int:
    """An upper bound of a subtask's prompt in tokens, from the plan alone (saved or not)."""
    mode = inputs_mode(inputs, upstreams, has_downstream)
    return (
        own_tokens_bound(goal, title, instructions, system_prompt)
        + received_tokens_bound(mode, upstreams)
        + FRAME_TOKENS
    )


def prompt_token_bound(task: TaskRun) -> int:
    """An upper bound of the task's prompt, known before it is built: admission reserves cost
    with it, so a plan whose estimates are too low cannot overspend."""
    subtask = task.subtask
    return subtask_token_bound(
        goal=task.run.plan.goal,
        title=subtask.title,
        instructions=subtask.instructions,
        system_prompt=task.agent.system_prompt,
        inputs=subtask.inputs,
        upstreams=Dependency.objects.filter(downstream_id=task.subtask_id).count(),
        has_downstream=Dependency.objects.filter(upstream_id=task.subtask_id).exists(),
    )


def build_prompt(
    task: TaskRun,
    shape: SubtaskShape | None = None,
    *,
    goal: str | None = None,
    upstreams: list[TaskRun] | None = None,
    rejection: Rejection | None = None,
) -> str:
    """The task's prompt. `shape`: the subtask's place in its run's graph, `goal` the plan's and
    `upstreams` the upstream tasks (as `upstream_tasks` reads them), when the caller has them
    (engine/run_shape.py), which spares the queries that find them. `rejection`: the review that
    rejected the task's previous output, which the prompt ends with (engine/review_feedback.py)."""
    subtask = task.subtask
    if upstreams is None:
        upstreams = upstream_tasks(task, shape.upstreams if shape is not None else None)
    parts = [f"# {subtask.title}", f"Goal of the whole team: {task.run.plan.goal if goal is None else goal}"]
    if subtask.instructions:
        parts.append(f"Instructions:\n{subtask.instructions}")
    if upstreams:
        chosen = subtask.inputs in (Subtask.Inputs.SUMMARIES, Subtask.Inputs.FULL)
        # Whether anything is downstream matters only to the default of a task with several upstreams.
        has_downstream = (
            not chosen
            and len(upstreams) >= 2
            and (
                shape.has_downstream
                if shape is not None
                else Dependency.objects.filter(upstream_id=task.subtask_id).exists()
            )
        )
        mode = inputs_mode(subtask.inputs, len(upstreams), has_downstream)
        count = agent_counter(task.agent).count
        if mode == Subtask.Inputs.FULL:
            share = max(1, FULL_INPUTS_BUDGET_TOKENS // len(upstreams))
            body = [
                f"## {u.subtask.title} ({u.subtask.key})\n{summarize(u.output, share, count=count)}" for u in upstreams
            ]
            heading = (
                "Outputs of the tasks you bring together:" if len(upstreams) > 1 else "Output of the task you build on:"
            )
            parts.append(heading + "\n\n" + "\n\n".join(body))
        else:
            body = [f"- {u.subtask.title} ({u.subtask.key}): {_bounded_summary(u, count)}" for u in upstreams]
            parts.append("Summaries of the work you build on:\n" + "\n".join(body))
    if rejection is not None:
        parts.append(rejection.in_words(_bounded_comment(rejection.comment, agent_counter(task.agent).count)))
    return "\n\n".join(parts)


def _bounded_comment(comment: str, count: Count) -> str:
    """A reviewer's comment as they wrote it (its lines kept), cut only when it is longer than
    `review_feedback.COMMENT_TOKENS` as the receiving agent counts tokens."""
    if count(comment) <= COMMENT_TOKENS:
        return comment
    return summarize(comment, COMMENT_TOKENS, count=count)


def _bounded_summary(upstream: TaskRun, count: Count) -> str:
    """The upstream's stored summary, bounded again for the receiving agent's count (a summary
    made for another provider, or before counting was exact, may be longer there)."""
    if not upstream.summary:
        return ""
    return summarize(upstream.summary, count=count)
