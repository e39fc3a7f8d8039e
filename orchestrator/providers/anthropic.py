"""The ``anthropic`` provider: Claude through the official SDK's Messages API (DESIGN §5).

One attempt is one streamed ``messages.create`` call:

* **Progress.** The API reports output tokens only at ``message_start`` and in the final
  ``message_delta``; in between, output tokens so far are estimated from the text received
  (:data:`CHARS_PER_OUTPUT_TOKEN` characters per token), capped at ``max_tokens`` and never
  decreasing. :class:`~.base.Completed` carries the usage exactly as the server reported it:
  input, output, cache-read and cache-creation tokens. The cost is computed by the caller from
  the ProviderLimit's prices.
* **One retry policy.** The SDK's own retries are off (``max_retries=0``): a failed call
  raises at once and the engine's policy applies, visible as Attempt rows. Errors map to
  :class:`~.base.ProviderError`: 429 → :class:`~.base.RateLimited` and 529 →
  :class:`~.base.Overloaded` (both back off the whole provider, honouring ``retry-after``);
  an ``error`` event in the middle of a stream is mapped by its error type the same way (an
  ``overloaded_error`` mid-stream is an overload, an ``api_error`` a plain failed attempt);
  timeouts, connection failures and 5xx are retryable; other 4xx (bad request, authentication,
  permission, not found) are not.
* **Rate-limit headers.** The ``anthropic-ratelimit-*`` headers of every answer, successful or
  not, are read into a :class:`~.base.ProviderFeedback` (this is the provider's protocol): the
  stream yields it as soon as the answer starts, an error carries it as ``error.feedback``.
  What to do with it is the engine's decision (``orchestrator.engine.feedback``); nothing here
  writes engine state.
* **Async.** The SDK's ``AsyncAnthropic`` client, one per event loop (its connection pool
  belongs to the loop), so a worker process's agent host runs many calls at once.
* **Usage as it is reported.** ``message_start`` reports the input tokens (and cache tokens),
  ``message_delta`` the output tokens: each is yielded as :class:`~.base.UsageSoFar`, so an
  attempt that times out or fails part-way still records what the server counted.
* **Tool use.** ``request.tools`` are offered as the API's ``tools``; each finished ``tool_use``
  block is yielded as :class:`~.base.ToolUse`, and :class:`~.base.Completed` carries the whole
  assistant content for the next turn.
* **Timeouts.** The SDK's timeout is the task's timeout; the engine also enforces the attempt's
  deadline around the whole stream. The SDK's own timeout (a stalled connection) is a
  :class:`~.base.ProviderTimeout`, recorded as a timed-out attempt like the engine's own.
* **The API key** comes from ``settings.ANTHROPIC_API_KEY`` (the environment) and nowhere
  else: the SDK is given it explicitly, so it never reads credential files or profiles. Every
  error message is passed through ``redact_secrets``; nothing here logs a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import math
import weakref
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from typing import Any

import anthropic
from django.conf import settings

try:  # the SDK's HTTP client: httpx2 from SDK 2.x on, httpx before
    import httpx2 as sdk_http
except ImportError:  # pragma: no cover - older SDKs
    import httpx as sdk_http  # type: ignore[no-redef]  # the same API under its older name

from orchestrator import wording
from orchestrator.providers.base import (
    BUDGETS,
    AgentRequest,
    BudgetReport,
    Completed,
    Overloaded,
    Provider,
    ProviderError,
    ProviderFeedback,
    ProviderTimeout,
    RateLimited,
    StreamItem,
    TextDelta,
    ToolUse,
    Usage,
    UsageSoFar,
)

PUBLIC_BASE_URL = "https://api.anthropic.com"
CHARS_PER_OUTPUT_TOKEN = 4
# Duration estimate: time to the first token, then output tokens at this speed.
FIRST_TOKEN_S = 1.0
OUTPUT_TOKENS_PER_SECOND = 50.0
# Connecting takes at most this long, whatever the task's timeout.
CONNECT_TIMEOUT_S = 10.0
# Error types the API reports for requests that will fail again unchanged.
PERMANENT_ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "billing_error",
}
PERMANENT_STATUSES = {400, 401, 402, 403, 404, 413, 422}
# What an SDK call can raise: its own errors, and transport errors while a stream is being read.
SDK_ERRORS = (anthropic.APIError, sdk_http.HTTPError)


class MissingApiKey(ProviderError):
    def __init__(self, who: str = "the anthropic provider") -> None:
        super().__init__(
            f"ANTHROPIC_API_KEY is not set: {who} needs it. Set the environment variable, "
            "or switch the agent to the simulated provider.",
            retryable=False,
        )


def base_url() -> str:
    return settings.ANTHROPIC_BASE_URL or PUBLIC_BASE_URL


# One SDK client per event loop and (key, URL): an async client's connection pool belongs to its loop.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], anthropic.AsyncAnthropic]] = (
    weakref.WeakKeyDictionary()
)


def _client(api_key: str, url: str) -> anthropic.AsyncAnthropic:
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get((api_key, url))
    if client is None:
        # Explicit credentials and base URL: the SDK then reads neither the environment nor profiles.
        client = per_loop[(api_key, url)] = anthropic.AsyncAnthropic(api_key=api_key, base_url=url, max_retries=0)
    return client


def _api_key(who: str) -> str:
    api_key = settings.ANTHROPIC_API_KEY
    if not api_key:
        raise MissingApiKey(who)
    return api_key


def _timeout(timeout_s: float) -> anthropic.Timeout:
    return anthropic.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))


def client(timeout_s: float, *, who: str = "the anthropic provider") -> anthropic.AsyncAnthropic:
    """This loop's SDK client for one call: the configured key and base URL, no SDK retries, ``timeout_s``."""
    return _client(_api_key(who), base_url()).with_options(timeout=_timeout(timeout_s), max_retries=0)


@functools.lru_cache(maxsize=4)
def _sync_client(api_key: str, url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=api_key, base_url=url, max_retries=0)


def sync_client(timeout_s: float, *, who: str) -> anthropic.Anthropic:
    """A blocking SDK client, for callers outside the agent host (the planner, asked from a page
    or a command): the same key, base URL and policy as :func:`client`."""
    return _sync_client(_api_key(who), base_url()).with_options(timeout=_timeout(timeout_s), max_retries=0)


def parse_retry_after(value: str | None) -> float | None:
    """``retry-after`` in seconds: a number, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - datetime.now(tz=UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


RATE_LIMIT_HEADER_PREFIX = "anthropic-ratelimit-"


def parse_reset(value: str | None) -> datetime | None:
    """An RFC 3339 time (``2026-11-22T15:16:55Z``), or None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _count(value: str | None) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def rate_limit_feedback(model: str, headers: Mapping[str, str] | None) -> ProviderFeedback:
    """The budgets an answer's ``anthropic-ratelimit-{budget}-{limit,remaining,reset}`` headers
    (any case) report: the account's per-minute limits, what is left now, when it is full again."""
    lowered = {str(name).lower(): value for name, value in (headers or {}).items()}
    budgets: dict[str, BudgetReport] = {}
    for budget in BUDGETS:
        base = f"{RATE_LIMIT_HEADER_PREFIX}{budget}-"
        report = BudgetReport(
            limit=_count(lowered.get(base + "limit")),
            remaining=_count(lowered.get(base + "remaining")),
            reset=parse_reset(lowered.get(base + "reset")),
        )
        if report.limit is not None or report.remaining is not None:
            budgets[budget] = report
    return ProviderFeedback(provider="anthropic", model=model, budgets=budgets)


def map_error(exc: Exception, *, timeout_s: float | None = None, model: str = "") -> ProviderError:
    """A ProviderError (message redacted) for an exception raised by the SDK; an error answer's
    rate-limit headers go with it as ``feedback``."""
    if isinstance(exc, anthropic.APIStatusError):
        error = _map_status_error(exc)
        if exc.status_code >= 400 and exc.response is not None:
            error.feedback = rate_limit_feedback(model, exc.response.headers)
        return error
    if isinstance(exc, anthropic.APITimeoutError | sdk_http.TimeoutException):
        within = f" within {wording.time_limit(timeout_s)}" if timeout_s else ""
        return ProviderTimeout(f"anthropic: no answer{within} (timed out)")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(f"anthropic: could not reach {base_url()}: {exc}", retryable=True)
    if isinstance(exc, sdk_http.HTTPError):  # raised while reading a stream that had started
        return ProviderError(f"anthropic: the connection failed during the answer: {type(exc).__name__}: {exc}")
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ProviderError(f"anthropic: the answer did not match the API's schema: {exc}", retryable=True)
    return ProviderError(f"anthropic: {type(exc).__name__}: {exc}", retryable=True)


def _map_status_error(exc: anthropic.APIStatusError) -> ProviderError:
    status = exc.status_code
    error_type = getattr(exc, "type", None) or _body_error(exc.body, "type") or "error"
    detail = getattr(exc, "api_message", None) or _body_error(exc.body, "message") or str(exc)
    retry_after = parse_retry_after(exc.response.headers.get("retry-after")) if exc.response is not None else None
    mid_stream = status < 400  # an `error` event in a stream that had started with 200
    if mid_stream:
        text = f"anthropic: error event in the middle of the stream: {error_type}: {detail}"
    else:
        text = f"anthropic {status} {error_type}: {detail}"
    if retry_after is not None:
        text += f"; retry after {wording.time_limit(retry_after)}"
    if exc.request_id:
        text += f" (request {exc.request_id})"
    if status == 429 or error_type == "rate_limit_error":
        return RateLimited(text, retry_after_s=retry_after, status_code=429)
    if status == 529 or error_type == "overloaded_error":
        return Overloaded(text, retry_after_s=retry_after, status_code=529)
    if status in PERMANENT_STATUSES or error_type in PERMANENT_ERROR_TYPES:
        return ProviderError(text, retryable=False, status_code=status)
    return ProviderError(text, retryable=True, status_code=None if mid_stream else status)


def _body_error(body: Any, name: str) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        value = body["error"].get(name)
        return str(value) if value is not None else None
    return None


class AnthropicProvider(Provider):
    name = "anthropic"

    async def stream(self, request: AgentRequest) -> AsyncGenerator[StreamItem, None]:
        sdk = client(request.timeout_s, who=f"agent {request.agent_name}")
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": request.conversation(),
        }
        if request.system_prompt:
            params["system"] = request.system_prompt
        if request.tools:
            params["tools"] = [
                {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
                for tool in request.tools
            ]
        try:
            async with sdk.messages.stream(**params) as stream:
                feedback = rate_limit_feedback(request.model, stream.response.headers)
                if feedback.budgets:
                    yield feedback
                async with contextlib.aclosing(self._events(stream, request)) as items:
                    async for item in items:
                        yield item
        except SDK_ERRORS as exc:
            raise map_error(exc, timeout_s=request.timeout_s, model=request.model) from None

    async def _events(self, stream: Any, request: AgentRequest) -> AsyncGenerator[StreamItem, None]:
        chars = 0
        so_far = 0
        usage = Usage()
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                chars += len(event.delta.text)
                so_far = max(so_far, min(request.max_tokens, math.ceil(chars / CHARS_PER_OUTPUT_TOKEN)))
                yield TextDelta(text=event.delta.text, output_tokens=so_far)
            elif event.type == "message_start":
                usage = usage_of(event.message.usage)
                so_far = max(so_far, usage.output_tokens)
                yield UsageSoFar(usage)
            elif event.type == "message_delta":
                so_far = max(so_far, event.usage.output_tokens)
                usage = Usage(
                    input_tokens=event.usage.input_tokens or usage.input_tokens,
                    output_tokens=event.usage.output_tokens,
                    cache_read_tokens=getattr(event.usage, "cache_read_input_tokens", None) or usage.cache_read_tokens,
                    cache_creation_tokens=getattr(event.usage, "cache_creation_input_tokens", None)
                    or usage.cache_creation_tokens,
                )
                yield UsageSoFar(usage)
                yield TextDelta(text="", output_tokens=so_far)
            elif event.type == "content_block_stop" and event.content_block.type == "tool_use":
                block = event.content_block
                yield ToolUse(id=block.id, name=block.name, input=dict(block.input or {}))
            elif event.type == "message_stop":
                message = event.message
                stop_reason = message.stop_reason or "end_turn"
                content = [block.model_dump(mode="json", exclude_none=True) for block in message.content]
                yield Completed(
                    usage=usage_of(message.usage), stop_reason=stop_reason, simulated=False, content=content
                )
                return
        raise ProviderError("anthropic: the stream ended before message_stop (the connection closed early)")

    def estimate_duration_s(self, agent: Any, output_tokens: int) -> float:
        """Time to the first token plus ``output_tokens`` at a typical streaming speed."""
        return FIRST_TOKEN_S + max(0, output_tokens) / OUTPUT_TOKENS_PER_SECOND


def usage_of(usage: Any) -> Usage:
    """Our Usage from the SDK's: every count exactly as the server reported it (None → 0)."""
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
        cache_creation_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
    )
