"""A stdio MCP server of the tests' own: tools that behave well, hang, block, crash, leak or flood.

Run as ``python tests/orchestrator/tools/mcp_test_server.py``; it imports only the ``mcp`` SDK.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("glassbox-test-server")
_arrived: dict[str, int] = {}
_all_there: dict[str, asyncio.Event] = {}


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
async def rendezvous(key: str, count: int = 2) -> str:
    """Return only once `count` calls with this key are in flight at the same time (so only
    concurrent calls can finish); fail after 20 s."""
    _arrived[key] = _arrived.get(key, 0) + 1
    event = _all_there.setdefault(key, asyncio.Event())
    if _arrived[key] >= count:
        event.set()
    try:
        await asyncio.wait_for(event.wait(), timeout=20)
    except TimeoutError:
        raise ToolError(f"only {_arrived[key]} of {count} calls arrived") from None
    return f"met {key}"


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def block() -> str:
    """Write this server's pid to `blocking.pid` in its working directory, then sleep for an hour
    in the call itself: meanwhile the server reads nothing, not even the end of its stdin."""
    Path("blocking.pid").write_text(str(os.getpid()))
    time.sleep(3600)
    return "woke up"


@server.tool()
def crash() -> str:
    """Die at once, in the middle of the call."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def environment() -> dict[str, str]:
    """Every environment variable this server received."""
    return dict(os.environ)


@server.tool()
def env_digest(name: str) -> str:
    """The SHA-256 of an environment variable's value ("" when unset): proves what the server got
    without repeating it."""
    value = os.environ.get(name)
    return hashlib.sha256(value.encode()).hexdigest() if value is not None else ""


@server.tool()
def cwd() -> str:
    """This server's working directory."""
    return os.getcwd()


@server.tool()
def big(chars: int) -> str:
    """A result of `chars` characters."""
    return "x" * chars


@server.tool()
def fail(message: str) -> str:
    """Fail with this message (a tool error the model can read)."""
    raise ToolError(message)


@server.tool()
def leak_and_die() -> str:
    """Print the whole environment to stderr, then die: a careless server."""
    print(dict(os.environ), file=sys.stderr, flush=True)
    os._exit(4)


@server.tool()
def header_digest(name: str, ctx: Context) -> str:
    """The SHA-256 of an HTTP request header this call came with ("" when absent, or over stdio)."""
    value = {key.lower(): value for key, value in (ctx.headers or {}).items()}.get(name.lower())
    return hashlib.sha256(value.encode()).hexdigest() if value is not None else ""


def extra() -> str:
    """A tool offered only when the server is started with --extra."""
    return "extra"


if __name__ == "__main__":
    if "--leak-at-start" in sys.argv:
        print(dict(os.environ), file=sys.stderr, flush=True)
        sys.exit(5)
    if "--slow-start" in sys.argv:  # a server that takes its time to start (an npx download, an import)
        time.sleep(float(sys.argv[sys.argv.index("--slow-start") + 1]))
    if "--extra" in sys.argv:
        server.tool()(extra)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
