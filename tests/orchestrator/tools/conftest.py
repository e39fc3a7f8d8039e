"""Fixtures of the tool tests: the tests' own stdio MCP server, and run directories in tmp_path."""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

import pytest

from orchestrator.tools import sessions
from orchestrator.tools.servers import GrantedTool, ServerGrant, ServerSpec, ToolInfo

TEST_SERVER = Path(__file__).with_name("mcp_test_server.py")
# The test server run by a shell script, as many servers are, with a helper of its own beside it
# (``sh -c WRAPPED_SERVER_SCRIPT``). In its working directory: the script's pid in script.pid (its
# session's id: the SDK starts it in a session of its own), the helper's in helper.pid.
WRAPPED_SERVER_SCRIPT = (
    "echo $$ > script.pid; sleep 600 & echo $! > helper.pid; "
    f"{shlex.quote(sys.executable)} {shlex.quote(str(TEST_SERVER))}"
)


def server_spec(name: str = "testsrv", **env: str) -> ServerSpec:
    return ServerSpec(name=name, transport="stdio", command=sys.executable, args=(str(TEST_SERVER),), env=env)


def grant_of(spec: ServerSpec, tools: list[ToolInfo], *, approval: frozenset[str] = frozenset()) -> ServerGrant:
    """Every tool of the server granted under its own name (those in `approval` need approval)."""
    return ServerGrant(
        server=spec,
        tools=tuple(
            GrantedTool(
                name=tool.name,
                server=spec.name,
                tool=tool.name,
                description=tool.description,
                input_schema=tool.input_schema,
                requires_approval=tool.name in approval,
            )
            for tool in tools
        ),
    )


def process_gone(pid: int) -> bool:
    """True when no process, not even a zombie waiting to be reaped, has this pid."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture(scope="session")
def test_tools() -> list[ToolInfo]:
    """The test server's tools, discovered once for the session."""
    return asyncio.run(sessions.discover(server_spec()))
