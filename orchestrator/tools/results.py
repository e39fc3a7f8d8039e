"""A tool call's outcome as the model receives it: text, an error flag, and a cap on its size.

MCP results are lists of content blocks (text, images, audio, resource links, embedded
resources) and, from some servers, structured content. The model is given text: text blocks as
they are, structured content as JSON when there is no text, anything else described in one
line (an image is not pasted into the conversation as base64). The text is cut at the cap
(``GLASSBOX_TOOL_RESULT_MAX_CHARS``), and the cut is said in the text so that the model knows.
``full_text`` keeps what the server sent (up to :data:`MAX_KEPT_CHARS`), for the attempt's detail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types

from orchestrator.tools.sessions import redact

# What is kept of one result for the attempt's detail, whatever the model was given.
MAX_KEPT_CHARS = 1_000_000


@dataclass(frozen=True)
class ToolResult:
    """What one tool call returned. ``text`` goes to the model (capped); ``is_error`` says the
    call failed (the text then says why). ``duration_s``: the call's own time, from the moment its
    server was ready (None: the runner did not measure it); ``server_start_s``: how long the call
    waited for its server to start first (None: the server was running already)."""

    text: str
    is_error: bool = False
    truncated: bool = False
    full_text: str = ""  # up to MAX_KEPT_CHARS of the whole result
    full_chars: int = 0  # length of the whole result before any cut
    duration_s: float | None = None
    server_start_s: float | None = None

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(text=message, is_error=True, full_text=message, full_chars=len(message))


def cap(text: str, max_chars: int, *, is_error: bool = False) -> ToolResult:
    """``text`` as a result the model can take: cut at ``max_chars`` with a note saying so."""
    if len(text) <= max_chars:
        return ToolResult(text=text, is_error=is_error, full_text=text, full_chars=len(text))
    note = f"\n[… result cut: {len(text):,} characters, the first {max_chars:,} shown]"
    return ToolResult(
        text=text[: max(0, max_chars - len(note))] + note,
        is_error=is_error,
        truncated=True,
        full_text=text[:MAX_KEPT_CHARS],
        full_chars=len(text),
    )


def result_text(result: mcp_types.CallToolResult) -> str:
    """The result's content as text for the model."""
    parts = [_block_text(block) for block in result.content or []]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return text


def from_mcp(result: mcp_types.CallToolResult, max_chars: int, *, secrets: list[str] | None = None) -> ToolResult:
    """The result for the model: text, capped, with the server's own secret values masked."""
    text = redact(result_text(result), secrets or [])
    if result.is_error and not text:
        text = "the tool reported an error without a message"
    return cap(text, max_chars, is_error=bool(result.is_error))


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return f"[{kind} {getattr(block, 'mime_type', '')}, about {size:,} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}]\n{text}"
        return f"[resource {resource.uri}, binary, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"
