"""The API's request and response schemas.

Responses are built by orchestrator/serializers.py (one `to_dict` per model, shared with the
JSON download); the output schemas here mirror its TypedDicts field for field, so that the
OpenAPI document describes exactly what is sent (tests/dashboard/test_api.py checks that the
two stay in step). Money is a decimal string ("0.001234"), times are ISO 8601 strings.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, Field, field_validator, model_validator

from orchestrator.engine import run_settings
from orchestrator.models import Agent, Checkpoint, Run

# Ids fit a signed 64-bit column; larger numbers are refused as invalid, not looked up.
MAX_ID = 2**63 - 1
MAX_OFFSET = 1_000_000_000
MAX_COMMENT_CHARS = 5000

Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Money = Annotated[str, Field(description="US dollars as a decimal string, e.g. \"0.001234\"", pattern=r"^-?\d+(\.\d+)?$")]
Time = Annotated[str | None, Field(description="ISO 8601 time in UTC, or null", json_schema_extra={"format": "date-time"})]

RunStatus = Literal[tuple(Run.Status.values)]  # type: ignore[valid-type]
CheckpointStatus = Literal[tuple(Checkpoint.Status.values)]  # type: ignore[valid-type]
AgentStatus = Literal[tuple(Agent.Status.values)]  # type: ignore[valid-type]
AgentProvider = Literal[tuple(Agent.Provider.values)]  # type: ignore[valid-type]
FailurePolicy = Literal[tuple(Run.FailurePolicy.values)]  # type: ignore[valid-type]


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


# --- Output, mirroring orchestrator/serializers.py ----------------------------------------------


class AgentOut(Schema):
    name: str
    role: str
    capabilities: list[Any]
    provider: str
    model: str
    status: str
    max_concurrency: int
    timeout_s: int
    max_retries: int
    max_output_tokens: int


class RunOut(Schema):
    id: int
    plan: int
    goal: str
    status: str
    summary: str
    cap: int
    budget_usd: Money
    failure_policy: str
    launched_by: str | None
    created_at: Time
    started_at: Time
    finished_at: Time
    input_tokens: int
    output_tokens: int
    cost_usd: Money
    reserved_usd: Money
    peak_running: int
    last_event_seq: int


class AttemptOut(Schema):
    number: int
    state: str
    worker: str
    queued_at: Time
    started_at: Time
    finished_at: Time
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: Money
    error: str
    late_result_discarded: bool


class TaskOut(Schema):
    id: int
    key: str
    title: str
    agent: str
    state: str
    wait_reason: str
    progress: int
    output: str
    summary: str
    error: str
    input_tokens: int
    output_tokens: int
    cost_usd: Money
    attempt_count: int
    ready_at: Time
    started_at: Time
    finished_at: Time
    attempts: list[AttemptOut]


class CheckpointOut(Schema):
    id: int
    kind: str
    task: str | None
    status: str
    created_at: Time
    decided_by: str | None
    decided_at: Time
    comment: str


class CheckpointWithRunOut(CheckpointOut):
    run: int


class EventOut(Schema):
    id: int
    run: int | None
    seq: int | None
    type: str
    actor_kind: str
    actor: str
    task: str | None
    agent: str | None
    message: str
    payload: dict[str, Any]
    created_at: Time


class TotalsOut(Schema):
    """Task counts by state and the run's spend (orchestrator.engine.runs.progress)."""

    total: int
    done: int
    succeeded: int
    failed: int
    skipped: int
    cancelled: int
    running: int
    queued: int
    ready: int
    throttled: int
    waiting: int
    pending: int
    elapsed_s: float
    cost_usd: Money
    input_tokens: int
    output_tokens: int


class RunDetailOut(Schema):
    run: RunOut
    totals: TotalsOut
    tasks: list[TaskOut]
    checkpoints: list[CheckpointOut]


class Page(Schema):
    count: int = Field(description="How many items match the filters in all")
    limit: int
    offset: int


class RunPage(Page):
    items: list[RunOut]


class AgentPage(Page):
    items: list[AgentOut]


class CheckpointPage(Page):
    items: list[CheckpointWithRunOut]


class EventPage(Schema):
    items: list[EventOut]
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
