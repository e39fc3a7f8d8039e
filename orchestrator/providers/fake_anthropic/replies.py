"""What the fake API answers next: scripted replies, and the record of what it received.

Tests say what the server answers next: ``server.enqueue(Reply.text(...), Reply.error(429, ...))``
in-process, or ``POST /_fake/replies`` with ``{"replies": [...]}`` (each reply as
:meth:`Reply.to_dict` gives it) from another process. Scripted replies are used first in, first
out, by ``/v1/messages`` only; with the queue empty the answer is the deterministic default of
:mod:`.answers`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

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
            message=message or default_message(error_type),
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
            message=message or default_message(error_type),
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


def default_message(error_type: str) -> str:
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
