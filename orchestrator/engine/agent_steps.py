"""What the agent loop (engine/agent_loop.py) reports to its caller, as plain values.

A :class:`Step` is one thing the agent did (a text, a tool call with its arguments, an approval, a
result with its duration and error, a refusal, a model call, a stop, a rate wait): the glass box
shows it live and the runtime keeps it as an audit event (``Step.event_type``, ``Step.payload()``:
arguments and results capped, the whole result in ``Step.result_full`` for the attempt's detail;
``Step.sentence()`` its message, ``Step.headline()`` what the DAG node says). A :class:`ToolCall`
is what the approval hook is asked about and a :class:`Decision` its answer;
:class:`ModelCallUsage` is one model call's usage as the usage hook gets it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator import wording
from orchestrator.providers.base import Usage
from orchestrator.tools.servers import GrantedTool

# What a step's payload keeps of a text, a result and the arguments (JSON), in characters.
PREVIEW_CHARS = 2000
ARGUMENTS_CHARS = 4000

StepKind = Literal[
    "text", "tool_call", "approval", "tool_result", "tool_refused", "model_call", "stopped", "rate_wait", "rate_waited"
]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for, as the approval hook sees it."""

    step: int
    id: str
    name: str  # as the model asked for it
    arguments: Any
    tool: GrantedTool | None  # None: not granted


@dataclass(frozen=True)
class Decision:
    approved: bool
    comment: str = ""
    decided_by: str = ""


@dataclass(frozen=True)
class ModelCallUsage:
    """One model call's usage. ``complete`` is False when the call failed or was cut short: the
    usage is what the stream reported so far (the input tokens when the answer started), with the
    output tokens seen so far."""

    step: int
    usage: Usage
    complete: bool = True


@dataclass(frozen=True)
class Step:
    """One thing the agent did, for the glass box and the audit log. The runtime reports two of its
    own the same way (engine/tool_attempt.py): a model call held by the provider's budget or
    backoff (``rate_wait``, when the wait starts) and sent (``rate_waited``, with how long)."""

    kind: StepKind
    step: int  # the model call it belongs to, from 1
    text: str = ""  # the model's text; the reason of a refusal or of a stop
    call_id: str = ""
    tool: str = ""  # the name the model used
    server: str = ""
    server_tool: str = ""  # the server's own name of the tool
    arguments: Any = None
    approval_required: bool = False
    approved: bool | None = None
    comment: str = ""
    decided_by: str = ""
    result: str = ""  # what the model was given, previewed
    result_full: str = ""  # the whole result as the server sent it (up to the client's cap): not in payload()
    result_chars: int = 0
    truncated: bool = False
    is_error: bool = False
    duration_s: float | None = None  # a tool call's own time: its server's start-up is server_start_s
    server_start_s: float | None = None  # how long a tool call waited for its server to start
    stop_reason: str = ""
    usage: Usage | None = None
    wait: str = ""  # what held a model call back: the code of its wait (engine/waits.py)

    @property
    def event_type(self) -> str:
        """The audit event type this step becomes: ``agent.text``, ``tool.call``, ``tool.result`` …"""
        return EVENT_TYPES[self.kind]

    def headline(self) -> str:
        """What the agent is doing, in a few words, for the DAG node ("step 3 · calling lookup")."""
        doing = {
            "text": "writing",
            "tool_call": f"waiting for approval of {self.tool}" if self.approval_required else f"calling {self.tool}",
            "approval": f"{'approved' if self.approved else 'rejected'}: {self.tool}",
            "tool_result": f"{self.tool} {'failed' if self.is_error else 'answered'}",
            "tool_refused": f"refused {self.tool} (not granted)",
            "model_call": "thinking",
            "stopped": f"stopped ({self.stop_reason})",
            "rate_wait": f"waiting for {wording.rate_wait(self.wait)}",
            "rate_waited": "thinking",
        }[self.kind]
        return f"step {self.step} · {doing}"

    def sentence(self) -> str:
        """The step in words, for the audit event's message (at most 500 characters)."""
        if self.kind == "text":
            said = f"said: {_one_line(self.text)}"
        elif self.kind == "tool_call":
            wait = " (waiting for approval)" if self.approval_required else ""
            said = (
                f"called {self.tool}{wait} with {_one_line(json.dumps(capped_arguments(self.arguments), default=str))}"
            )
        elif self.kind == "approval":
            by = f" by {self.decided_by}" if self.decided_by else ""
            comment = f": {self.comment}" if self.comment else ""
            said = f"{'approved' if self.approved else 'rejected'}{by}: {self.tool}{comment}"
        elif self.kind == "tool_result":
            outcome = wording.tool_call_outcome(self.is_error, self.duration_s, self.server_start_s)
            said = f"{self.tool} {outcome}: {_one_line(self.result)}"
        elif self.kind == "tool_refused":
            said = f"refused {self.tool}: not granted"
        elif self.kind == "model_call":
            tokens = f", {self.usage.input_tokens} in / {self.usage.output_tokens} out" if self.usage else ""
            said = f"model call ended: {self.stop_reason}{tokens}"
        elif self.kind == "rate_wait":
            said = f"model call held: waiting for {wording.rate_wait(self.wait)}"
        elif self.kind == "rate_waited":
            took = f" {self.duration_s:.1f} s" if self.duration_s is not None else ""
            said = f"waited{took} for {wording.rate_wait(self.wait)}"
        else:
            said = f"stopped: {self.text}"
        return f"step {self.step} · {said}"[:500]

    def payload(self) -> dict[str, Any]:
        """The step as the audit event's JSON payload: sizes capped, nothing empty, no whole result."""
        data: dict[str, Any] = {"step": self.step}
        if self.text:
            data["text"], data["text_chars"] = _preview(self.text), len(self.text)
        for name in ("call_id", "tool", "server", "server_tool", "comment", "decided_by", "stop_reason", "wait"):
            if getattr(self, name):
                data[name] = getattr(self, name)
        if self.kind in ("tool_call", "tool_refused"):
            data["arguments"] = capped_arguments(self.arguments)
            data["approval_required"] = self.approval_required
        if self.approved is not None:
            data["approved"] = self.approved
        if self.kind == "tool_result":
            data.update(
                result=_preview(self.result),
                result_chars=self.result_chars,
                truncated=self.truncated,
                error=self.is_error,
            )
        if self.duration_s is not None:
            data["duration_s"] = round(self.duration_s, 3)
        if self.server_start_s is not None:
            data["server_start_s"] = round(self.server_start_s, 3)
        if self.usage is not None:
            data["input_tokens"], data["output_tokens"] = self.usage.input_tokens, self.usage.output_tokens
        return data


EVENT_TYPES: dict[str, str] = {
    "text": "agent.text",
    "tool_call": "tool.call",
    "approval": "tool.approval",
    "tool_result": "tool.result",
    "tool_refused": "tool.refused",
    "model_call": "agent.model_call",
    "stopped": "agent.stopped",
    "rate_wait": "agent.rate_wait",
    "rate_waited": "agent.rate_waited",
}


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def capped_arguments(arguments: Any) -> Any:
    """Arguments as stored in an event: as given when their JSON is small, else the JSON's start."""
    try:
        text = json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(arguments)
    if len(text) <= ARGUMENTS_CHARS:
        return arguments
    return {"_cut": True, "_chars": len(text), "json": text[:ARGUMENTS_CHARS] + "…"}
