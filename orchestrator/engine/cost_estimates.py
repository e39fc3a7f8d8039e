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

The same function serves the pre-flight (unsaved and saved plans) and `runs.launch`'s budget
check, so the page and the refusal never disagree.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from orchestrator import wording
from orchestrator.engine import context
from orchestrator.models import Agent, Attempt, Dependency, Plan, ProviderLimit, Subtask

# Succeeded attempts an agent needs before its median replaces the worst case.
MIN_HISTORY = 3
# The latest answers the median is taken over (an agent's prompts change over time).
HISTORY_WINDOW = 50


@dataclass(frozen=True)
class UsageBasis:
    """What one agent's estimate rests on: its recorded median usage, or the worst case."""

    agent: str
    samples: int  # succeeded attempts found (at most HISTORY_WINDOW)
    median_input_tokens: int
    median_output_tokens: int
    max_output_tokens: int

    @property
    def learned(self) -> bool:
        return self.samples >= MIN_HISTORY

    def tokens(self, estimated_input_tokens: int) -> tuple[int, int]:
        """(input, output) tokens of one subtask of this agent."""
        if not self.learned:
            return estimated_input_tokens, self.max_output_tokens
        return (
            max(estimated_input_tokens, self.median_input_tokens),
            min(self.median_output_tokens, self.max_output_tokens),
        )

    @property
    def history(self) -> str:
        """How much history a worst-case basis has, in words ("only 2 answers so far")."""
        return f"only {wording.counted(self.samples, 'answer')} so far" if self.samples else "no history yet"

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
        return f"{self.history}: assumes its maximum of {self.max_output_tokens:,} output tokens per task"


def usage_basis(agent: Agent) -> UsageBasis:
    """The agent's latest succeeded attempts on its current model (or recorded before attempts
    kept their request), summarised as medians."""
    rows = list(
        Attempt.objects.filter(task_run__agent_id=agent.pk, state=Attempt.State.SUCCEEDED)
        .filter(Q(request__model=agent.model) | Q(request={}))
        .order_by("-finished_at", "-pk")
        .values_list("input_tokens", "output_tokens")[:HISTORY_WINDOW]
    )
    return UsageBasis(
        agent=agent.name,
        samples=len(rows),
        median_input_tokens=int(statistics.median(r[0] for r in rows)) if rows else 0,
        median_output_tokens=int(statistics.median(r[1] for r in rows)) if rows else 0,
        max_output_tokens=agent.max_output_tokens,
    )


def prices() -> dict[tuple[str, str], ProviderLimit]:
    return {(limit.provider, limit.model): limit for limit in ProviderLimit.objects.all()}


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
        worst = [a for a in self.agents if not a.basis.learned]
        larger = " (the plan's input estimate where larger)" if any(a.above_median for a in self.agents) else ""
        if not worst:
            return f"from each agent's median recorded usage{larger}"
        if not learned and not any(a.basis.samples for a in worst):
            return "worst case: no agent has history yet, so every task writes its agent's maximum output"
        histories = {a.basis.history for a in worst}
        if len(histories) == 1:  # "flaky, which has only 2 answers so far"
            which = f"{'has' if len(worst) == 1 else 'have'} {histories.pop()}"
            agents = f"{', '.join(a.agent.name for a in worst)}, which {which}"
        else:  # "flaky (only 2 answers so far), writer (no history yet)"
            agents = ", ".join(f"{a.agent.name} ({a.basis.history})" for a in worst)
        if not learned:
            return f"worst case (maximum output) for {agents}"
        return f"median recorded usage of {', '.join(learned)}{larger}; worst case (maximum output) for {agents}"


def estimate(
    subtasks: Iterable[tuple[str, int]],
    agents: Mapping[str, Agent],
    price_list: Mapping[tuple[str, str], ProviderLimit] | None = None,
) -> PlanEstimate:
    """The estimate of subtasks given as (agent name, estimated input tokens)."""
    price_list = prices() if price_list is None else price_list
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
        if limit is None:
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
