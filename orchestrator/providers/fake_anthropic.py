"""A local fake of the Anthropic Messages API, for tests and offline demos (DESIGN §5).

It speaks the public API closely enough for the official `anthropic` SDK to talk to it through
``base_url`` (``ANTHROPIC_BASE_URL``), so tests exercise the real client, its streaming parser
and its error classes without the internet:

* ``POST /v1/messages``, streaming (server-sent events exactly in the API's order:
  ``message_start``, then per content block ``content_block_start``, ``ping`` (after the first
  block start), ``content_block_delta`` (``text_delta`` or ``input_json_delta``),
  ``content_block_stop``, then ``message_delta`` with the cumulative usage and
  ``message_stop``; an ``error`` event ends a stream that fails half-way) and non-streaming
  (one ``message`` object);
* ``POST /v1/messages/count_tokens`` (``{"input_tokens": N}``, counted as the messages
  endpoint counts them);
* errors as the API shapes them: ``{"type": "error", "error": {"type": ..., "message": ...},
  "request_id": ...}`` with the matching status (400, 401, 429, 500, 529 ...), ``retry-after``
  when given, a ``request-id`` header on every answer;
* ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``
  headers from continuously refilling token buckets (the API's algorithm), resets in RFC 3339.
  With ``enforce_limits`` an empty bucket answers 429 with ``retry-after`` as the API does.

Token counting is approximate and documented: an input token is four characters of the
system prompt, the messages' text and the tool definitions; an output token is one
whitespace-separated word of the answer (for a tool call, four characters of its JSON).

Scripting. Tests say what the server answers next: ``server.enqueue(Reply.text(...),
Reply.error(429, ...))`` in-process, or ``POST /_fake/replies`` with ``{"replies": [...]}``
(each reply as :meth:`Reply.to_dict` gives it) from another process. Scripted replies are
used first in, first out, by ``/v1/messages`` only. With the queue empty the answer is
deterministic (:func:`default_reply`): the text :func:`default_text` derives from the request;
when the request forces a tool (``tool_choice: {"type": "tool", ...}``), a tool call whose input
is the smallest instance of the tool's input schema; when it offers tools, tool calls with
schema-valid inputs (``tool_calls_per_turn`` of them, in the order offered), then, once the
``tool_result`` blocks come back, a text that quotes them and ends the turn. A conversation whose
``tool_use`` and ``tool_result`` blocks do not pair up is refused with the API's own 400. ``GET /_fake/requests`` lists what the server
received; ``POST /_fake/reset`` empties the queue and the record and refills the buckets.
The ``/_fake/`` endpoints take no credentials: the server listens on 127.0.0.1 only.

The server never keeps an API key: a recorded request shows ``x-api-key`` or ``authorization``
(SDK 2.x sends the key as a bearer token) as ``[present]``.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import socket
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestrator.tools.arguments import example_arguments

DEFAULT_MODEL = "claude-sonnet-4-6"
CHARS_PER_INPUT_TOKEN = 4
CHARS_PER_TOOL_TOKEN = 4
# Words per content_block_delta of a text block, characters per input_json_delta.
WORDS_PER_DELTA = 3
JSON_CHARS_PER_DELTA = 24
MAX_BODY_BYTES = 32 * 1024 * 1024
_WORD = re.compile(r"\S+\s*")

# HTTP status of each error type, as the API reference lists them.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
# http.server knows no reason phrase for 529.
_REASONS = {529: "Site Overloaded"}


# --- What the server answers -------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer of ``POST /v1/messages``.

    kind:
      ``"text"``: a text answer (``text``; ``None`` means the deterministic default text);
      ``"tool_use"``: a tool call (``tool_name``, ``tool_input``; ``raw_json`` sends that exact
      JSON text in the stream instead, e.g. malformed), or several in one message
      (``tool_uses``: ``[{"name": ..., "input": ...}, ...]``), optionally after a text block;
      ``"error"``: an HTTP error before any output (``status``, ``error_type``, ``message``,
      ``retry_after``);
      ``"stream_error"``: a stream that starts, sends ``error_after_words`` words of ``text``
      and then an ``error`` event (``error_type``, ``message``); a non-streaming request gets
      the same error as an HTTP status instead;
      ``"dropped"``: the connection is cut without a word of explanation, after
      ``error_after_words`` words of a stream (before any answer when not streaming).

    Usage counts default to the server's own counting; give them to script exact numbers
    (``cache_read_tokens`` / ``cache_creation_tokens`` are reported as the API reports cache
    hits and writes). ``delay_s`` waits before the answer starts, ``chunk_delay_s`` between two
    deltas (a slow stream). ``headers`` are added to (or override) the answer's headers, e.g.
    ``{"anthropic-ratelimit-requests-remaining": "0"}``. ``echo_api_key`` appends the key the
    client sent to the error message: a leaky proxy, to prove that nothing downstream shows it.
    """

    kind: str = "text"
    text: str | None = None
    tool_name: str = ""
    tool_input: Any = None
    raw_json: str | None = None
    tool_uses: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    error_type: str = ""
    message: str = ""
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    stop_reason: str | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    error_after_words: int = 0
    echo_api_key: bool = False

    KINDS = ("text", "tool_use", "error", "stream_error", "dropped")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"Reply kind must be one of {', '.join(self.KINDS)}, not {self.kind!r}")
        if self.kind == "tool_use" and not (self.tool_name or self.tool_uses):
            raise ValueError("A tool_use reply needs a tool_name (or tool_uses)")
        for use in self.tool_uses:
            if not isinstance(use, dict) or not use.get("name"):
                raise ValueError(f"each of tool_uses is {{'name': ..., 'input': ...}}, not {use!r}")
        if self.kind in ("error", "stream_error") and not self.error_type:
            raise ValueError(f"A {self.kind} reply needs an error_type such as overloaded_error")

    @classmethod
    def text_answer(cls, text: str | None = None, **options: Any) -> Reply:
        return cls(kind="text", text=text, **options)

    @classmethod
    def tool_call(cls, name: str, tool_input: Any = None, *, raw_json: str | None = None, **options: Any) -> Reply:
        return cls(kind="tool_use", tool_name=name, tool_input=tool_input, raw_json=raw_json, **options)

    @classmethod
    def tool_calls(cls, *calls: tuple[str, Any], text: str | None = None, **options: Any) -> Reply:
        """Several tool calls in one message (the model asks for them in parallel), in this order."""
        uses = [{"name": name, "input": tool_input if tool_input is not None else {}} for name, tool_input in calls]
        return cls(kind="tool_use", tool_uses=uses, text=text, **options)

    @classmethod
    def error(
        cls,
        status: int,
        error_type: str | None = None,
        message: str = "",
        *,
        retry_after: float | None = None,
        **options: Any,
    ) -> Reply:
        error_type = error_type or next((t for t, s in ERROR_STATUS.items() if s == status), "api_error")
        return cls(
            kind="error",
            status=status,
            error_type=error_type,
            message=message or _default_message(error_type),
            retry_after=retry_after,
            **options,
        )

    @classmethod
    def stream_error(
        cls, error_type: str = "overloaded_error", message: str = "", *, after_words: int = 5, **options: Any
    ) -> Reply:
        return cls(
            kind="stream_error",
            error_type=error_type,
            message=message or _default_message(error_type),
            error_after_words=after_words,
            **options,
        )

    @classmethod
    def dropped(cls, *, after_words: int = 5, **options: Any) -> Reply:
        return cls(kind="dropped", error_after_words=after_words, **options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reply:
        if not isinstance(data, dict):
            raise ValueError(f"a reply must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown reply field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def _default_message(error_type: str) -> str:
    return {
        "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
        "overloaded_error": "Overloaded",
        "api_error": "Internal server error",
        "authentication_error": "invalid x-api-key",
        "invalid_request_error": "Invalid request",
        "permission_error": "Your API key does not have permission to use the specified resource.",
        "not_found_error": "The requested resource could not be found.",
    }.get(error_type, error_type.replace("_", " "))


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# --- Rate limits ---------------------------------------------------------------------------------


class TokenBucket:
    """A bucket of ``per_minute`` units that refills continuously, like the API's limiter."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute = per_minute
        self.clock = clock
        self.level = float(per_minute)
        self.updated = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.per_minute, self.level + (now - self.updated) * self.per_minute / 60.0)
        self.updated = now

    def remaining(self) -> int:
        self._refill()
        return max(0, math.floor(self.level))

    def wait_for(self, amount: int) -> float:
        """Seconds until ``amount`` units are there (0 when they are)."""
        self._refill()
        missing = min(amount, self.per_minute) - self.level
        return max(0.0, missing * 60.0 / self.per_minute)

    def take(self, amount: int) -> None:
        self._refill()
        self.level = max(0.0, self.level - amount)

    def seconds_to_full(self) -> float:
        self._refill()
        return (self.per_minute - self.level) * 60.0 / self.per_minute

    def refill(self) -> None:
        self.level, self.updated = float(self.per_minute), self.clock()


@dataclass
class RateLimits:
    """The account's limits (the defaults are Tier 1 limits of a Sonnet model)."""

    requests_per_minute: int = 50
    input_tokens_per_minute: int = 30_000
    output_tokens_per_minute: int = 8_000


def rfc3339(seconds_from_now: float) -> str:
    moment = datetime.fromtimestamp(time.time() + seconds_from_now, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Token counting and default answers ------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    parts.append(json.dumps(block.get("input", {})))
                elif block.get("type") == "tool_result":
                    parts.append(_text_of(block.get("content", "")))
        return "\n".join(parts)
    return ""


def count_input_tokens(body: dict[str, Any]) -> int:
    """Four characters of system prompt, messages and tool definitions make one input token."""
    chars = len(_text_of(body.get("system", "")))
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            chars += len(_text_of(message.get("content", "")))
    if body.get("tools"):
        chars += len(json.dumps(body["tools"]))
    return max(1, math.ceil(chars / CHARS_PER_INPUT_TOKEN))


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content", ""))
    return ""


def default_text(body: dict[str, Any]) -> str:
    """The deterministic answer: it names the model and quotes the start of the last user message."""
    prompt_words = last_user_text(body).split()
    quoted = " ".join(prompt_words[:12]) + (" …" if len(prompt_words) > 12 else "")
    model = body.get("model", DEFAULT_MODEL)
    return (
        f'This is the fake Anthropic API answering as {model}. You asked: "{quoted}". '
        "A real model would answer here; this server returns the same words for the same "
        "request so that tests and offline demos are reproducible. It streams them a few "
        "words at a time, reports usage like the real API, and ends with a short summary. "
        "Summary: the request was received, understood and answered deterministically."
    )


def minimal_instance(schema: Any) -> Any:
    """The smallest value a JSON schema accepts: required properties only, minItems items."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return copy.deepcopy(schema["const"])
    if schema.get("enum"):
        return copy.deepcopy(schema["enum"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        return {name: minimal_instance(properties.get(name, {})) for name in schema.get("required") or []}
    if kind == "array":
        return [minimal_instance(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return "x" * int(schema.get("minLength", 0)) or "example"
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


# --- The answer, computed before anything is sent --------------------------------------------------


@dataclass
class Answer:
    """Content blocks and usage of one message, before it is sent as JSON or as events."""

    model: str
    blocks: list[dict[str, Any]]  # {"type": "text", "words": [...]} or {"type": "tool_use", ...}
    stop_reason: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int

    def usage(self, *, start: bool = False) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_tokens,
            "cache_read_input_tokens": self.cache_read_tokens,
            "output_tokens": 1 if start else self.output_tokens,
        }
        if start:
            usage["service_tier"] = "standard"
        return usage

    def content(self) -> list[dict[str, Any]]:
        result = []
        for block in self.blocks:
            if block["type"] == "text":
                result.append({"type": "text", "text": "".join(block["words"])})
            else:
                result.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]})
        return result


_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):020d}"


def build_answer(reply: Reply, body: dict[str, Any]) -> Answer:
    model = str(body.get("model") or DEFAULT_MODEL)
    max_tokens = int(body["max_tokens"])
    input_tokens = reply.input_tokens if reply.input_tokens is not None else count_input_tokens(body)
    blocks: list[dict[str, Any]] = []
    words = _WORD.findall(reply.text if reply.text is not None else default_text(body))
    stop_reason = reply.stop_reason or "end_turn"
    if reply.kind == "tool_use":
        if reply.text:
            blocks.append({"type": "text", "words": words})
        uses = list(reply.tool_uses)
        if reply.tool_name:
            uses.insert(0, {"name": reply.tool_name, "input": reply.tool_input, "raw": reply.raw_json})
        for use in uses:
            tool_input = use.get("input") if use.get("input") is not None else {}
            raw = use["raw"] if use.get("raw") is not None else json.dumps(tool_input)
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None  # malformed on purpose: only a stream can carry it
            blocks.append(
                {"type": "tool_use", "id": _new_id("toolu"), "name": use["name"], "input": parsed, "raw": raw}
            )
        produced = sum(len(b["words"]) for b in blocks if b["type"] == "text") + sum(
            math.ceil(len(b["raw"]) / CHARS_PER_TOOL_TOKEN) for b in blocks if b["type"] == "tool_use"
        )
        stop_reason = reply.stop_reason or "tool_use"
    else:
        if len(words) > max_tokens:
            words, stop_reason = words[:max_tokens], "max_tokens"
        if reply.kind in ("stream_error", "dropped"):
            words = words[: reply.error_after_words]
        blocks.append({"type": "text", "words": words})
        produced = len(words)
    return Answer(
        model=model,
        blocks=blocks,
        stop_reason=stop_reason,
        input_tokens=input_tokens,
        output_tokens=reply.output_tokens if reply.output_tokens is not None else produced,
        cache_read_tokens=reply.cache_read_tokens,
        cache_creation_tokens=reply.cache_creation_tokens,
    )


def default_reply(body: dict[str, Any], *, tool_calls_per_turn: int = 1) -> Reply:
    """What the server answers when nothing is scripted, deterministically:

    * a forced tool (``tool_choice: {"type": "tool"}``): that tool, with the smallest valid input;
    * tools offered (``tool_choice`` auto or absent) and no tool result yet in the last user
      message: ``tool_calls_per_turn`` calls of the offered tools, in the order offered (the next
      ones at each tool turn), with inputs derived from each tool's schema and the request
      (``orchestrator.tools.arguments``: a schema's ``examples`` are used when it has some);
      ``tool_choice: {"type": "any"}`` always calls a tool;
    * tool results just came back: a text answer that quotes them, ending the turn;
    * otherwise (``tool_choice: {"type": "none"}`` too): :func:`default_text`.
    """
    choice = body.get("tool_choice") or {}
    choice_type = choice.get("type", "auto") if isinstance(choice, dict) else "auto"
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name") and "input_schema" in t]
    if choice_type == "tool":
        tool: dict[str, Any] = next((t for t in tools if t.get("name") == choice.get("name")), {})
        return Reply.tool_call(choice["name"], minimal_instance(tool.get("input_schema", {})))
    if not tools or choice_type == "none":
        return Reply.text_answer()
    results = last_tool_results(body)
    if results and choice_type != "any":
        return Reply.text_answer(text_after_tools(body, results))
    count = max(1, tool_calls_per_turn) if choice_type == "any" else tool_calls_per_turn
    if count <= 0:
        return Reply.text_answer()
    turn = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and _tool_uses_of(m))
    chosen = [tools[(turn * count + i) % len(tools)] for i in range(min(count, len(tools)))]
    seed = f"{turn}:{last_user_text(body)}"
    calls = [(t["name"], example_arguments(t.get("input_schema") or {}, f"{t['name']}:{seed}")) for t in chosen]
    return Reply.tool_calls(*calls, text=f"I will use {', '.join(name for name, _ in calls)}.")


def _tool_uses_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def last_tool_results(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(tool name, result text, is_error) of the tool results in the last message, if it is a user's."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not messages or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), list):
        return []
    names = {b.get("id"): b.get("name") for m in messages[:-1] for b in _tool_uses_of(m)}
    return [
        (str(names.get(b.get("tool_use_id"), "tool")), _text_of(b.get("content", "")), bool(b.get("is_error")))
        for b in messages[-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def text_after_tools(body: dict[str, Any], results: list[tuple[str, str, bool]]) -> str:
    """The deterministic answer once tool results are back: it quotes each one's start."""
    quoted = "; ".join(
        f"{name} {'failed: ' if failed else '→ '}{' '.join(text.split()[:12])}" for name, text, failed in results
    )
    return (
        f"This is the fake Anthropic API answering as {body.get('model', DEFAULT_MODEL)} after using tools. "
        f"Tool results: {quoted}. Summary: the tools were called and their results read deterministically."
    )


def tool_pairing_problem(messages: list[Any]) -> str | None:
    """The API's own refusal of a conversation whose tool calls and results do not pair up."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        results = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if message.get("role") == "user" and isinstance(content, list)
            else []
        )
        asked = (
            {b.get("id") for b in _tool_uses_of(messages[index - 1])}
            if index and isinstance(messages[index - 1], dict)
            else set()
        )
        for position, block in enumerate(results):
            if block.get("tool_use_id") not in asked:
                return (
                    f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` block "
                    "in the previous message."
                )
        uses = _tool_uses_of(message)
        if uses and index + 1 < len(messages):
            following = messages[index + 1]
            blocks = following.get("content") if isinstance(following, dict) else None
            answered = {
                b.get("tool_use_id")
                for b in (blocks if isinstance(blocks, list) else [])
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            missing = [u.get("id") for u in uses if u.get("id") not in answered]
            if missing:
                return (
                    f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(str(m) for m in missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
    return None


def stream_events(answer: Answer, reply: Reply) -> list[tuple[str, dict[str, Any], float]]:
    """The events of one streamed answer, each with the pause before it."""
    message: dict[str, Any] = {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": answer.usage(start=True),
    }
    events: list[tuple[str, dict[str, Any], float]] = [
        ("message_start", {"type": "message_start", "message": message}, 0.0)
    ]
    for index, block in enumerate(answer.blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            words = block["words"]
            pieces = ["".join(words[i : i + WORDS_PER_DELTA]) for i in range(0, len(words), WORDS_PER_DELTA)]
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = block["raw"]
            pieces = [raw[i : i + JSON_CHARS_PER_DELTA] for i in range(0, len(raw), JSON_CHARS_PER_DELTA)]
            deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
                {"type": "input_json_delta", "partial_json": piece} for piece in pieces
            ]
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}, 0.0)
        )
        if index == 0:
            events.append(("ping", {"type": "ping"}, 0.0))
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            events.append(("content_block_delta", event, reply.chunk_delay_s))
        if reply.kind in ("stream_error", "dropped"):
            return events  # an error event or nothing follows; the block is never closed
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}, 0.0))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
                "usage": answer.usage(),
            },
            0.0,
        )
    )
    events.append(("message_stop", {"type": "message_stop"}, 0.0))
    return events


# --- The server ----------------------------------------------------------------------------------


class FakeAnthropicServer:
    """The fake API on 127.0.0.1, served from a background thread. Use it as a context manager.

    ``port=0`` picks a free port (see :attr:`url`), so tests can run in parallel.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: RateLimits | None = None,
        enforce_limits: bool = False,
        api_key: str | None = None,
        chunk_delay_s: float = 0.0,
        tool_calls_per_turn: int = 1,
    ):
        self.limits = limits or RateLimits()
        # Unscripted answers to a request that offers tools: this many tool calls per turn (0: none).
        self.tool_calls_per_turn = tool_calls_per_turn
        self.enforce_limits = enforce_limits
        self.api_key = api_key  # None: any non-empty key is accepted
        self.chunk_delay_s = chunk_delay_s  # default pause between deltas of unscripted answers
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._buckets = self._new_buckets()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # Lifecycle

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeAnthropicServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, and cut the connections clients keep alive: a later server on the same
        port must not find its requests answered by this one's handler threads."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close_connections(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the management command)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._stopping.set()
            self._httpd.server_close()
            self._close_connections()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # Scripting

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self._requests.clear()
            self._buckets = self._new_buckets()

    # Internals used by the handler

    def _new_buckets(self) -> dict[str, TokenBucket]:
        return {
            "requests": TokenBucket(self.limits.requests_per_minute),
            "input-tokens": TokenBucket(self.limits.input_tokens_per_minute),
            "output-tokens": TokenBucket(self.limits.output_tokens_per_minute),
        }

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _admit(self, input_tokens: int) -> float:
        """Take one request and its input tokens from the buckets. When limits are enforced and a
        bucket is short (the output bucket empty counts too), take nothing and return the seconds
        to wait. A scripted reply is not used up by a refusal."""
        with self._lock:
            wanted = {"requests": 1, "input-tokens": input_tokens}
            if self.enforce_limits:
                wait = max(
                    self._buckets["output-tokens"].wait_for(1),
                    *(self._buckets[name].wait_for(amount) for name, amount in wanted.items()),
                )
                if wait > 0:
                    return wait
            for name, amount in wanted.items():
                self._buckets[name].take(amount)
            return 0.0

    def _charge_output(self, output_tokens: int) -> None:
        with self._lock:
            self._buckets["output-tokens"].take(output_tokens)

    def _rate_limit_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        with self._lock:
            for name, bucket in self._buckets.items():
                headers[f"anthropic-ratelimit-{name}-limit"] = str(bucket.per_minute)
                headers[f"anthropic-ratelimit-{name}-remaining"] = str(bucket.remaining())
                headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(bucket.seconds_to_full())
            # "tokens": the most restrictive token limit in effect.
            tightest = min(("input-tokens", "output-tokens"), key=lambda n: self._buckets[n].remaining())
            for suffix in ("limit", "remaining", "reset"):
                headers[f"anthropic-ratelimit-tokens-{suffix}"] = headers[f"anthropic-ratelimit-{tightest}-{suffix}"]
        return headers


def _handler_for(server: FakeAnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_FakeApiHandler):
        fake = server

    return Handler


class _FakeApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-anthropic/1.0"
    fake: FakeAnthropicServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the record instead
        return

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the connection was cut by stop()

    def handle_one_request(self) -> None:
        if self.fake._stopping.is_set():
            self.close_connection = True
            return
        super().handle_one_request()

    # Routing

    def do_GET(self) -> None:
        if self.path == "/_fake/requests":
            self._send_json(200, {"requests": [asdict(r) for r in self.fake.requests]})
        else:
            self._send_error(404, "not_found_error", f"No route for GET {self.path}")

    def do_POST(self) -> None:
        request_id = _new_id("req")
        body_bytes = self._read_body()
        if body_bytes is None:
            return
        if self.path.startswith("/_fake/"):
            self._control(body_bytes)
            return
        if self.path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"No route for POST {self.path}", request_id=request_id)
            return
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError as exc:
            message = f"The request body is not valid JSON: {exc}"
            self._send_error(400, "invalid_request_error", message, request_id=request_id)
            return
        self.fake._record(RecordedRequest("POST", self.path, self._safe_headers(), body))
        problem = self._check_request(body)
        if problem:
            status, error_type, message = problem
            self._send_error(status, error_type, message, request_id=request_id)
            return
        if self.path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": count_input_tokens(body)}, request_id=request_id)
            return
        self._messages(body, request_id)

    # /_fake/ control endpoints

    def _control(self, body_bytes: bytes) -> None:
        try:
            data = json.loads(body_bytes or b"{}")
            if self.path == "/_fake/replies":
                replies = [Reply.from_dict(item) for item in data.get("replies", [])]
                self.fake.enqueue(*replies)
                self._send_json(200, {"queued": len(replies), "pending": self.fake.pending()})
            elif self.path == "/_fake/reset":
                self.fake.reset()
                self._send_json(200, {"reset": True})
            else:
                self._send_json(404, {"error": f"No control endpoint {self.path}"})
        except (ValueError, TypeError, AttributeError) as exc:
            self._send_json(400, {"error": str(exc)})

    # /v1/ endpoints

    def _check_request(self, body: Any) -> tuple[int, str, str] | None:
        """The API's own refusals: credentials, version header, required fields."""
        credential = self._credential()
        if not credential:
            return 401, "authentication_error", "x-api-key header is required"
        if self.fake.api_key is not None and credential != self.fake.api_key:
            return 401, "authentication_error", "invalid x-api-key"
        if not self.headers.get("anthropic-version"):
            return 400, "invalid_request_error", "anthropic-version: header is required"
        if not isinstance(body, dict):
            return 400, "invalid_request_error", "The request body must be a JSON object"
        required = ("model", "messages") if self.path.endswith("count_tokens") else ("model", "max_tokens", "messages")
        for name in required:
            if name not in body:
                return 400, "invalid_request_error", f"{name}: Field required"
        if not isinstance(body["messages"], list) or not body["messages"]:
            return 400, "invalid_request_error", "messages: at least one message is required"
        if "max_tokens" in body and (not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1):
            return 400, "invalid_request_error", "max_tokens: must be an integer of at least 1"
        pairing = tool_pairing_problem(body["messages"])
        if pairing:
            return 400, "invalid_request_error", pairing
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool":
            names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
            if choice.get("name") not in names:
                return 400, "invalid_request_error", f"tool_choice: tool {choice.get('name')!r} is not in tools"
        return None

    def _messages(self, body: dict[str, Any], request_id: str) -> None:
        wait = self.fake._admit(count_input_tokens(body))
        if wait > 0:
            self._send_error(
                429,
                "rate_limit_error",
                "This request would exceed your organization's rate limit. Please reduce the prompt length "
                "or the maximum tokens requested, or try again later.",
                request_id=request_id,
                retry_after=max(1, math.ceil(wait)),
            )
            return
        reply = self.fake._next_reply()
        if reply is None:
            reply = default_reply(body, tool_calls_per_turn=self.fake.tool_calls_per_turn)
            reply.chunk_delay_s = self.fake.chunk_delay_s
        if reply.delay_s and self._sleep(reply.delay_s):
            return
        extra = dict(reply.headers)
        if reply.kind == "dropped" and not body.get("stream"):
            self.close_connection = True  # no answer at all
            return
        if reply.kind == "error" or (reply.kind == "stream_error" and not body.get("stream")):
            status = reply.status if reply.kind == "error" else ERROR_STATUS.get(reply.error_type, 500)
            self._send_error(
                status,
                reply.error_type,
                self._message_of(reply),
                request_id=request_id,
                retry_after=reply.retry_after,
                extra=extra,
            )
            return
        answer = build_answer(reply, body)
        self.fake._charge_output(answer.output_tokens)
        if body.get("stream"):
            self._stream(answer, reply, request_id, extra)
        else:
            message = {
                "id": _new_id("msg"),
                "type": "message",
                "role": "assistant",
                "model": answer.model,
                "content": answer.content(),
                "stop_reason": answer.stop_reason,
                "stop_sequence": None,
                "usage": {**answer.usage(), "service_tier": "standard"},
            }
            self._send_json(200, message, request_id=request_id, extra=extra)

    def _stream(self, answer: Answer, reply: Reply, request_id: str, extra: dict[str, str]) -> None:
        self.send_response(200)
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            "request-id": request_id,
            **self.fake._rate_limit_headers(),
            **{name.lower(): value for name, value in extra.items()},
        }
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for name, data, pause in stream_events(answer, reply):
                if pause and self._sleep(pause):
                    return
                self._write_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if reply.kind == "dropped":
                self.close_connection = True  # cut: no error event, no end of the chunked body
                return
            if reply.kind == "stream_error":
                error = {"type": "error", "error": {"type": reply.error_type, "message": self._message_of(reply)}}
                self._write_chunk(f"event: error\ndata: {json.dumps(error)}\n\n".encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. it timed out)

    # Helpers

    def _message_of(self, reply: Reply) -> str:
        message = reply.message or _default_message(reply.error_type)
        if reply.echo_api_key:
            message += f" (key sent: {self._credential()})"
        return message

    def _credential(self) -> str:
        """The key the client sent: ``x-api-key``, or ``Authorization: Bearer`` (SDK 2.x sends that)."""
        key = self.headers.get("x-api-key") or ""
        bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        return key or bearer

    def _sleep(self, seconds: float) -> bool:
        """Pause; True when the server is stopping (the answer is abandoned)."""
        return self.fake._stopping.wait(seconds)

    def _read_body(self) -> bytes | None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self._send_error(
                413, "request_too_large", f"Request exceeds the maximum allowed size of {MAX_BODY_BYTES} bytes"
            )
            return None
        return self.rfile.read(length) if length else b""

    def _safe_headers(self) -> dict[str, str]:
        secret = {"x-api-key", "authorization"}
        return {
            name.lower(): ("[present]" if name.lower() in secret else value) for name, value in self.headers.items()
        }

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(
        self, status: int, data: Any, *, request_id: str | None = None, extra: dict[str, str] | None = None
    ) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status, _REASONS.get(status))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        headers = {"request-id": request_id, **self.fake._rate_limit_headers()} if request_id else {}
        headers.update({name.lower(): value for name, value in (extra or {}).items()})  # scripted ones win
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        request_id: str | None = None,
        retry_after: float | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        request_id = request_id or _new_id("req")
        headers = dict(extra or {})
        if retry_after is not None:
            headers.setdefault("retry-after", _seconds(retry_after))
        body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}
        self._send_json(status, body, request_id=request_id, extra=headers)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
