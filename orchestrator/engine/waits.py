"""Why a task is not running yet: typed wait reasons (DESIGN §3, Admission).

In the spirit of Airflow's ``ti_deps``, every reason is its own type with a stable code and a
sentence built from its parameters. The engine stores both on the TaskRun: it filters and
compares the code (``TaskRun.wait_code``), people read the sentence (``TaskRun.wait_reason``).
A sentence may change wording at any time; a code is part of the data (events carry it, the
database is queried by it), so codes are never renamed.

The sentences carry no countdown: a reason stays the same while its cause lasts, so a waiting
task writes one event, not one per tick. A moment in one (a retry's, a provider's back-off's end)
is a time of day in UTC, labelled so, as every time the run page shows ("since 10:02:07 UTC").
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import ClassVar


@dataclass(frozen=True)
class Wait:
    """One reason a task waits: ``code`` names it, ``template`` says it in words from its fields."""

    code: ClassVar[str] = ""
    template: ClassVar[str] = ""

    @property
    def message(self) -> str:
        return self.template.format(**{f.name: _in_utc(getattr(self, f.name)) for f in fields(self)})

    def __str__(self) -> str:
        return self.message


def _in_utc(value):
    """A moment as the sentences give it: in UTC, whatever zone it came in (they say "UTC")."""
    return value.astimezone(UTC) if isinstance(value, datetime) and value.tzinfo else value


@dataclass(frozen=True)
class AgentInactive(Wait):
    """The task's agent is draft or retired: only active agents are scheduled."""

    code = "agent_inactive"
    template = "agent {agent} is {status}, not active"
    agent: str
    status: str


@dataclass(frozen=True)
class RunCap(Wait):
    """The run already has as many tasks queued or running as its cap allows."""

    code = "run_cap"
    template = "run cap reached ({cap} queued or running)"
    cap: int


@dataclass(frozen=True)
class RunPaused(Wait):
    """The run is paused: nothing new starts until someone resumes it."""

    code = "run_paused"
    template = "run paused: starts when the run is resumed"


@dataclass(frozen=True)
class PlanApproval(Wait):
    """The run's plan waits for a person's approval: no task starts before it."""

    code = "plan_approval"
    template = "waits for the plan's approval"


@dataclass(frozen=True)
class AgentLimit(Wait):
    """The agent has its ``max_concurrency`` tasks queued or running already, counted across all runs."""

    code = "agent_limit"
    template = "agent {agent} at its limit ({max_concurrency} queued or running across runs)"
    agent: str
    max_concurrency: int


@dataclass(frozen=True)
class ProviderInFlight(Wait):
    """The provider and model have as many calls in flight as their (effective) cap allows."""

    code = "provider_in_flight"
    template = "provider {provider}:{model} at its in-flight limit"
    provider: str
    model: str


@dataclass(frozen=True)
class Budget(Wait):
    """The attempt's worst-case cost would take the run past its budget."""

    code = "budget"
    template = "run budget would be exceeded"


@dataclass(frozen=True)
class ProviderBackoff(Wait):
    """The provider answered 429/529 or reported an empty budget: nothing is sent until ``until``."""

    code = "provider_backoff"
    template = "provider {provider} backing off after a rate-limit answer, until {until:%H:%M:%S} UTC"
    provider: str  # as shown: "anthropic:claude-…"
    until: datetime


@dataclass(frozen=True)
class RateLimitRequests(Wait):
    """The provider's requests-per-minute budget is used up."""

    code = "rate_limit_requests"
    template = "provider {provider} requests per minute used up{basis}"
    provider: str  # as shown: "anthropic:claude-…"
    basis: str = ""  # " (a rate learned from its 429s)" when nobody configured or reported one


@dataclass(frozen=True)
class RateLimitInput(Wait):
    """The provider's input-tokens-per-minute budget cannot hold this task's prompt."""

    code = "rate_limit_input"
    template = "provider {provider} input tokens per minute used up"
    provider: str


@dataclass(frozen=True)
class RateLimitOutput(Wait):
    """The provider's output-tokens-per-minute budget cannot hold this task's answer."""

    code = "rate_limit_output"
    template = "provider {provider} output tokens per minute used up"
    provider: str


@dataclass(frozen=True)
class RetryBackoff(Wait):
    """A failed or lost attempt is retried after an exponential backoff, from ``not_before`` on.

    The sentence names the moment, not the delay: "retrying in 0.2 s" stayed on the row, word for
    word, for as long as the task waited (seconds after a worker's death, when a host took the
    retry up only at its next admission)."""

    code = "retry_backoff"
    template = "retrying from {not_before:%H:%M:%S} UTC after: {error:.150}"
    not_before: datetime
    error: str


@dataclass(frozen=True)
class ToolApproval(Wait):
    """A running task's agent asked to call a tool granted with approval: it waits for a person
    (engine/tool_approvals.py). The run goes on; only this task waits."""

    code = "tool_approval"
    template = "waits for a person to approve a call of {tool}"
    tool: str  # SERVER:TOOL


ALL: tuple[type[Wait], ...] = (
    AgentInactive,
    RunCap,
    RunPaused,
    PlanApproval,
    AgentLimit,
    ProviderInFlight,
    Budget,
    ProviderBackoff,
    RateLimitRequests,
    RateLimitInput,
    RateLimitOutput,
    RetryBackoff,
    ToolApproval,
)
CODES: tuple[str, ...] = tuple(kind.code for kind in ALL)
