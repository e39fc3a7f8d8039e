"""Saving a validated plan (all or nothing) and reading a saved plan's graph back.

The same document submitted twice (with the same goal) is one plan: `save_plan` finds the plan
saved from it by its content hash instead of saving a copy, so a plan's page lists every run of
it. A plan changed after it was saved (an approver's edited copy) has no hash: no document
describes it any more.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import yaml
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
    """Save a validated plan with its subtasks and dependencies, all or nothing, or return the
    plan already saved from the same document and goal (see `saved_plan_of`).

    The agents are checked again inside the transaction: one may have been retired since the
    plan was validated. Raises PlanValidationError (and saves nothing) when one is no longer
    active.

    The check takes no row lock on the agents. Every `advance` locks run, provider limits, then
    agents by id, and a launch saves its plan in the same transaction as its first `advance`:
    locking the agents here, before the run and the limits, deadlocked concurrent launches with
    the workers on PostgreSQL. Nothing is lost without the lock: an agent retired just after this
    check is one retired just after the launch, and the scheduler never admits an inactive agent's
    task (it waits, saying why). The foreign keys still guarantee the agents exist.
    """
    with transaction.atomic():
        agents = _agents_still_schedulable(spec)
        existing = saved_plan_of(spec, document)
        if existing is not None:
            return existing
        plan = Plan.objects.create(
            goal=spec.goal,
            source=source,
            source_name=source_name[: Plan._meta.get_field("source_name").max_length],
            document=document,
            content_hash=content_hash(spec.goal, document) if document.strip() else "",
            created_by=created_by,
        )
        Subtask.objects.bulk_create(_subtask_rows(plan, spec, agents))
        ids = dict(Subtask.objects.filter(plan=plan).values_list("key", "id"))
        Dependency.objects.bulk_create(
            Dependency(plan=plan, upstream_id=ids[upstream], downstream_id=ids[downstream])
            for upstream, downstream in spec.edges
        )
    return plan


def content_hash(goal: str, document: str) -> str:
    """SHA-256 of a plan's goal and document, line endings and a byte-order mark aside."""
    text = document.removeprefix("\ufeff").replace("\r\n", "\n")
    return hashlib.sha256(f"{goal.strip()}\x00{text}".encode()).hexdigest()


def saved_plan_of(spec: PlanSpec, document: str) -> Plan | None:
    """The plan saved earlier from this document with this goal, if any (the oldest)."""
    if not document.strip():
        return None
    return Plan.objects.filter(content_hash=content_hash(spec.goal, document)).order_by("pk").first()


def plan_document(plan: Plan) -> str:
    """A document that describes the plan as it is: the one it was saved from, or, for a plan
    edited since (no hash), its rows written out as YAML."""
    if plan.content_hash:
        return plan.document
    subtasks = list(plan.subtasks.select_related("agent").order_by("position"))
    ups: dict[int, list[str]] = {s.pk: [] for s in subtasks}
    for down, up_key in plan.dependencies.order_by("upstream__position").values_list("downstream_id", "upstream__key"):
        ups[down].append(up_key)
    data = {"goal": plan.goal, "subtasks": [_subtask_document(s, ups[s.pk]) for s in subtasks]}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def _subtask_document(subtask: Subtask, depends_on: list[str]) -> dict:
    """A saved subtask in the shape of a plan file's entry (defaults left out)."""
    item: dict = {"key": subtask.key, "agent": subtask.agent.name, "title": subtask.title}
    if subtask.instructions:
        item["instructions"] = subtask.instructions
    if depends_on:
        item["depends_on"] = depends_on
    if subtask.gate != Subtask.Gate.NONE:
        item["gate"] = subtask.gate
    if subtask.priority:
        item["priority"] = subtask.priority
    for name in ("timeout_s", "max_retries"):
        if getattr(subtask, name) is not None:
            item[name] = getattr(subtask, name)
    if subtask.estimated_input_tokens or subtask.estimated_output_tokens:
        item["estimate"] = {
            "input_tokens": subtask.estimated_input_tokens,
            "output_tokens": subtask.estimated_output_tokens,
        }
    return item


def _agents_still_schedulable(spec: PlanSpec) -> dict[str, Agent]:
    names = {subtask.agent for subtask in spec.subtasks}
    agents = {agent.name: agent for agent in Agent.objects.filter(name__in=names)}
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
            inputs=subtask.inputs,
        )
        for subtask in spec.subtasks
    ]


def plan_graph(plan: Plan) -> tuple[list[str], list[dag.Edge]]:
    """The keys (in position order) and edges of a saved plan, ready for the dag functions."""
    keys = list(plan.subtasks.order_by("position").values_list("key", flat=True))
    edges = list(plan.dependencies.order_by("id").values_list("upstream__key", "downstream__key"))
    return keys, edges


def plan_version(plan: Plan) -> str:
    """A short hash of what the plan says: goal, every subtask's fields and every dependency.

    Two plans that say the same thing have the same version; any edit changes it. A plan
    checkpoint records the version its approver reviewed, so an approval cannot apply to a plan
    edited after it was opened (engine/runs.decide).
    """
    subtasks = list(
        plan.subtasks.order_by("position").values_list(
            "key",
            "title",
            "instructions",
            "agent_id",
            "gate",
            "priority",
            "timeout_s",
            "max_retries",
            "estimated_input_tokens",
            "estimated_output_tokens",
        )
    )
    edges = sorted(plan.dependencies.values_list("upstream__key", "downstream__key"))
    content = json.dumps({"goal": plan.goal, "subtasks": subtasks, "edges": edges}, ensure_ascii=False)
    return hashlib.sha256(content.encode()).hexdigest()[:PLAN_VERSION_CHARS]


PLAN_VERSION_CHARS = 12
