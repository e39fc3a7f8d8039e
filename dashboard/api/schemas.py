"""The API's request and response schemas.

A response carries the records of orchestrator/readmodels/records.py (the same models as the
JSON download and the audit export), so the OpenAPI document describes exactly what is sent;
this module adds only the API's own envelopes: pages, run detail, totals, errors. Money is a
decimal string ("0.001234"), times are ISO 8601 strings.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from ninja import Schema
from pydantic import AfterValidator, Field, field_validator, model_validator

from orchestrator.engine import run_settings
from orchestrator.models import Checkpoint
from orchestrator.readmodels.records import (
    AgentRecord,
    CheckpointRecord,
    EventRecord,
    RunRecord,
    RunTotals,
    TaskRunRecord,
)

# Ids fit a signed 64-bit column; larger numbers are refused as invalid, not looked up.
MAX_ID = 2**63 - 1
MAX_OFFSET = 1_000_000_000
MAX_COMMENT_CHARS = 5000

Id = Annotated[int, Field(ge=1, le=MAX_ID)]

# The models' choices as Literal types, spelled out so that mypy can read them (a Literal built
# from `Run.Status.values` is not a type to it); tests/dashboard/test_api_schemas.py checks that
# each lists exactly its model's choices, in the same order.
RunStatus = Literal["awaiting_approval", "running", "paused", "succeeded", "failed", "cancelled", "over_budget"]
CheckpointStatus = Literal["pending", "approved", "rejected"]
AgentStatus = Literal["draft", "active", "retired"]
AgentProvider = Literal["simulated", "anthropic"]
FailurePolicy = Literal["continue", "fail_fast"]


def _no_nul(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# --- Errors --------------------------------------------------------------------------------------


class ErrorDetail(Schema):
    where: str = Field(description="What the problem is in: a subtask, 'body', 'query', 'path', the plan")
    field: str = Field(description="The field at fault, when there is one")
    message: str


class ErrorInfo(Schema):
    code: str = Field(description="Stable code, e.g. invalid_plan, permission_denied, not_found")
    message: str
    details: list[ErrorDetail]


class ErrorOut(Schema):
    error: ErrorInfo


# --- Output: the records of orchestrator/readmodels/records.py, in envelopes ----------------------


class CheckpointWithRun(CheckpointRecord):
    """A checkpoint with its run's id, for the list of checkpoints across runs."""

    run: int

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> CheckpointWithRun:
        return cls.build(checkpoint, run=checkpoint.run_id)


class RunDetailOut(Schema):
    run: RunRecord
    totals: RunTotals
    tasks: list[TaskRunRecord]
    checkpoints: list[CheckpointRecord]


class Page(Schema):
    count: int = Field(description="How many items match the filters in all")
    limit: int
    offset: int


class RunPage(Page):
    items: list[RunRecord]


class AgentPage(Page):
    items: list[AgentRecord]


class CheckpointPage(Page):
    items: list[CheckpointWithRun]


class EventPage(Schema):
    items: list[EventRecord]
    next_after: int = Field(description="Pass as ?after= to get the events that follow")
    has_more: bool


# --- Input ---------------------------------------------------------------------------------------


def _run_setting(parse):
    """A validator that checks a run setting as every launch does (`RunSettings`), None passing."""

    def check(value):
        if value is None:
            return None
        try:
            return parse(value)
        except run_settings.InvalidRunSetting as error:
            raise ValueError(error.problem) from None

    return check


class RunCreateIn(Schema):
    """Launch a run of a saved plan (`plan_id`) or of a plan document (`document`), not both."""

    plan_id: Id | None = Field(None, description="A saved plan's id")
    document: str | None = Field(
        None, description="A plan document, YAML or JSON text (the format of examples/*.yaml), at most 5 MB"
    )
    filename: str = Field("", max_length=255, description="The document's file name; '.json' forces JSON")
    cap: Annotated[int | None, AfterValidator(_run_setting(run_settings.parse_cap))] = Field(
        None,
        description="Most tasks of this run at once (default: setting)",
        json_schema_extra={"minimum": run_settings.MIN_CAP, "maximum": run_settings.MAX_CAP},
    )
    budget_usd: Annotated[Decimal | None, AfterValidator(_run_setting(run_settings.parse_budget))] = Field(
        None,
        description=f"Budget in US dollars, {run_settings.MIN_BUDGET_USD} to {run_settings.MAX_BUDGET_USD} "
        "(default: setting)",
    )
    failure_policy: FailurePolicy = "continue"
    require_plan_approval: bool = Field(False, description="Open a plan checkpoint that an approver must approve first")

    _check_text = field_validator("document", "filename")(_no_nul)

    @model_validator(mode="after")
    def one_source(self):
        if (self.plan_id is None) == (self.document is None):
            raise ValueError("give exactly one of plan_id (a saved plan) or document (a plan's YAML or JSON text)")
        return self


class CommentIn(Schema):
    comment: str = Field("", max_length=MAX_COMMENT_CHARS)

    _check_text = field_validator("comment")(_no_nul)


class RejectIn(Schema):
    comment: str = Field(min_length=1, max_length=MAX_COMMENT_CHARS, description="Why: required to reject")

    @field_validator("comment")
    @classmethod
    def says_why(cls, value: str) -> str:
        _no_nul(value)
        if not value.strip():
            raise ValueError("a comment is required to reject: say what is wrong")
        return value


class SkipIn(Schema):
    reason: str = Field("", max_length=MAX_COMMENT_CHARS)

    _check_text = field_validator("reason")(_no_nul)
