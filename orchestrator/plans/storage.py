"""Saving a validated plan (all or nothing) and reading a saved plan's graph back."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from orchestrator.models import Agent, Dependency, Plan, Subtask
from orchestrator.plans import dag
from orchestrator.plans.errors import PlanError, PlanValidationError
from orchestrator.plans.spec import PlanSpec
from orchestrator.plans.validation import _active_agent_names, _agent_problems, _LazyNames, _where


def save_plan(
    spec: PlanSpec,
    *,
    document: str = "",
    source: str = Plan.Source.FILE,
    source_name: str = "",
    created_by=None,
) -> Plan:
    """Save a validated plan with its subtasks and dependencies, all or nothing.

    The agents are checked again inside the transaction: one may have been retired since the
    plan was validated. Raises PlanValidationError (and saves nothing) when one is no longer
    active.
    """
    with transaction.atomic():
        agents = _agents_still_schedulable(spec)
        plan = Plan.objects.create(
            goal=spec.goal,
            source=source,
            source_name=source_name[: Plan._meta.get_field("source_name").max_length],
            document=document,
            created_by=created_by,
        )
        Subtask.objects.bulk_create(_subtask_rows(plan, spec, agents))
        ids = dict(Subtask.objects.filter(plan=plan).values_list("key", "id"))
        Dependency.objects.bulk_create(
            Dependency(plan=plan, upstream_id=ids[upstream], downstream_id=ids[downstream])
            for upstream, downstream in spec.edges
        )
    return plan


def _agents_still_schedulable(spec: PlanSpec) -> dict[str, Agent]:
    names = {subtask.agent for subtask in spec.subtasks}
    agents = {agent.name: agent for agent in Agent.objects.select_for_update().filter(name__in=names)}
    errors = [
        PlanError(_where(subtask), problem, "agent")
        for subtask in spec.subtasks
        for problem in _agent_problems(subtask.agent, agents, _LazyNames(_active_agent_names))
    ]
    if errors:
        raise PlanValidationError(errors)
    return agents


def _subtask_rows(plan: Plan, spec: PlanSpec, agents: Mapping[str, Agent]) -> list[Subtask]:
    return [
        Subtask(
            plan=plan,
            key=subtask.key,
            title=subtask.title,
            instructions=subtask.instructions,
            agent=agents[subtask.agent],
            priority=subtask.priority,
            gate=subtask.gate,
            timeout_s=subtask.timeout_s,
            max_retries=subtask.max_retries,
            estimated_input_tokens=subtask.estimated_input_tokens,
            estimated_output_tokens=subtask.estimated_output_tokens,
            position=subtask.position,
        )
        for subtask in spec.subtasks
    ]


def plan_graph(plan: Plan) -> tuple[list[str], list[dag.Edge]]:
    """The keys (in position order) and edges of a saved plan, ready for the dag functions."""
    keys = list(plan.subtasks.order_by("position").values_list("key", flat=True))
    edges = list(plan.dependencies.order_by("id").values_list("upstream__key", "downstream__key"))
    return keys, edges
