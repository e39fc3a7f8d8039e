"""What a run cost, per agent and per model (the model each attempt ran with), from its attempts
(failed attempts cost money too), and the tokens its tasks used on models without a price, which
no cost counts (`unpriced_tokens`; the rule and its words live in `prices`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, TypedDict

from django.db.models import Count, F, Sum

from orchestrator.models import Agent, Attempt, Run

from . import prices
from .tasks import TaskState, agents_of, task_states


class CostLine(TypedDict):
    name: str
    attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


def _totals(run: Run, group_by: Mapping[str, Any], label: Callable[[dict[str, Any]], str]) -> list[CostLine]:
    rows = (
        Attempt.objects.filter(task_run__run=run)
        .order_by()
        .values(**group_by)
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
    return _totals(run, {"agent": F("task_run__agent__name")}, lambda row: row["agent"])


def by_model(run: Run) -> list[CostLine]:
    return _totals(run, prices.ran_with(), lambda row: f"{row['provider']}:{row['model']}")


# --- Tokens no price counts ----------------------------------------------------------------------


def unpriced_tokens(
    run: Run, tasks: Iterable[TaskState], agents: Mapping[int, Agent], price_list: prices.Prices
) -> dict[str, int]:
    """The tokens the run's tasks used on models without a price ("provider:model" -> tokens, in
    name order; none used, none named), each attempt's on the model it ran with: the run's cost
    counts them as $0, and the budget, which reserves and settles in dollars, cannot stop their
    calls. `tasks`: every task of the run, finished or not (a task's tokens count every attempt's,
    a running one's so far too); `agents`: theirs; `price_list`: every ProviderLimit.

    While none of its agents has changed since the run was launched (`updated_at`: the registry
    saves every change), each attempt ran with its agent's model now, and the tasks' tokens say it
    without a read (the live view's frames ask at each one; reading 300 attempts' requests took
    a few ms). Once one has changed, its model may not be the one its attempts ran with, and their
    requests say which (`prices.unpriced_by_run`, one read)."""
    if any(agent.updated_at > run.created_at for agent in agents.values()):
        return prices.unpriced_by_run([run.pk], price_list).get(run.pk, {})
    used = ((agent.provider, agent.model, task.spent_tokens) for task in tasks if (agent := agents.get(task.agent_id)))
    return prices.unpriced(used, price_list)


def run_unpriced_text(run: Run) -> str:
    """`prices.unpriced_text` of a run, its tasks and agents read here (`run_status`)."""
    tasks = task_states(run)
    return prices.unpriced_text(unpriced_tokens(run, tasks, agents_of(tasks), prices.price_list()))
