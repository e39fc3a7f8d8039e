"""What a run cost, per agent and per model, from its attempts (failed attempts cost money too)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypedDict

from django.db.models import Count, Sum

from orchestrator.models import Attempt, Run


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
