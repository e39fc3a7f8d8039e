"""Plan documents: schema (document), parse (parsing), check whole (validation), save (storage),
estimate (estimates).

The names below are the package's public interface, so callers write `plans.validate(data)`;
each lives in the module named beside it. `dag` holds the pure graph functions, `makespan` how
long a DAG takes under the run's cap and its agents' limits, and `planner` turns a goal into a
plan document.
"""

from orchestrator.plans.errors import PlanError, PlanValidationError
from orchestrator.plans.estimates import MIN_ESTIMATED_DURATION_S, estimated_duration_s, plan_weights
from orchestrator.plans.parsing import MAX_PLAN_BYTES, parse_document, read_document
from orchestrator.plans.spec import PlanSpec, SubtaskSpec
from orchestrator.plans.storage import content_hash, plan_document, plan_graph, plan_version, save_plan, saved_plan_of
from orchestrator.plans.validation import (
    MAX_INSTRUCTIONS_CHARS,
    MAX_SUBTASKS,
    MAX_TITLE_CHARS,
    agent_setting_problems,
    load_file,
    validate,
    validate_document,
)

__all__ = [
    "MAX_INSTRUCTIONS_CHARS",
    "MAX_PLAN_BYTES",
    "MAX_TITLE_CHARS",
    "MIN_ESTIMATED_DURATION_S",
    "MAX_SUBTASKS",
    "PlanError",
    "PlanSpec",
    "PlanValidationError",
    "SubtaskSpec",
    "agent_setting_problems",
    "content_hash",
    "estimated_duration_s",
    "load_file",
    "parse_document",
    "plan_document",
    "plan_graph",
    "plan_version",
    "plan_weights",
    "read_document",
    "save_plan",
    "saved_plan_of",
    "validate",
    "validate_document",
]
