"""Launching a run from a plan document: validate, save the plan, start the run, all or nothing.

The one way a document becomes a run, shared by the JSON API, the New-run page and the `launch`
command. A refused launch (an invalid plan, a retired agent, over budget) raises and leaves no
plan behind.
"""

from __future__ import annotations

from orchestrator import events, plans
from orchestrator.engine import runs
from orchestrator.engine.run_settings import RunSettings
from orchestrator.models import Plan, Run


def launch_document(
    document: str,
    *,
    settings: RunSettings,
    filename: str = "",
    goal: str = "",
    source_name: str | None = None,
    source: str = Plan.Source.FILE,
    launched_by=None,
    actor_name: str = "",
) -> Run:
    """Validate a YAML or JSON plan document, save it and launch a run of it in one transaction.

    `goal`, when given, replaces the document's goal; `source_name` (by default `filename`) is
    what the saved plan says it came from, `source` what kind of source that is (a plan written on
    the New-run page is `manual`, not a file). Raises PlanValidationError (every problem, with its
    line) or runs.LaunchRefused (over budget); either way nothing is saved.
    """
    spec = plans.validate_document(document, filename=filename, goal=goal)
    return launch_spec(
        spec,
        document=document,
        settings=settings,
        source_name=filename if source_name is None else source_name,
        source=source,
        launched_by=launched_by,
        actor_name=actor_name,
    )


def launch_spec(
    spec: plans.PlanSpec,
    *,
    document: str,
    settings: RunSettings,
    source_name: str = "",
    source: str = Plan.Source.FILE,
    launched_by=None,
    actor_name: str = "",
) -> Run:
    """Save a validated plan and launch a run of it in one transaction (see launch_document);
    `actor_name` names who launched it when no user did (`runs.launch`)."""
    with events.atomic():
        plan = plans.save_plan(spec, document=document, source=source, source_name=source_name, created_by=launched_by)
        return runs.launch(plan, launched_by=launched_by, actor_name=actor_name, **settings.as_dict())
