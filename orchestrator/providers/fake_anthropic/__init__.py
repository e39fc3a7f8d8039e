"""A local fake of the Anthropic Messages API, for tests and offline demos (DESIGN §5).

The official ``anthropic`` SDK talks to it through ``base_url`` (``ANTHROPIC_BASE_URL``), so
tests exercise the real client, its streaming parser and its error classes without the internet.
``replies`` holds what to answer (scripting), ``ratelimits`` the buckets behind the rate-limit
headers, ``answers`` token counting, the deterministic default answer and the event stream,
``server`` the HTTP server and its endpoints. The names below are re-exported so that callers
keep writing ``from orchestrator.providers.fake_anthropic import FakeAnthropicServer, Reply``.
"""

from orchestrator.providers.fake_anthropic.answers import (
    CHARS_PER_INPUT_TOKEN,
    CHARS_PER_TOOL_TOKEN,
    DEFAULT_MODEL,
    JSON_CHARS_PER_DELTA,
    WORDS_PER_DELTA,
    Answer,
    build_answer,
    count_input_tokens,
    default_reply,
    default_text,
    last_tool_results,
    last_user_text,
    minimal_instance,
    stream_events,
    text_after_tools,
    tool_pairing_problem,
)
from orchestrator.providers.fake_anthropic.ratelimits import RateLimits, TokenBucket, rfc3339
from orchestrator.providers.fake_anthropic.replies import ERROR_STATUS, RecordedRequest, Reply
from orchestrator.providers.fake_anthropic.server import MAX_BODY_BYTES, FakeAnthropicServer

__all__ = [
    "CHARS_PER_INPUT_TOKEN",
    "CHARS_PER_TOOL_TOKEN",
    "DEFAULT_MODEL",
    "ERROR_STATUS",
    "JSON_CHARS_PER_DELTA",
    "MAX_BODY_BYTES",
    "WORDS_PER_DELTA",
    "Answer",
    "FakeAnthropicServer",
    "RateLimits",
    "RecordedRequest",
    "Reply",
    "TokenBucket",
    "build_answer",
    "count_input_tokens",
    "default_reply",
    "default_text",
    "last_tool_results",
    "last_user_text",
    "minimal_instance",
    "rfc3339",
    "stream_events",
    "text_after_tools",
    "tool_pairing_problem",
]
