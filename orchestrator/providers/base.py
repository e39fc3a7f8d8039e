"""The provider interface: how the engine asks an agent's model for output (DESIGN §5).

Shaped like healthchecks' ``hc/api/transports.py``: one base class that every provider
implements, and one error type that tells the caller whether a failure is worth retrying and
whether it is the provider's fault (429/529: back off the whole provider) or the task's.

Adapters report, the core decides: a provider says what the API told it (usage, Retry-After,
the rate-limit budgets an answer reports, as :class:`ProviderFeedback`) and changes no engine
state; the engine (``orchestrator.engine.feedback``, ``execution``) updates limits and tasks.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

_API_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")
_REDACTED = "[redacted]"


@dataclass
class AgentRequest:
    """Everything a provider needs for one attempt of one subtask."""

    agent_name: str
    provider: str
    model: str
    system_prompt: str
    prompt: str
    max_tokens: int
    timeout_s: float
    seed: str
    attempt: int
    options: dict[str, Any] = field(default_factory=dict)  # Agent.provider_options
    # The conversation so far, in the Messages API's shape ({"role": "user" | "assistant",
    # "content": str | [block, ...]}). Empty: one user message, ``prompt``. An agent that uses
    # tools sends its earlier turns here (assistant tool_use blocks, user tool_result blocks).
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The tools offered to the model for this call (only granted ones; DESIGN §10).
    tools: list[ToolSpec] = field(default_factory=list)

    def conversation(self) -> list[dict[str, Any]]:
        """The messages to send: ``messages``, or the prompt as the one user message."""
        return self.messages or [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: the MCP tool's name, description and JSON input schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass
class TextDelta:
    """Yielded while the agent works."""

    text: str  # may be "": progress without new text
    output_tokens: int  # output tokens so far (an estimate until the provider reports them)


@dataclass(frozen=True)
class UsageSoFar:
    """What the provider has reported of this call's usage so far (the Messages API reports input
    tokens when the answer starts and output tokens as it ends). The caller keeps the last one, so
    that an attempt that fails, times out or is cancelled part-way still records what it used."""

    usage: Usage


@dataclass(frozen=True)
class ToolUse:
    """Yielded when the model has finished asking for one tool call (a whole tool_use block)."""

    id: str
    name: str
    input: dict[str, Any]


@dataclass
class Completed:
    """The last item of a successful stream."""

    usage: Usage
    stop_reason: str  # "end_turn", "max_tokens", "tool_use", "stop_sequence", ...
    simulated: bool
    # The assistant message's content blocks as the Messages API returns them (text and
    # tool_use blocks), for the next turn's conversation. Empty for a text-only answer.
    content: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class BudgetReport:
    """One per-minute budget as the provider reported it: its size, what is left, when it is full."""

    limit: int | None = None
    remaining: int | None = None
    reset: datetime | None = None


# The budgets a provider can report: requests, input and output tokens per minute, and "tokens",
# the most restrictive token budget (only its being empty matters).
BUDGETS = ("requests", "input-tokens", "output-tokens", "tokens")


@dataclass(frozen=True)
class ProviderFeedback:
    """What one answer of a provider said about its rate limits, for the engine to act on.

    A provider yields it in its stream as soon as the answer's headers arrive, and attaches it
    to the :class:`ProviderError` of an error answer (a 429 carries the most useful ones).
    """

    provider: str
    model: str
    budgets: dict[str, BudgetReport] = field(default_factory=dict)  # by name, one of BUDGETS


def redact_secrets(text: str) -> str:
    """``text`` with anything that looks like an Anthropic API key (or is the configured one) removed."""
    configured_key = getattr(settings, "ANTHROPIC_API_KEY", "") if settings.configured else ""
    if configured_key:
        text = text.replace(configured_key, _REDACTED)
    return _API_KEY_PATTERN.sub(_REDACTED, text)


class ProviderError(Exception):
    """A provider call failed.

    ``retryable``: another attempt may succeed (a timeout, a 5xx) as opposed to a request that
    will always fail (bad options, unknown model). ``provider_wide``: the provider refused
    for reasons that are not this task's fault (429, 529), so the caller backs off every task
    on the provider, honouring ``retry_after_s`` when given. ``feedback``: what the error
    answer said about the provider's budgets, if anything. The message never contains an
    API key: it is redacted on the way in.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        retry_after_s: float | None = None,
        provider_wide: bool = False,
        status_code: int | None = None,
        feedback: ProviderFeedback | None = None,
    ) -> None:
        self.message = redact_secrets(str(message))
        super().__init__(self.message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.provider_wide = provider_wide
        self.status_code = status_code
        self.feedback = feedback


class RateLimited(ProviderError):
    """HTTP 429: the provider's rate limit is exhausted; ``retry_after_s`` from Retry-After."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, status_code: int = 429) -> None:
        super().__init__(
            message, retryable=True, retry_after_s=retry_after_s, provider_wide=True, status_code=status_code
        )


class ProviderTimeout(ProviderError):
    """The provider did not answer (or stopped answering) within the call's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class Overloaded(ProviderError):
    """HTTP 529: the provider is overloaded as a whole."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, status_code: int = 529) -> None:
        super().__init__(
            message, retryable=True, retry_after_s=retry_after_s, provider_wide=True, status_code=status_code
        )


StreamItem = TextDelta | UsageSoFar | ToolUse | Completed | ProviderFeedback


class Provider(ABC):
    """One way of running an agent. Instances hold no per-request state.

    Providers are asyncio code: a worker process's agent host (orchestrator.engine.host) runs
    many attempts at once on one event loop, so a provider must never block it (no
    ``time.sleep``, no synchronous network or database call on the loop: hand those to a thread).
    """

    name: str

    @abstractmethod
    def stream(self, request: AgentRequest) -> AsyncGenerator[StreamItem, None]:
        """Run ``request``, yielding output as it comes (an async generator).

        Yields :class:`TextDelta` items as text arrives, :class:`UsageSoFar` whenever the
        provider reports usage, :class:`ToolUse` for each whole tool call the model asks for,
        at most one :class:`ProviderFeedback` per answer (usually first), and ends with exactly
        one :class:`Completed`, or raises :class:`ProviderError` (:class:`ProviderTimeout` when
        the provider stopped answering). The caller enforces the attempt's deadline and may
        abandon the generator at any point (``aclose()``), e.g. on timeout or cancellation.
        """

    @abstractmethod
    def estimate_duration_s(self, agent: Any, output_tokens: int) -> float:
        """Expected seconds for ``agent`` (an Agent) to produce ``output_tokens`` tokens."""


def get_provider(name: str) -> Provider:
    """The provider registered under ``name`` (an ``Agent.Provider`` value)."""
    if name == "simulated":
        from orchestrator.providers.simulated import SimulatedProvider

        return SimulatedProvider()
    if name == "anthropic":
        from orchestrator.providers.anthropic import AnthropicProvider

        return AnthropicProvider()
    raise ProviderError(f"Unknown provider {name!r}.", retryable=False)
