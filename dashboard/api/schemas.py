"""The API's request and response schemas.

A response carries the records of orchestrator/readmodels/records.py and, for checkpoints and
events, checkpoint_event_records.py (the same models as the JSON download and the audit export), so the OpenAPI document describes exactly what is sent;
this module adds only the API's own envelopes: pages, run detail, totals, errors. Money is a
decimal string ("0.001234"), times are ISO 8601 strings.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from orchestrator.engine import run_settings
from orchestrator.models import Checkpoint
from orchestrator.readmodels.checkpoint_event_records import CheckpointRecord, EventRecord
from orchestrator.readmodels.records import AgentRecord, RunRecord, RunTotals, TaskRunRecord

# Ids fit a signed 64-bit column; larger numbers are refused as invalid, not looked up.
MAX_ID = 2**63 - 1
MAX_OFFSET = 1_000_000_000
MAX_COMMENT_CHARS = 5000

Id = Annotated[int, Field(ge=1, le=MAX_ID)]


def _json_integer(value):
    """A JSON integer as JSON Schema reads one: 3 or 3.0, not "3", 3.5 or true."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]


def _id_range(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= MAX_ID:
        raise ValueError(f"must be from 1 to {MAX_ID}")
    return value


# An id in a body: the range checked here and stated in the schema beside the null it may be.
JsonId = Annotated[JsonInt | None, AfterValidator(_id_range)]

# The models' choices as Literal types, spelled out so that mypy can read them (a Literal built
# from `Run.Status.values` is not a type to it); tests/dashboard/test_api_schemas.py checks that
# each lists exactly its model's choices, in the same order.
RunStatus = Literal["awaiting_approval", "running", "paused", "succeeded", "failed", "cancelled", "over_budget"]
CheckpointStatus = Literal["pending", "approved", "rejected", "closed"]
AgentStatus = Literal["draft", "active", "retired"]
AgentProvider = Literal["simulated", "anthropic"]
FailurePolicy = Literal["continue", "fail_fast"]


def _no_nul(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# The same rule for the OpenAPI document (the validator above gives the message people read).
NO_NUL: JsonDict = {"pattern": "^[^\\u0000]*$"}

# What JSON Schema's (ECMAScript) `\s` matches, spelled out so that the schema and the check
# below agree on what a blank comment is (Python's `str.strip` also strips \x1c-\x1f and \x85).
_BLANK = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_SAYS_SOMETHING = re.compile(f"[^{_BLANK}\x00]")
# Not blank, and no NUL: the rejection comment's rule for the OpenAPI document.
SAYS_WHY: JsonDict = {"pattern": "^[^\\u0000]*[^\\u0000" + _BLANK.encode("unicode_escape").decode() + "][^\\u0000]*$"}


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


# --- Output: the records of orchestrator/readmodels/ (records, checkpoint_event_records), in envelopes --


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


# A budget as the schema states it: up to 8 digits, up to 4 decimals, above zero.
_INTEGER_DIGITS = run_settings.MAX_BUDGET_USD.adjusted() + 1
BUDGET_PATTERN = rf"^(?!0*(\.0*)?$)[0-9]{{1,{_INTEGER_DIGITS}}}(\.[0-9]{{1,{run_settings.BUDGET_DECIMALS}}})?$"
_BUDGET_RE = re.compile(BUDGET_PATTERN)


def _budget(value: str | None) -> Decimal | None:
    """A budget string checked as every launch checks it, and against the schema's pattern."""
    amount = _run_setting(run_settings.parse_budget)(value)
    if value is not None and not _BUDGET_RE.match(value):
        raise ValueError(f"must be an amount in USD such as 0.50, got {value!r}")
    return amount


class RunCreateIn(Schema):
    """Launch a run of a saved plan (`plan_id`) or of a plan document (`document`), not both."""

    # Exactly one of the two, said in the schema too (the validator below gives the message).
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["plan_id"], "properties": {"plan_id": {"type": "integer"}}},
                {"required": ["document"], "properties": {"document": {"type": "string"}}},
            ]
        }
    )

    plan_id: JsonId = Field(None, description="A saved plan's id", json_schema_extra={"minimum": 1, "maximum": MAX_ID})
    document: str | None = Field(
        None,
        description="A plan document, YAML or JSON text (the format of examples/*.yaml), at most 5 MB",
        json_schema_extra=NO_NUL,
    )
    filename: str = Field(
        "", max_length=255, description="The document's file name; '.json' forces JSON", json_schema_extra=NO_NUL
    )
    cap: Annotated[JsonInt | None, AfterValidator(_run_setting(run_settings.parse_cap))] = Field(
        None,
        description="Most tasks of this run at once (default: setting)",
        json_schema_extra={"minimum": run_settings.MIN_CAP, "maximum": run_settings.MAX_CAP},
    )
    budget_usd: Annotated[StrictStr | None, AfterValidator(_budget)] = Field(
        None,
        description=f"Budget in US dollars as a decimal string, {run_settings.MIN_BUDGET_USD} to "
        f"{run_settings.MAX_BUDGET_USD} (default: setting)",
        json_schema_extra={"pattern": BUDGET_PATTERN},
    )
    failure_policy: FailurePolicy = "continue"
    require_plan_approval: StrictBool | None = Field(
        None,
        description="Open a plan checkpoint that an approver must approve first. Default: yes when more than one "
        "person holds the Approver role (GLASSBOX_PLAN_APPROVAL_DEFAULT), else no",
    )

    _check_text = field_validator("document", "filename")(_no_nul)

    @model_validator(mode="after")
    def one_source(self):
        if (self.plan_id is None) == (self.document is None):
            raise ValueError("give exactly one of plan_id (a saved plan) or document (a plan's YAML or JSON text)")
        return self


class CommentIn(Schema):
    comment: str = Field("", max_length=MAX_COMMENT_CHARS, json_schema_extra=NO_NUL)


class ApproveIn(CommentIn):
    plan_version: str | None = Field(
        None,
        max_length=64,
        description="A plan checkpoint: the plan version you reviewed (the checkpoint's `plan_version`). If the plan "
        "was edited since, the approval is refused (409) and the checkpoint stays pending. Omitted: the current version",
        json_schema_extra=NO_NUL,
    )

    _check_version = field_validator("plan_version")(_no_nul)

    _check_text = field_validator("comment")(_no_nul)


class RejectIn(Schema):
    comment: str = Field(
        min_length=1, max_length=MAX_COMMENT_CHARS, description="Why: required to reject", json_schema_extra=SAYS_WHY
    )

    @field_validator("comment")
    @classmethod
    def says_why(cls, value: str) -> str:
        _no_nul(value)
        if not _SAYS_SOMETHING.search(value):
            raise ValueError("a comment is required to reject: say what is wrong")
        return value


MAX_INT = 2**31 - 1  # the database's integer columns


def _between(low: int, high: int):
    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            raise ValueError(f"must be a whole number from {low} to {high}, got {value}")
        return value

    return check


class AgentChangeIn(Schema):
    """An agent's settings to change; fields left out keep their value. Ranges and the provider's
    options are checked as in the admin (a 422 `invalid_agent` names every problem)."""

    role: str | None = Field(None, max_length=200, json_schema_extra=NO_NUL)
    capabilities: list[Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra=NO_NUL)]] | None = None
    provider: AgentProvider | None = None
    model: str | None = Field(None, min_length=1, max_length=100, json_schema_extra=NO_NUL)
    system_prompt: str | None = Field(None, json_schema_extra=NO_NUL)
    # The model's validators, stated in the schema (orchestrator/models/agents.py Agent).
    max_concurrency: Annotated[JsonInt | None, AfterValidator(_between(1, MAX_INT))] = Field(
        None, json_schema_extra={"minimum": 1, "maximum": MAX_INT}
    )
    timeout_s: Annotated[JsonInt | None, AfterValidator(_between(1, settings.GLASSBOX_MAX_TASK_TIMEOUT_S))] = Field(
        None, json_schema_extra={"minimum": 1, "maximum": settings.GLASSBOX_MAX_TASK_TIMEOUT_S}
    )
    max_retries: Annotated[JsonInt | None, AfterValidator(_between(0, 20))] = Field(
        None, json_schema_extra={"minimum": 0, "maximum": 20}
    )
    max_output_tokens: Annotated[JsonInt | None, AfterValidator(_between(1, MAX_INT))] = Field(
        None, json_schema_extra={"minimum": 1, "maximum": MAX_INT}
    )
    provider_options: dict[str, Any] | None = Field(
        None, description='The provider\'s options, e.g. {"latency": {"dist": "fixed", "seconds": 1}} for simulated'
    )
    status: AgentStatus | None = None

    _check_text = field_validator("role", "model", "system_prompt")(_no_nul)


class AgentCreateIn(AgentChangeIn):
    name: str = Field(
        min_length=1, max_length=64, pattern=r"^[-a-zA-Z0-9_]+$", description="A slug: letters, digits, - and _"
    )


class BudgetIn(Schema):
    """A run's new budget: checked as a launch's is; never below what the run spent and holds."""

    budget_usd: Annotated[StrictStr, AfterValidator(_budget)] = Field(
        description=f"The new budget in US dollars as a decimal string, {run_settings.MIN_BUDGET_USD} to "
        f"{run_settings.MAX_BUDGET_USD}",
        json_schema_extra={"pattern": BUDGET_PATTERN},
    )


class SkipIn(Schema):
    reason: str = Field("", max_length=MAX_COMMENT_CHARS, json_schema_extra=NO_NUL)

    _check_text = field_validator("reason")(_no_nul)
