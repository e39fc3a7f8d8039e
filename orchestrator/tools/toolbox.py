"""One attempt's tools: the granted tools offered to the model, and their calls over MCP.

An attempt opens a :class:`Toolbox` for its agent's grants and closes it at its end::

    async with Toolbox(grants, cwd=run_directory(run_id)) as toolbox:
        outcome = await run_agent_loop(provider, request, toolbox, hooks)

Nothing is started on entry: a server's session opens at the first call to one of its tools
(so an attempt whose model calls no tool starts no process), and stays open for the attempt's
later calls. Each session lives in a task of its own (the SDK's transports must be entered and
left in one task), so calls may come from any task: several calls of one turn run concurrently,
and many attempts' toolboxes share one event loop.

Safety (DESIGN §10):

* **Timeouts.** A call that takes longer than ``call_timeout_s`` fails; the SDK sends the server
  a cancellation for it. The call's time counts from the moment its server is ready: a server's
  start-up is not the call's, it has its own limit (a server that does not finish its handshake
  within ``start_timeout_s`` fails the call that started it) and is reported apart
  (``ToolResult.server_start_s``, beside the call's own ``duration_s``). The caller's
  ``timeout_s`` (what is left of the task's time) is a limit on both together: what the start-up
  took of it is not given to the call again.
* **Failures stay calls.** Whatever goes wrong (the command is missing, the server crashes
  mid-call, it answers nonsense, it hangs) the call returns an error :class:`ToolResult` that
  the model can read; :meth:`Toolbox.call` raises nothing but cancellation. A server that died
  is started again at the next call to it, at most :data:`MAX_STARTS` times per attempt.
* **Result cap.** The model receives at most ``result_max_chars`` characters of a result.
* **Secrets.** The server's declared secret values (its environment, its headers) are masked in
  every result and error, should the server repeat them: they reach neither the model nor the
  audit log.
* **Reaping.** Closing the toolbox (also when the attempt is cancelled) lets every session end
  normally, in its own task, shielded from the cancellation: the SDK closes the server's stdin,
  then terminates and kills its process group if it does not exit. No zombie, no orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import mcp_types
from django.conf import settings
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from orchestrator import wording
from orchestrator.providers.base import ToolSpec
from orchestrator.tools import results, sessions
from orchestrator.tools.results import ToolResult
from orchestrator.tools.servers import GrantedTool, ServerGrant, ServerSpec

log = logging.getLogger(__name__)

# Starts of one server per attempt: the first, and restarts after it died.
MAX_STARTS = 3
# How long closing waits for a session to end by itself before cancelling it.
CLOSE_GRACE_S = 10.0


class _Connection:
    """One server's session, opened on first use in a task of its own, reopened after it died."""

    def __init__(self, spec: ServerSpec, *, cwd: Path | None, start_timeout_s: float) -> None:
        self.spec = spec
        self.cwd = cwd
        self.start_timeout_s = start_timeout_s
        self.starts = 0
        self._lock = asyncio.Lock()
        self._session: ClientSession | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._errlog: IO[str] | None = None
        self._errlogs: list[IO[str]] = []
        self.retired: list[asyncio.Task[None]] = []

    def is_open(self) -> bool:
        """A session is up and running: a call need not wait for its server to start."""
        return self._session is not None and self._keeper is not None and not self._keeper.done()

    async def session(self) -> ClientSession:
        """The open session, started now if it is not (raises ToolServerError)."""
        async with self._lock:
            if self._session is not None and self.is_open():
                return self._session
            self._retire()
            if self.starts >= MAX_STARTS:
                raise sessions.ToolServerError(
                    f"tool server {self.spec.name} stopped working {self.starts} times in this attempt; "
                    "its tools are unavailable until the next attempt"
                )
            self.starts += 1
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            self._errlogs.append(self._errlog)
            self._keeper = asyncio.create_task(
                self._keep(ready, self._closing, self._errlog), name=f"mcp-session-{self.spec.name}"
            )
            try:
                async with asyncio.timeout(self.start_timeout_s):
                    self._session = await asyncio.shield(ready)
            except TimeoutError:
                self._retire(cancel=True)
                raise sessions.ToolServerError(
                    sessions.describe_failure(self.spec, sessions.no_handshake_within(self.start_timeout_s))
                ) from None
            except sessions.ToolServerError:
                self._retire()
                raise
            return self._session

    async def _keep(self, ready: asyncio.Future[ClientSession], closing: asyncio.Event, errlog: IO[str]) -> None:
        try:
            async with sessions.connect(self.spec, cwd=self.cwd, errlog=errlog) as session:
                if ready.done():  # the caller gave up waiting
                    return
                ready.set_result(session)
                await closing.wait()
        except Exception as exc:  # a failed session fails calls, never the caller
            if not ready.done():
                ready.set_exception(
                    sessions.ToolServerError(sessions.describe_failure(self.spec, sessions.explain(exc), errlog))
                )
            else:
                log.info("tool server %s: session ended: %s", self.spec.name, sessions.explain(exc))
        finally:
            if not ready.done():
                ready.cancel()

    def mark_dead(self) -> None:
        """The session stopped answering (the server exited): the next call starts it again."""
        self._session = None

    def failure(self, what: str) -> str:
        return sessions.describe_failure(self.spec, what, self._errlog)

    def _retire(self, *, cancel: bool = False) -> None:
        """Let the current session (if any) end; it is awaited when the toolbox closes."""
        if self._closing is not None:
            self._closing.set()
        if self._keeper is not None:
            if cancel:
                self._keeper.cancel()
            self.retired.append(self._keeper)
        self._keeper, self._session, self._closing = None, None, None

    async def close(self) -> None:
        self._retire()
        tasks, self.retired = self.retired, []
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_GRACE_S)
            for task in pending:  # a session that does not end by itself
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=CLOSE_GRACE_S)
        for errlog in self._errlogs:
            errlog.close()
        self._errlogs = []


class Toolbox:
    """The tools one attempt may call, and their sessions. See the module docstring."""

    def __init__(
        self,
        grants: Iterable[ServerGrant],
        *,
        cwd: Path | None = None,
        call_timeout_s: float | None = None,
        start_timeout_s: float | None = None,
        result_max_chars: int | None = None,
    ) -> None:
        grants = list(grants)
        self.call_timeout_s = call_timeout_s or settings.GLASSBOX_TOOL_CALL_TIMEOUT_S
        self.result_max_chars = result_max_chars or settings.GLASSBOX_TOOL_RESULT_MAX_CHARS
        start_timeout_s = start_timeout_s or settings.GLASSBOX_TOOL_START_TIMEOUT_S
        self._tools: dict[str, GrantedTool] = {}
        self._connections: dict[str, _Connection] = {}
        for grant in grants:
            self._connections[grant.server.name] = _Connection(grant.server, cwd=cwd, start_timeout_s=start_timeout_s)
            for tool in grant.tools:
                self._tools[tool.name] = tool
        self._closed = False

    async def __aenter__(self) -> Toolbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End every session and reap every server, even when the caller is being cancelled."""
        if self._closed:
            return
        self._closed = True
        closing = asyncio.ensure_future(asyncio.gather(*(c.close() for c in self._connections.values())))
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            # Cancelled again while closing: the sessions still end in their own tasks; wait for
            # them (bounded) so that no server outlives its attempt, then let the cancellation on.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(closing), timeout=2 * CLOSE_GRACE_S + 5)
            raise

    # What the agent loop asks

    def specs(self) -> list[ToolSpec]:
        """The tools to offer the model: the granted ones only."""
        return [tool.spec for tool in self._tools.values()]

    def lookup(self, name: str) -> GrantedTool | None:
        """The granted tool the model calls ``name``, or None: not granted, refuse it."""
        return self._tools.get(name)

    @property
    def tools(self) -> Mapping[str, GrantedTool]:
        return dict(self._tools)

    async def call(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> ToolResult:
        """Call a granted tool. Never raises (but cancellation): a failure is an error result."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.error(f"tool {name!r} is not granted to this agent")
        if self._closed:
            return ToolResult.error(f"tool {name!r} cannot be called: the attempt's tools are closed")
        connection = self._connections[tool.server]
        began = time.monotonic()
        was_open = connection.is_open()
        try:
            session = await connection.session()
        except sessions.ToolServerError as error:
            return ToolResult.error(str(error))
        ready = time.monotonic()
        server_start_s = None if was_open else ready - began
        timeout = self.call_timeout_s
        if timeout_s is not None:  # what is left of the task's time, start-up taken from it
            left = timeout_s - (ready - began)
            if left <= 0:
                failure = ToolResult.error(
                    f"{tool.tool} was not run: the task's time ran out while its server {connection.spec.name} started"
                )
                return replace(failure, duration_s=0.0, server_start_s=server_start_s)
            timeout = min(left, timeout)
        result = await self._call(connection, session, tool, arguments, timeout)
        return replace(result, duration_s=time.monotonic() - ready, server_start_s=server_start_s)

    async def _call(
        self,
        connection: _Connection,
        session: ClientSession,
        tool: GrantedTool,
        arguments: dict[str, Any],
        timeout: float,
    ) -> ToolResult:
        """One call on an open session, under its timeout; a failure as an error result."""
        too_late = f"did not answer {tool.tool} within {wording.time_limit(timeout)}"
        try:
            async with asyncio.timeout(timeout + 5.0):  # the SDK's own timeout should come first
                answer = await session.call_tool(tool.tool, arguments, read_timeout_seconds=timeout)
        except TimeoutError:
            return ToolResult.error(connection.failure(too_late))
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return ToolResult.error(connection.failure(too_late))
            if exc.code == mcp_types.CONNECTION_CLOSED:
                connection.mark_dead()
            return ToolResult.error(connection.failure(f"{sessions.explain(exc)} during {tool.tool}"))
        except Exception as exc:  # the server's failure is this call's, not the caller's
            connection.mark_dead()
            return ToolResult.error(connection.failure(f"{sessions.explain(exc)} during {tool.tool}"))
        return results.from_mcp(answer, self.result_max_chars, secrets=connection.spec.secrets)

    def starts(self, server: str) -> int:
        """How many times ``server`` was started in this attempt (tests, diagnostics)."""
        return self._connections[server].starts
