"""MCP client sessions with the official ``mcp`` SDK: stdio children and streamable HTTP.

:func:`connect` opens one initialized ``ClientSession`` over ``stdio_client`` or
``streamable_http_client`` (SDK 2.x). A stdio server is started by the SDK as a child process in
its own process group, in the working directory given (the run's directory), with an
environment made of the declared variables only, plus the SDK's fixed set of harmless ones
(``PATH``, ``USER``, ``LOGNAME``, ``SHELL``, ``TERM``) and ``HOME`` pointed at the working
directory, so that a server does not find the worker's own dot-files either. Nothing else of
the worker's environment (its API keys, ``DATABASE_URL`` …) reaches it. The SDK reaps the
process when the session closes, also when the caller is cancelled: it closes the server's
stdin, waits two seconds, then terminates and kills its process group. A worker killed outright
reaps nothing: the server is started through orchestrator/tools/stdio_launcher.py, so that the
kernel kills it when the worker dies, and what it started goes with it (also when it exits by
itself, which the SDK takes as the end).

The server's stderr goes to a temporary file, not to the worker's log (a server may print its
own environment); when it fails to start, the end of it is quoted in the error with every secret
value masked.

:func:`discover` lists a server's tools once (registration and refresh); the toolbox keeps
sessions open for an attempt.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import IO, Any, TextIO, cast

import anyio
import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from orchestrator import wording
from orchestrator.tools import stdio_launcher
from orchestrator.tools.servers import ServerSpec, ToolInfo

CLIENT_INFO = mcp_types.Implementation(name="glassbox", version="1")
STDERR_TAIL_CHARS = 600
MASK = "••••"
# A server that lists tools page after page forever cannot hold registration up.
MAX_TOOL_PAGES = 50
HTTP_TIMEOUT_S = 30.0
HTTP_STREAM_READ_TIMEOUT_S = 300.0


class ToolServerError(Exception):
    """A tool server could not be used; the message is one line, for people and for the model,
    and never contains a secret value."""


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value (three characters or more) masked, longest first."""
    for value in sorted({s for s in secrets if len(s) >= 3}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def child_environment(spec: ServerSpec, cwd: Path | None) -> dict[str, str]:
    """What a stdio server receives on top of the SDK's fixed harmless set: its declared
    variables, and HOME set to its working directory (unless it declares HOME itself)."""
    env = {"HOME": str(cwd)} if cwd is not None else {}
    env.update(spec.env)
    return env


@asynccontextmanager
async def connect(
    spec: ServerSpec, *, cwd: Path | None = None, errlog: IO[str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized session with ``spec``'s server, closed (and its process reaped) on exit.

    Enter and exit it in the same task (the SDK's transports hold anyio task groups).
    """
    async with AsyncExitStack() as stack:
        if spec.transport == "stdio":
            if errlog is None:
                errlog = stack.enter_context(_stderr_file())
            env = child_environment(spec, cwd)
            directory = str(cwd) if cwd is not None else None
            command, args = stdio_launcher.launch_command(
                spec.command, spec.args, cwd=directory, env=get_default_environment() | env
            )
            params = StdioServerParameters(command=command, args=args, env=env, cwd=directory)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=cast(TextIO, errlog)))
        else:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(spec.headers),
                    timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_STREAM_READ_TIMEOUT_S),
                )
            )
            read, write = await stack.enter_async_context(streamable_http_client(spec.url, http_client=http))
        session = await stack.enter_async_context(ClientSession(read, write, client_info=CLIENT_INFO))
        await session.initialize()
        yield session


async def list_tools(session: ClientSession) -> list[ToolInfo]:
    """Every tool the server offers, all pages."""
    tools: list[ToolInfo] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += [
            ToolInfo(name=tool.name, description=tool.description or "", input_schema=dict(tool.input_schema or {}))
            for tool in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def discover(spec: ServerSpec, *, cwd: Path | None = None, timeout_s: float = 20.0) -> list[ToolInfo]:
    """Start (or reach) the server, speak MCP with it, list its tools and close it again.

    Raises :class:`ToolServerError` with one line saying what went wrong: the command does not
    exist, the server exited or does not speak MCP, it did not answer in time, the URL cannot be
    reached.
    """
    with _stderr_file() as errlog:
        try:
            with anyio.fail_after(timeout_s):
                async with connect(spec, cwd=cwd, errlog=errlog) as session:
                    return await list_tools(session)
        except TimeoutError:
            raise ToolServerError(describe_failure(spec, no_handshake_within(timeout_s), errlog)) from None
        except Exception as exc:  # every failure becomes one line for people
            raise ToolServerError(describe_failure(spec, explain(exc), errlog)) from None


def explain(exc: BaseException) -> str:
    """Why a connection or call failed, in words (no traceback)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return explain(exc.exceptions[0])
    if isinstance(exc, FileNotFoundError):
        return f"could not start: command not found ({exc.filename or exc})"
    if isinstance(exc, PermissionError):
        return f"could not start: permission denied ({exc.filename or exc})"
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
        return f"could not start: {exc.strerror or exc}"
    if isinstance(exc, MCPError):
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return "closed the connection (the server exited, or does not speak MCP)"
        if exc.code == mcp_types.REQUEST_TIMEOUT:
            return "did not answer in time"
        return f"answered with an MCP error {exc.code}: {exc.message}"
    if isinstance(exc, httpx2.HTTPError):
        return f"could not be reached: {type(exc).__name__}: {exc}"
    return f"failed: {type(exc).__name__}: {exc}"


def no_handshake_within(timeout_s: float) -> str:
    """What a server that never finished starting did: "did not complete the MCP handshake within 20 s"."""
    return f"did not complete the MCP handshake within {wording.time_limit(timeout_s)}"


def describe_failure(spec: ServerSpec, what: str, errlog: IO[str] | None = None) -> str:
    """One line: the server, what went wrong and the end of its stderr, secrets masked."""
    line = f"tool server {spec.name} ({spec.endpoint}) {what}"
    tail = stderr_tail(errlog)
    if tail:
        line += f"; its error output ends: {tail}"
    return redact(" ".join(line.split()), spec.secrets)


def stderr_tail(errlog: IO[str] | None) -> str:
    if errlog is None:
        return ""
    try:
        errlog.flush()
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(lines[-4:])
    return tail[-STDERR_TAIL_CHARS:]


def _stderr_file() -> Any:
    return tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
