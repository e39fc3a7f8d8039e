"""What the fake API says: token counts, the deterministic default answer, and the answer as a
message or as server-sent events.

Token counting is approximate and documented: an input token is four characters of the
system prompt, the messages' text and the tool definitions; an output token is one
whitespace-separated word of the answer (for a tool call, four characters of its JSON).

With no reply scripted the answer is deterministic (:func:`default_reply`): the text
:func:`default_text` derives from the request; when the request forces a tool
(``tool_choice: {"type": "tool", ...}``), a tool call whose input is the smallest instance of the
tool's input schema; when it offers tools, tool calls with schema-valid inputs
(``tool_calls_per_turn`` of them, in the order offered), then, once the ``tool_result`` blocks
come back, a text that quotes them and ends the turn. A conversation whose ``tool_use`` and
``tool_result`` blocks do not pair up is refused with the API's own 400
(:func:`tool_pairing_problem`).

A stream (:func:`stream_events`) follows the API's order exactly: ``message_start``, then per
content block ``content_block_start``, ``ping`` (after the first block start),
``content_block_delta`` (``text_delta`` or ``input_json_delta``), ``content_block_stop``, then
``message_delta`` with the cumulative usage and ``message_stop``.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.providers.fake_anthropic.replies import Reply
from orchestrator.tools.arguments import example_arguments

DEFAULT_MODEL = "claude-sonnet-4-6"
CHARS_PER_INPUT_TOKEN = 4
CHARS_PER_TOOL_TOKEN = 4
# Words per content_block_delta of a text block, characters per input_json_delta.
WORDS_PER_DELTA = 3
JSON_CHARS_PER_DELTA = 24
_WORD = re.compile(r"\S+\s*")


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


def new_id(prefix: str) -> str:
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
            blocks.append({"type": "tool_use", "id": new_id("toolu"), "name": use["name"], "input": parsed, "raw": raw})
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
        "id": new_id("msg"),
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
