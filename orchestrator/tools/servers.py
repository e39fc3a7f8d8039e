"""What the MCP client needs to know about a tool server and its tools, as plain data.

The registry (orchestrator/governance/tool_registry.py) builds these from its rows, with the
declared environment decrypted and HTTP header values read from the worker's environment; the
client layer (``sessions``, ``toolbox``) knows nothing of the database. Secret values never
appear in a ``repr`` (they would end up in tracebacks and logs): only their names do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.providers.base import ToolSpec

# The names Claude accepts for a tool (the Messages API's `tools[].name`).
MODEL_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one tool server: a stdio command line, or a streamable HTTP URL."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # the declared environment only
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # values, read when connecting

    def __post_init__(self) -> None:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"tool server {self.name}: a stdio server needs a command")
        if self.transport == "http" and not self.url:
            raise ValueError(f"tool server {self.name}: a streamable HTTP server needs a URL")

    @property
    def secrets(self) -> list[str]:
        """Every value that must not be shown: the declared environment's and the headers'."""
        return [*self.env.values(), *self.headers.values()]

    @property
    def endpoint(self) -> str:
        if self.transport == "http":
            return self.url
        return " ".join([self.command, *self.args])


@dataclass(frozen=True)
class ToolInfo:
    """One tool as the server lists it (MCP ``tools/list``)."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class GrantedTool:
    """A tool an agent may call: where it lives, the name the model knows it by, whether each
    call needs a person's approval."""

    name: str  # offered to the model; the server's own name unless two granted servers share it
    server: str
    tool: str  # the server's name for it
    description: str
    input_schema: dict[str, Any]
    requires_approval: bool = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, input_schema=self.input_schema)

    @property
    def qualified(self) -> str:
        """SERVER:TOOL, as the registry and the audit log name it."""
        return f"{self.server}:{self.tool}"


@dataclass(frozen=True)
class ServerGrant:
    """A server an agent holds grants on, and the tools of it that it may call."""

    server: ServerSpec
    tools: tuple[GrantedTool, ...]


def model_tool_name(server: str, tool: str, *, qualify: bool) -> str:
    """The name a tool is offered under: its own when it is a valid Claude tool name and unique
    among the agent's tools, else ``server__tool`` with other characters replaced by ``_``."""
    name = f"{server}__{tool}" if qualify or not MODEL_TOOL_NAME.match(tool) else tool
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]


def offered_names(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Model-facing names for (server, tool) pairs: a tool name two servers share is qualified on
    both, so that the model can tell them apart."""
    counts: dict[str, int] = {}
    for _, tool in pairs:
        counts[tool] = counts.get(tool, 0) + 1
    return {(server, tool): model_tool_name(server, tool, qualify=counts[tool] > 1) for server, tool in pairs}
