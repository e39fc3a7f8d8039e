"""What a run cost, per agent and per model, from its attempts (failed attempts cost money too),
and the tokens it used on models without a price, which no cost counts (`unpriced_tokens`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, TypedDict

from django.db.models import Count, Sum

from orchestrator import sql
from orchestrator.models import Agent, Attempt, ProviderLimit, Run

from .tasks import TaskState, agents_of, task_states


class CostLine(TypedDict):
    name: str
    attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


def _totals(run: Run, group_by: tuple[str, ...], label: Callable[[dict[str, Any]], str]) -> list[CostLine]:
    rows = (
        Attempt.objects.filter(task_run__run=run)
        .order_by()
        .values(*group_by)
        .annotate(
            attempts=Count("pk"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cost_usd=Sum("cost_usd"),
        )
    )
    lines = [
        CostLine(
            name=label(row),
            attempts=row["attempts"],
            input_tokens=row["input_tokens"] or 0,
            output_tokens=row["output_tokens"] or 0,
            cost_usd=row["cost_usd"] or Decimal("0"),
        )
        for row in rows
    ]
    return sorted(lines, key=lambda line: (-line["cost_usd"], line["name"]))


def by_agent(run: Run) -> list[CostLine]:
    return _totals(run, ("task_run__agent__name",), lambda row: row["task_run__agent__name"])


def by_model(run: Run) -> list[CostLine]:
    return _totals(
        run,
        ("task_run__agent__provider", "task_run__agent__model"),
        lambda row: f"{row['task_run__agent__provider']}:{row['task_run__agent__model']}",
    )


# --- Tokens no price counts ----------------------------------------------------------------------


def price_list() -> dict[tuple[str, str], ProviderLimit]:
    """Every provider:model with a price (a ProviderLimit row: its prices, 0 included, are what
    a call is charged), read in one statement."""
    return {
        (limit.provider, limit.model): limit for limit in sql.objects(ProviderLimit, order_by=("provider", "model"))
    }


def unpriced_tokens(
    tasks: Iterable[TaskState], agents: Mapping[int, Agent], priced: Iterable[tuple[str, str]]
) -> dict[str, int]:
    """The tokens the run's tasks used on models without a price ("provider:model" -> tokens, in
    name order; none used, none named): the run's cost counts them as $0, and the budget, which
    reserves and settles in dollars, cannot stop their calls. `tasks`: every task of the run,
    finished or not (a task's tokens count every attempt's, a running one's so far too); `agents`:
    theirs; `priced`: the provider:model pairs with a price (`price_list`)."""
    known = set(priced)
    used: dict[str, int] = {}
    for task in tasks:
        agent = agents.get(task.agent_id)
        if agent is None or (agent.provider, agent.model) in known or not task.spent_tokens:
            continue
        name = f"{agent.provider}:{agent.model}"
        used[name] = used.get(name, 0) + task.spent_tokens
    return dict(sorted(used.items()))


def unpriced_text(used: Mapping[str, int]) -> str:
    """What the run's cost leaves out, in one sentence ("" when every model it used has a price):
    "anthropic:claude-x has no price: its 1,212 tokens are not in the cost, and the budget cannot
    stop them (set prices in the admin under provider limits)". The run page's Cost card and
    `run_status` say it alike."""
    if not used:
        return ""
    total = sum(used.values())
    if len(used) == 1:
        (name,) = used
        subject, have, its = name, "has", "its"
    else:
        names = [f"{name} ({_tokens(tokens)})" for name, tokens in used.items()]
        subject, have, its = f"{', '.join(names[:-1])} and {names[-1]}", "have", "their"
    verb, them = ("is", "it") if total == 1 else ("are", "them")
    return (
        f"{subject} {have} no price: {its} {_tokens(total)} {verb} not in the cost, and the budget cannot stop {them}"
        " (set prices in the admin under provider limits)"
    )


def _tokens(count: int) -> str:
    """ "1,212 tokens", "1 token"."""
    return f"{count:,} token{'' if count == 1 else 's'}"


def run_unpriced_text(run: Run) -> str:
    """`unpriced_text` of a run, its tasks and agents read here (`run_status`)."""
    tasks = task_states(run)
    return unpriced_text(unpriced_tokens(tasks, agents_of(tasks), price_list()))
