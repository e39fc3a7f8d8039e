"""The plan document's schema as pydantic models: one source for the validator and the planner.

`PlanDocument` states every per-field rule of a plan file (types, limits, patterns, which fields
exist); `plans.validation` runs it and words its errors for people, then adds the rules that need
the whole plan (unique keys, dependencies, cycles, agents). The planner's tool schema is this
model's JSON schema (`plans.planner.plan_tool`), so the two cannot drift apart.

A field given as null counts as not given, as it always has in plan files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

MAX_SUBTASKS = 2_000
MAX_INSTRUCTIONS_CHARS = 20_000
MAX_TITLE_CHARS = 200
MAX_KEY_CHARS = 100
PRIORITY_RANGE = (-1000, 1000)
MAX_RETRIES_RANGE = (0, 20)
TIMEOUT_RANGE = (1, settings.GLASSBOX_MAX_TASK_TIMEOUT_S)
# Estimated tokens land in PositiveIntegerField columns: keep them within a 32-bit integer.
MAX_ESTIMATED_TOKENS = 2_147_483_647
KEY_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_KEY_CHARS}}}$"

# Subtask.Gate's choices spelled out so that mypy reads a type (tests/orchestrator/plans/test_plans.py
# checks that they are exactly the model's, in its order).
Gate = Literal["none", "before", "after"]
# What a subtask receives from its upstreams (Subtask.Inputs without its "" default; same test).
Inputs = Literal["summaries", "full"]


def _distinct(keys: list[str]) -> list[str]:
    duplicates = [key for position, key in enumerate(keys) if key in keys[:position]]
    if duplicates:
        raise PydanticCustomError(
            "duplicate_entries", "lists {duplicates} more than once", {"duplicates": list(dict.fromkeys(duplicates))}
        )
    return keys


Key = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def _integer(low: int, high: int, description: str):
    return Field(None, ge=low, le=high, description=description)


class _Mapping(BaseModel):
    """A mapping of the document: strict types, no unknown fields, null meaning "not given"."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {name: value for name, value in data.items() if value is not None}
        return data


class EstimateDocument(_Mapping):
    input_tokens: int = Field(0, ge=0, le=MAX_ESTIMATED_TOKENS, description="Estimated input tokens")
    output_tokens: int = Field(0, ge=0, le=MAX_ESTIMATED_TOKENS, description="Estimated output tokens")


class DefaultsDocument(_Mapping):
    timeout_s: int | None = _integer(*TIMEOUT_RANGE, "Seconds an attempt may take, for every subtask")
    max_retries: int | None = _integer(*MAX_RETRIES_RANGE, "Retries after a failed attempt, for every subtask")


class SubtaskDocument(_Mapping):
    key: Key = Field(description="a short unique name such as research_a")
    agent: Text = Field(description="the name of an active agent")
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TITLE_CHARS)] = Field(
        description="a short human-readable title"
    )
    instructions: str = Field(
        "", max_length=MAX_INSTRUCTIONS_CHARS, description="What to do and what to hand over, understandable on its own"
    )
    depends_on: Annotated[list[str], AfterValidator(_distinct)] = Field(
        default_factory=list, description="Keys of the subtasks whose results this one needs"
    )
    gate: Gate = Field(
        "none",
        description="before: a person approves the start; after: a person reviews the output before anything "
        "downstream starts",
    )
    priority: int = Field(
        0, ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1], description="Higher runs first among ready subtasks"
    )
    timeout_s: int | None = _integer(*TIMEOUT_RANGE, "Seconds an attempt may take (default: the agent's)")
    max_retries: int | None = _integer(*MAX_RETRIES_RANGE, "Retries after a failed attempt (default: the agent's)")
    estimate: EstimateDocument = Field(default_factory=EstimateDocument, description="Estimated tokens")
    inputs: Inputs | None = Field(
        None,
        description="What it receives from its upstreams: summaries (bounded in tokens) or their full outputs; "
        "by default summaries, and full outputs for a fan-in subtask",
    )


class PlanDocument(_Mapping):
    goal: Text = Field(description="a sentence saying what the plan is for")
    defaults: DefaultsDocument = Field(default_factory=DefaultsDocument)
    subtasks: list[SubtaskDocument] = Field(
        min_length=1, max_length=MAX_SUBTASKS, description="a list of subtasks, each with key, agent and title"
    )
