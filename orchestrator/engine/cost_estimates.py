"""What a plan will cost: estimates that learn from the agents' recorded usage (DESIGN §5).

Before an agent has history, a subtask is estimated at its worst case: its input tokens (the
plan's estimate plus the bound of what it receives from its upstreams) plus the agent's
`max_output_tokens`. That is what admission reserves, but as an
estimate it is far too high (real answers rarely reach max_tokens: a Claude run cost 1/18 of
it), so runs that fit their budget were refused. Once an agent has MIN_HISTORY succeeded
attempts on its current model, its subtasks are estimated at the *median* input and output
tokens of its latest HISTORY_WINDOW answers instead (the plan's own input estimate, what its
upstreams send included, wins when it is larger: its author knows the prompt is long, and a
fan-in receives many outputs). Each agent's basis is kept with the estimate, with the input
tokens each subtask was counted at, so the pre-flight says what the number rests on in the
numbers it used.

An agent with tools has no worst case to give: it makes up to its `max_steps` model calls per
attempt, each re-sending a conversation that grows with every tool result, and the loop caps each
result but not how many tools one step calls. Rather than a number that is not a worst case, its
tasks are counted at their first model call at its maximum output (what admission reserves to
start one), and the words say so, and that the run's budget stops a further call it cannot cover
(`settlement.reserve_call`). Once it has history, its median attempt counts every call.

The same function serves the pre-flight (unsaved and saved plans) and `runs.launch`'s budget
check, so the page and the refusal never disagree.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from orchestrator import wording
from orchestrator.engine import context
from orchestrator.governance import tool_registry
from orchestrator.models import Agent, Attempt, Dependency, Plan, Subtask
from orchestrator.readmodels import prices

# Succeeded attempts an agent needs before its median replaces the worst case.
MIN_HISTORY = 3
# The latest answers the median is taken over (an agent's prompts change over time).
HISTORY_WINDOW = 50


@dataclass(frozen=True)
class ToolUse:
    """What an agent with tools may do in one task, for the words: up to ``steps`` model calls
    (its max_steps) with ``tools`` tools offered, whose definitions every call sends
    (``tools_tokens``)."""

    steps: int
    tools: int
    tools_tokens: int


@dataclass(frozen=True)
class UsageBasis:
    """What one agent's estimate rests on: its recorded median usage (an attempt's, every model
    call of it counted), or the worst case of one task: one model call at its maximum output, or
    for an agent with tools (``tools``) its first model call, as no worst case can be given."""

    agent: str
    samples: int  # succeeded attempts found (at most HISTORY_WINDOW)
    median_input_tokens: int
    median_output_tokens: int
    max_output_tokens: int
    tools: ToolUse | None = None  # None: no tools, one model call per task; set only without history
    # Attempts that failed, timed out or were lost, counted only while it has no succeeded one: an
    # agent whose every attempt failed has tried, so "no history yet" would be untrue of it.
    failed_attempts: int = 0

    @property
    def learned(self) -> bool:
        return self.samples >= MIN_HISTORY

    def tokens(self, estimated_input_tokens: int) -> tuple[int, int]:
        """(input, output) tokens of one subtask of this agent."""
        if not self.learned and self.tools is not None:  # its first call, the tools' definitions in it
            return estimated_input_tokens + self.tools.tools_tokens, self.max_output_tokens
        if not self.learned:
            return estimated_input_tokens, self.max_output_tokens
        return (
            max(estimated_input_tokens, self.median_input_tokens),
            min(self.median_output_tokens, self.max_output_tokens),
        )

    @property
    def history(self) -> str:
        """How much history a worst-case basis has, in words: "only 2 answers so far", "no
        successful answer yet after 3 failed attempts", "no history yet"."""
        if self.samples:
            return f"only {wording.counted(self.samples, 'answer')} so far"
        if self.failed_attempts:
            return f"no successful answer yet after {wording.counted(self.failed_attempts, 'failed attempt')}"
        return "no history yet"

    @property
    def text(self) -> str:
        return self.text_for(())

    def text_for(self, inputs: Sequence[int]) -> str:
        """The basis in words, with the input tokens its subtasks were counted at (`inputs`, as
        `tokens` gave them): where the plan's estimate of a subtask's input passes the median (what
        its upstreams send a fan-in), that is the number used, and the words give it."""
        if self.learned:
            answers = f"median of its last {wording.counted(self.samples, 'answer')}"
            median = self.median_input_tokens
            out = min(self.median_output_tokens, self.max_output_tokens)
            most = max(inputs, default=median)
            if most <= median:
                return f"{answers}: {median:,} tokens in, {out:,} out"
            amount = f"{most:,}" if min(inputs) == most else f"up to {most:,}"
            return (
                f"{answers}: {out:,} tokens out; {amount} tokens in, as the plan estimates its input "
                f"(its prompt and what its upstreams send){'' if min(inputs) == most else ' where'} "
                f"above the median of {median:,}"
            )
        if self.tools is not None:
            return (
                f"{self.history}; it uses tools, so no worst case can be given: up to"
                f" {wording.counted(self.tools.steps, 'model call')} per task (its max_steps), each re-sending a"
                " conversation that grows with every tool result, and a step may call any number of tools."
                f" Counted at its first call, at its maximum of {self.max_output_tokens:,} output tokens;"
                " the run's budget stops a further call it cannot cover"
            )
        return f"{self.history}: assumes its maximum of {self.max_output_tokens:,} output tokens per task"


def tool_use(agent: Agent) -> ToolUse | None:
    """What ``agent``'s tasks may do with the tools it is granted (None: it has none, and answers
    in one model call), from what its attempts are opened with (`granted_servers`)."""
    offered = [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for grant in tool_registry.granted_servers(agent)
        for tool in grant.tools
    ]
    if not offered:
        return None
    return ToolUse(
        steps=agent.max_steps,
        tools=len(offered),
        tools_tokens=context.own_tokens_bound(json.dumps(offered, default=str)),
    )


# Attempt states that mean it ended without an answer through no one's choice (not cancelled).
FAILED_STATES = (Attempt.State.FAILED, Attempt.State.TIMED_OUT, Attempt.State.LOST)


def _on_its_model(agent: Agent):
    """The agent's attempts on its current model (or recorded before attempts kept their request)."""
    return Attempt.objects.filter(task_run__agent_id=agent.pk).filter(Q(request__model=agent.model) | Q(request={}))


def _recent_answers(agent: Agent, *fields: str) -> list[tuple]:
    """`fields` of the agent's latest succeeded attempts on its current model, newest first."""
    succeeded = _on_its_model(agent).filter(state=Attempt.State.SUCCEEDED)
    return list(succeeded.order_by("-finished_at", "-pk").values_list(*fields)[:HISTORY_WINDOW])


def usage_basis(agent: Agent) -> UsageBasis:
    """The agent's latest succeeded attempts on its current model (or recorded before attempts
    kept their request), summarised as medians; with none, how many of its attempts failed."""
    on_its_model = _on_its_model(agent)
    rows = _recent_answers(agent, "input_tokens", "output_tokens")
    return UsageBasis(
        agent=agent.name,
        samples=len(rows),
        median_input_tokens=int(statistics.median(r[0] for r in rows)) if rows else 0,
        median_output_tokens=int(statistics.median(r[1] for r in rows)) if rows else 0,
        max_output_tokens=agent.max_output_tokens,
        tools=tool_use(agent) if len(rows) < MIN_HISTORY else None,
        failed_attempts=0 if rows else on_its_model.filter(state__in=FAILED_STATES).count(),
    )


def expected_output_tokens(agent: Agent) -> int:
    """How many output tokens an attempt of the agent is expected to write: the median of its
    latest answers once it has MIN_HISTORY of them (at most its max_output_tokens), else its
    max_output_tokens. A running attempt's progress is its output so far against this: against
    max_output_tokens alone, a 300-token answer under a 1,024 limit read "24%" when nearly done
    and then jumped to 100 %. One read (of the output tokens alone)."""
    rows = _recent_answers(agent, "output_tokens")
    if len(rows) < MIN_HISTORY:
        return max(1, agent.max_output_tokens)
    return max(1, min(int(statistics.median(r[0] for r in rows)), agent.max_output_tokens))


@dataclass(frozen=True)
class AgentEstimate:
    """One agent's share of a plan's estimate."""

    agent: Agent
    subtasks: int
    estimate_usd: Decimal
    priced: bool  # False: its model has no price, counted as $0
    basis: UsageBasis
    input_tokens: tuple[int, ...] = ()  # what each of its subtasks was counted at (`UsageBasis.tokens`)

    @property
    def above_median(self) -> bool:
        """Was a subtask counted at the plan's input estimate, above the agent's median?"""
        return self.basis.learned and max(self.input_tokens, default=0) > self.basis.median_input_tokens

    @property
    def basis_text(self) -> str:
        """What its estimate rests on, in words, with the input tokens it was counted at."""
        return self.basis.text_for(self.input_tokens)


@dataclass(frozen=True)
class PlanEstimate:
    total_usd: Decimal
    agents: list[AgentEstimate]

    @property
    def basis_text(self) -> str:
        """One line for people: what the whole estimate rests on."""
        learned = [a.agent.name for a in self.agents if a.basis.learned]
        worst = [a for a in self.agents if not a.basis.learned and a.basis.tools is None]
        tooled = [a for a in self.agents if not a.basis.learned and a.basis.tools is not None]
        larger = " (the plan's input estimate where larger)" if any(a.above_median for a in self.agents) else ""
        parts = [f"median recorded usage of {', '.join(learned)}{larger}"] if learned else []
        if worst and not learned and not tooled and not any(a.basis.samples or a.basis.failed_attempts for a in worst):
            return "worst case: no agent has history yet, so every task writes its agent's maximum output"
        if worst:
            parts.append(f"worst case (maximum output) for {_named(worst)}")
        if tooled:
            parts.append(
                f"for {_named(tooled)} and use{'s' if len(tooled) == 1 else ''} tools, no worst case can be given"
                " (a task makes up to its max_steps model calls, re-sending every tool result): the first call"
                " at maximum output is counted, and the budget stops a call it cannot cover"
            )
        if not worst and not tooled:
            return f"from each agent's median recorded usage{larger}"
        return "; ".join(parts)


def _named(lines: Sequence[AgentEstimate]) -> str:
    """Agents without enough history, with how much they have: "flaky, which has only 2 answers
    so far", or "flaky (only 2 answers so far), writer (no history yet)"."""
    histories = {line.basis.history for line in lines}
    if len(histories) == 1:
        which = f"{'has' if len(lines) == 1 else 'have'} {histories.pop()}"
        return f"{', '.join(line.agent.name for line in lines)}, which {which}"
    return ", ".join(f"{line.agent.name} ({line.basis.history})" for line in lines)


def estimate(
    subtasks: Iterable[tuple[str, int]],
    agents: Mapping[str, Agent],
    price_list: prices.Prices | None = None,
) -> PlanEstimate:
    """The estimate of subtasks given as (agent name, estimated input tokens)."""
    price_list = prices.price_list() if price_list is None else price_list
    bases: dict[str, UsageBasis] = {}
    totals: dict[str, list] = {}  # name -> [subtasks, cost, priced]
    inputs: dict[str, list[int]] = {}  # name -> the input tokens each of its subtasks is counted at
    for name, input_tokens in subtasks:
        agent = agents[name]
        basis = bases.get(name) or bases.setdefault(name, usage_basis(agent))
        entry = totals.setdefault(name, [0, Decimal("0"), True])
        entry[0] += 1
        tokens = basis.tokens(input_tokens)
        inputs.setdefault(name, []).append(tokens[0])
        limit = price_list.get((agent.provider, agent.model))
        if limit is None or not limit.is_priced:
            entry[2] = False
            continue
        entry[1] += limit.cost(*tokens)
    lines = [
        AgentEstimate(agents[name], count, cost, priced, bases[name], tuple(inputs[name]))
        for name, (count, cost, priced) in sorted(totals.items())
    ]
    return PlanEstimate(sum((line.estimate_usd for line in lines), Decimal("0")), lines)


def input_token_estimates(plan: Plan) -> list[tuple[Subtask, int]]:
    """Each subtask of a saved plan with the input tokens its estimate counts: the plan's estimate
    plus the bound of what it receives from its upstreams (context.estimated_input_tokens)."""
    edges = list(Dependency.objects.filter(plan=plan).values_list("upstream_id", "downstream_id"))
    upstreams = Counter(down for _, down in edges)
    has_downstream = {up for up, _ in edges}
    return [
        (
            subtask,
            context.estimated_input_tokens(
                subtask.estimated_input_tokens,
                inputs=subtask.inputs,
                upstreams=upstreams[subtask.pk],
                has_downstream=subtask.pk in has_downstream,
            ),
        )
        for subtask in plan.subtasks.select_related("agent").order_by("position")
    ]


def plan_estimate(plan: Plan) -> PlanEstimate:
    """The estimate of a saved plan."""
    inputs = input_token_estimates(plan)
    agents = {subtask.agent.name: subtask.agent for subtask, _ in inputs}
    return estimate(((subtask.agent.name, tokens) for subtask, tokens in inputs), agents)
