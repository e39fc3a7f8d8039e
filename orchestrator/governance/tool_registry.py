"""Tool servers and tool grants as governance data: every change is an Event naming who made it.

The commands (``tool_server``, ``grant_tool``, ``revoke_tool``) and the admin change tool servers
and grants only through these functions. A server is registered only once it has been started
(or reached) and has listed its tools over MCP: a command that does not exist, a process that
does not speak MCP, an unreachable URL is a one-line :class:`ToolRegistryError` and nothing is
saved. Refreshing lists the tools again and records what changed.

Grants: an agent holds a whole server (``SERVER``) or single tools (``SERVER:TOOL``), each with or
without approval per call. When both a server grant and a tool grant cover a tool, the tool
grant decides (so "the whole workspace, but write_file only with approval" can be said).

Secrets: a stdio server's declared environment is stored encrypted (governance/secrets.py) and
only its names are written anywhere (events, messages, the admin); an HTTP server's header
values are read from the worker's environment when connecting and never stored.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from orchestrator import db_threads, events
from orchestrator.governance import secrets
from orchestrator.models import Agent, Tool, ToolGrant, ToolServer
from orchestrator.tools import sessions
from orchestrator.tools.servers import GrantedTool, ServerGrant, ServerSpec, ToolInfo, offered_names
from orchestrator.wording import Refusal, counted

log = logging.getLogger(__name__)

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
MAX_TOOLS = 500


class ToolRegistryError(Refusal):
    """A change that cannot be made; the message is one line saying why (`sentence` on its own)."""


# --- Parsing what people type ------------------------------------------------------------------------


def parse_target(target: str) -> tuple[str, str]:
    """``SERVER`` or ``SERVER:TOOL`` → (server, tool or "")."""
    server, _, tool = target.strip().partition(":")
    if not server or (":" in target and not tool):
        raise ToolRegistryError(f"{target!r} is not SERVER or SERVER:TOOL")
    return server, tool


def parse_pairs(
    pairs: Iterable[str],
    *,
    what: str,
    name_pattern: re.Pattern[str],
    lines: bool = False,
    value_problem: Callable[[str, str], str] | None = None,
    form: str = "NAME=VALUE",
) -> dict[str, str]:
    """``NAME=VALUE`` strings → {NAME: VALUE}. Every malformed or repeated one (or one whose value
    `value_problem` refuses) is named in one error, not only the first. ``lines``: `pairs` are the
    lines of a text box, blank ones skipped and each problem given its line number. ``form``: how
    a pair is written, as the refusal says it (a header is HEADER=ENVVAR, not NAME=VALUE)."""
    parsed: dict[str, str] = {}
    problems: list[str] = []
    for number, pair in enumerate(pairs, 1):
        if lines:
            pair = pair.strip()
            if not pair:
                continue
        where = f"line {number}: " if lines else ""
        name, sep, value = pair.partition("=")
        if not sep or not name_pattern.match(name):
            problems.append(f"{where}{what} {name or pair!r} is not {form} with a valid name")
        elif name in parsed:
            problems.append(f"{where}{what} {name} is given twice")
        else:
            parsed[name] = value
            if value_problem is not None and (problem := value_problem(name, value)):
                problems.append(where + problem)
    if problems:
        raise ToolRegistryError("; ".join(problems))
    return parsed


# shlex's reasons, in words a person who typed the command line acts on.
_SPLIT_PROBLEMS = {
    "No closing quotation": "a quotation mark is not closed",
    "No escaped character": "it ends with a backslash that escapes nothing",
}


def split_command(command_line: str) -> list[str]:
    """A stdio server's command line as its words, split as a POSIX shell splits them."""
    try:
        return shlex.split(command_line)
    except ValueError as error:
        raise ToolRegistryError(_SPLIT_PROBLEMS.get(str(error), str(error))) from None


def parse_env(pairs: Iterable[str], *, lines: bool = False) -> dict[str, str]:
    return parse_pairs(pairs, what="environment variable", name_pattern=ENV_NAME, lines=lines)


def _header_variable_problem(header: str, variable: str) -> str:
    if ENV_NAME.match(variable):
        return ""
    return (
        f"header {header} must name the environment variable that holds its value (HEADER=ENVVAR), not the value itself"
    )


def parse_headers(pairs: Iterable[str], *, lines: bool = False) -> dict[str, str]:
    """``HEADER=ENVVAR`` → {HEADER: ENVVAR}: the header's value is read from that variable."""
    return parse_pairs(
        pairs,
        what="header",
        name_pattern=HEADER_NAME,
        lines=lines,
        value_problem=_header_variable_problem,
        form="HEADER=ENVVAR",
    )


# --- From rows to what the client needs ---------------------------------------------------------------


def server_spec(server: ToolServer, *, strict: bool = True) -> ServerSpec:
    """The client's view of a server: the declared environment decrypted, header values read from
    this process's environment. ``strict``: a header variable that is not set is an error (else it
    is left out and logged by name)."""
    if server.transport == ToolServer.Transport.HTTP:
        headers: dict[str, str] = {}
        for header, variable in (server.headers or {}).items():
            value = os.environ.get(variable)
            if value is None:
                problem = f"tool server {server.name}: header {header} needs the environment variable {variable}, which is not set"
                if strict:
                    raise ToolRegistryError(problem)
                log.warning("%s", problem)
                continue
            headers[header] = value
        return ServerSpec(name=server.name, transport="http", url=server.url, headers=headers)
    try:
        env = secrets.unseal(server.env_sealed)
    except secrets.SecretsUnreadable as error:
        raise ToolRegistryError(f"tool server {server.name}: {error}") from None
    return ServerSpec(
        name=server.name, transport="stdio", command=server.command, args=tuple(server.args or ()), env=env
    )


def covering_grant(grants: Iterable[ToolGrant], tool: str) -> ToolGrant | None:
    """Which of one agent's grants on one server decides about ``tool``: the tool's own grant,
    else the whole-server grant, else none (the tool is not granted)."""
    grants = list(grants)
    return next((g for g in grants if g.tool == tool), None) or next((g for g in grants if not g.tool), None)


def holders(server: ToolServer) -> dict[str, list[tuple[str, bool]]]:
    """For each of the server's tools, the agents that may call it and whether each call needs approval."""
    by_agent: dict[str, list[ToolGrant]] = {}
    for grant in server.grants.select_related("agent").order_by("agent__name"):
        by_agent.setdefault(grant.agent.name, []).append(grant)
    result: dict[str, list[tuple[str, bool]]] = {}
    for tool in server.tools.order_by("name"):
        result[tool.name] = [
            (agent, decided.requires_approval)
            for agent, grants in by_agent.items()
            if (decided := covering_grant(grants, tool.name)) is not None
        ]
    return result


def granted_servers(agent: Agent) -> list[ServerGrant]:
    """The servers ``agent`` may use and, for each, the tools it may call with their approval flag:
    what an attempt's Toolbox is opened with. A server whose environment cannot be read is left
    out (and logged): its tools are then not offered at all."""
    grants = list(ToolGrant.objects.filter(agent=agent).select_related("server").order_by("server__name", "tool"))
    by_server: dict[int, list[ToolGrant]] = {}
    servers: dict[int, ToolServer] = {}
    for grant in grants:
        by_server.setdefault(grant.server_id, []).append(grant)
        servers[grant.server_id] = grant.server
    tools_of = {server_id: list(Tool.objects.filter(server_id=server_id).order_by("name")) for server_id in servers}
    chosen: list[tuple[ToolServer, Tool, bool]] = []
    for server_id, server_grants in by_server.items():
        for tool in tools_of[server_id]:
            decided = covering_grant(server_grants, tool.name)
            if decided is not None:
                chosen.append((servers[server_id], tool, decided.requires_approval))
    names = offered_names([(server.name, tool.name) for server, tool, _ in chosen])
    result: list[ServerGrant] = []
    for server_id, server in servers.items():
        try:
            spec = server_spec(server, strict=False)
        except ToolRegistryError as error:
            log.error("%s; its tools are not offered to %s", error, agent.name)
            continue
        tools = tuple(
            GrantedTool(
                name=names[(server.name, tool.name)],
                server=server.name,
                tool=tool.name,
                description=tool.description,
                input_schema=tool.input_schema,
                requires_approval=approval,
            )
            for owner, tool, approval in chosen
            if owner.pk == server_id
        )
        if tools:
            result.append(ServerGrant(server=spec, tools=tools))
    return result


# --- Discovery ----------------------------------------------------------------------------------------


def discover(spec: ServerSpec) -> list[ToolInfo]:
    """The server's tools, listed over MCP in a scratch directory; ToolRegistryError when it fails."""
    with tempfile.TemporaryDirectory(prefix="glassbox-discover-") as scratch:
        try:
            tools = db_threads.run_coroutine(
                lambda: sessions.discover(spec, cwd=Path(scratch), timeout_s=settings.GLASSBOX_TOOL_START_TIMEOUT_S)
            )
        except sessions.ToolServerError as error:
            raise ToolRegistryError(str(error)) from None
    if len(tools) > MAX_TOOLS:
        raise ToolRegistryError(f"tool server {spec.name} offers {len(tools)} tools; at most {MAX_TOOLS} are kept")
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ToolRegistryError(f"tool server {spec.name} lists a tool name twice")
    return tools


# --- Changes ------------------------------------------------------------------------------------------


def _actor(user: Any, actor: str) -> dict[str, Any]:
    return {"user": user, "actor_name": actor}


def _describe(server: ToolServer) -> dict[str, Any]:
    """A server as the audit log shows it: no secret value, only names."""
    return {
        "server": server.name,
        "transport": server.transport,
        "endpoint": server.endpoint,
        "env": list(server.env_names or []),
        "headers": dict(server.headers or {}),
    }


@dataclass
class Candidate:
    """A server checked and ready to be saved: its row (unsaved changes), the environment to keep
    (None: unchanged) and the tools it listed."""

    server: ToolServer
    env: dict[str, str] | None
    tools: list[ToolInfo]


def candidate(
    name: str,
    *,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    url: str = "",
    headers: Mapping[str, str] | None = None,
    existing: ToolServer | None = None,
) -> Candidate:
    """Check a new server, or a change of ``existing`` (``env`` None keeps its environment), and
    list its tools over MCP. Nothing is saved; ToolRegistryError says what is wrong."""
    headers = dict(headers or {})
    if not SERVER_NAME.match(name or ""):
        raise ToolRegistryError(
            f"{name!r} is not a valid server name: letters, digits, '-' and '_', at most 64, starting with a letter or digit"
        )
    if bool(command) == bool(url):
        raise ToolRegistryError("give either a command (stdio) or a URL (streamable HTTP)")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolRegistryError(f"{url!r} is not an http:// or https:// URL")
        if env:
            raise ToolRegistryError("--env is for stdio servers; an HTTP server takes --header NAME=ENVVAR")
    elif headers:
        raise ToolRegistryError("--header is for HTTP servers; a stdio server takes --env NAME=VALUE")
    for variable in env or {}:
        if not ENV_NAME.match(variable):
            raise ToolRegistryError(f"environment variable {variable!r} is not a valid name")
    for header, variable in headers.items():
        if not HEADER_NAME.match(header) or not ENV_NAME.match(variable):
            raise ToolRegistryError(f"header {header!r} must be NAME=ENVVAR: a header name and an environment variable")
    taken = ToolServer.objects.filter(name=name)
    if existing is not None:
        taken = taken.exclude(pk=existing.pk)
    if taken.exists():
        raise ToolRegistryError(f"a tool server named {name} exists already (`tool_server refresh {name}` updates it)")
    server = existing or ToolServer()
    server.name = name
    server.transport = ToolServer.Transport.HTTP if url else ToolServer.Transport.STDIO
    server.command, server.args = (command[0], list(command[1:])) if command else ("", [])
    server.url, server.headers = url, headers
    if url:
        env = {}
    if env is not None:
        server.env_names, server.env_sealed = sorted(env), secrets.seal(env)
    return Candidate(server=server, env=None if env is None else dict(env), tools=discover(server_spec(server)))


def add_server(
    name: str,
    *,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    url: str = "",
    headers: Mapping[str, str] | None = None,
    user: Any = None,
    actor: str = "",
) -> ToolServer:
    """Register a server after listing its tools over MCP: all or nothing."""
    checked = candidate(name, command=command, env=dict(env or {}), url=url, headers=headers)
    return save(checked, user=user, actor=actor)


def save(checked: Candidate, *, user: Any = None, actor: str = "") -> ToolServer:
    """Save a checked server (new or changed) with its tools; record ``tool_server.added`` or
    ``tool_server.changed`` (what changed, by name: never a secret value)."""
    server, tools = checked.server, checked.tools
    try:
        with transaction.atomic():
            previous = ToolServer.objects.select_for_update().filter(pk=server.pk).first() if server.pk else None
            server.status, server.status_message, server.refreshed_at = ToolServer.Status.READY, "", timezone.now()
            if previous is None:
                if getattr(user, "is_authenticated", False):
                    server.created_by = user
                server.save()
                _replace_tools(server, tools)
                events.record(
                    "tool_server.added",
                    message=f"tool server {server.name} added with {counted(len(tools), 'tool')}",
                    payload={**_describe(server), "tools": [t.name for t in tools]},
                    **_actor(user, actor),
                )
                return server
            before, after = _describe(previous), _describe(server)
            changes = {key: [before[key], after[key]] for key in after if before[key] != after[key]}
            if checked.env is not None and secrets.unseal(previous.env_sealed) != checked.env:
                changes.setdefault("env", [before["env"], after["env"]])  # values changed: names only
            server.save()
            added, removed, changed = _replace_tools(server, tools)
            if changes or added or removed or changed:
                events.record(
                    "tool_server.changed",
                    message=f"tool server {server.name} changed: {', '.join([*changes, *(['tools'] if added or removed or changed else [])])}",
                    payload={
                        "server": server.name,
                        "changes": changes,
                        "added": added,
                        "removed": removed,
                        "changed": changed,
                    },
                    **_actor(user, actor),
                )
    except IntegrityError:
        raise ToolRegistryError(f"a tool server named {server.name} exists already") from None
    return server


def _replace_tools(server: ToolServer, tools: list[ToolInfo]) -> tuple[list[str], list[str], list[str]]:
    """Make the server's Tool rows what it listed; (added, removed, changed) names."""
    found = {t.name: t for t in tools}
    known = {t.name: t for t in Tool.objects.select_for_update().filter(server=server)}
    added = sorted(set(found) - set(known))
    removed = sorted(set(known) - set(found))
    changed = sorted(
        name
        for name in set(found) & set(known)
        if (found[name].description, found[name].input_schema) != (known[name].description, known[name].input_schema)
    )
    Tool.objects.filter(server=server, name__in=removed).delete()
    for name in changed:
        Tool.objects.filter(pk=known[name].pk).update(
            description=found[name].description, input_schema=found[name].input_schema
        )
    Tool.objects.bulk_create(
        Tool(server=server, name=n, description=found[n].description, input_schema=found[n].input_schema) for n in added
    )
    return added, removed, changed


@dataclass(frozen=True)
class Refresh:
    added: list[str]
    removed: list[str]
    changed: list[str]
    tools: list[str]


def refresh_server(server: ToolServer, *, user: Any = None, actor: str = "") -> Refresh:
    """List the server's tools again and record what changed. When the server cannot be reached,
    its status says so (an event too) and ToolRegistryError is raised; its tools stay as they were."""
    try:
        tools = discover(server_spec(server))
    except ToolRegistryError as error:
        with transaction.atomic():
            ToolServer.objects.filter(pk=server.pk).update(
                status=ToolServer.Status.UNREACHABLE, status_message=str(error)[:500], updated_at=timezone.now()
            )
            events.record(
                "tool_server.refresh_failed",
                message=f"tool server {server.name} could not be refreshed",
                payload={"server": server.name, "error": str(error)[:2000]},
                **_actor(user, actor),
            )
        server.refresh_from_db()
        raise
    with transaction.atomic():
        added, removed, changed = _replace_tools(server, tools)
        ToolServer.objects.filter(pk=server.pk).update(
            status=ToolServer.Status.READY, status_message="", refreshed_at=timezone.now(), updated_at=timezone.now()
        )
        events.record(
            "tool_server.refreshed",
            message=f"tool server {server.name} refreshed: {len(added)} added, {len(removed)} removed, {len(changed)} changed",
            payload={"server": server.name, "added": added, "removed": removed, "changed": changed},
            **_actor(user, actor),
        )
    server.refresh_from_db()
    return Refresh(added=added, removed=removed, changed=changed, tools=sorted(t.name for t in tools))


def remove_server(server: ToolServer, *, user: Any = None, actor: str = "") -> None:
    """Remove a server, its tools and every grant of it (each grant named in the event)."""
    with transaction.atomic():
        grants = [f"{g.agent.name} → {g.target}" for g in server.grants.select_related("agent", "server")]
        description = _describe(server)
        server.delete()
        events.record(
            "tool_server.removed",
            message=f"tool server {description['server']} removed"
            + (f" with {len(grants)} grant(s)" if grants else ""),
            payload={**description, "grants": grants},
            **_actor(user, actor),
        )


def agent_named(agent: Agent | str) -> Agent:
    """``agent`` itself, or the agent of that name; ToolRegistryError when there is none."""
    if isinstance(agent, Agent):
        return agent
    try:
        return Agent.objects.get(name=agent)
    except Agent.DoesNotExist:
        raise ToolRegistryError(f"no agent named {agent!r}") from None


def _server(name: str) -> ToolServer:
    try:
        return ToolServer.objects.get(name=name)
    except ToolServer.DoesNotExist:
        raise ToolRegistryError(f"no tool server named {name!r} (`tool_server list` shows them)") from None


def grant(
    agent: Agent | str, target: str, *, requires_approval: bool = False, user: Any = None, actor: str = ""
) -> ToolGrant:
    """Let ``agent`` use ``SERVER`` or ``SERVER:TOOL``; granting again changes only the approval flag."""
    agent = agent_named(agent)
    if agent.status == Agent.Status.RETIRED:
        raise ToolRegistryError(f"agent {agent.name} is retired")
    server_name, tool = parse_target(target)
    server = _server(server_name)
    if tool and not server.tools.filter(name=tool).exists():
        offered = ", ".join(server.tools.values_list("name", flat=True)) or "none"
        raise ToolRegistryError(f"tool server {server.name} has no tool {tool!r} (it offers: {offered})")
    with transaction.atomic():
        existing = ToolGrant.objects.select_for_update().filter(agent=agent, server=server, tool=tool).first()
        if existing is not None:
            if existing.requires_approval == requires_approval:
                return existing
            old = existing.requires_approval
            existing.requires_approval = requires_approval
            existing.save(update_fields=["requires_approval"])
            events.record(
                "tool.grant_changed",
                agent=agent,
                message=f"{agent.name} → {existing.target}: approval {'required' if requires_approval else 'no longer required'}",
                payload={"agent": agent.name, "target": existing.target, "requires_approval": [old, requires_approval]},
                **_actor(user, actor),
            )
            return existing
        created = ToolGrant.objects.create(
            agent=agent,
            server=server,
            tool=tool,
            requires_approval=requires_approval,
            granted_by=user if getattr(user, "is_authenticated", False) else None,
        )
        events.record(
            "tool.granted",
            agent=agent,
            message=f"{agent.name} may use {created.target}" + (" (each call approved)" if requires_approval else ""),
            payload={"agent": agent.name, "target": created.target, "requires_approval": requires_approval},
            **_actor(user, actor),
        )
    return created


def revoke(agent: Agent | str, target: str, *, user: Any = None, actor: str = "") -> list[ToolGrant]:
    """Remove the grant named exactly ``SERVER`` or ``SERVER:TOOL``; the agent's grants on that
    server that still let it use what was revoked (`grant_wording.still_granted` says them)."""
    agent = agent_named(agent)
    server_name, tool = parse_target(target)
    server = _server(server_name)
    with transaction.atomic():
        existing = ToolGrant.objects.select_for_update().filter(agent=agent, server=server, tool=tool).first()
        if existing is None:
            held = [g.target for g in ToolGrant.objects.filter(agent=agent, server=server).select_related("server")]
            hint = f" (it holds: {', '.join(held)})" if held else ""
            raise ToolRegistryError(f"agent {agent.name} holds no grant {target}{hint}")
        approval = existing.requires_approval
        existing.delete()
        events.record(
            "tool.revoked",
            agent=agent,
            message=f"{agent.name} may no longer use {target}",
            payload={"agent": agent.name, "target": target, "requires_approval": approval},
            **_actor(user, actor),
        )
    left = ToolGrant.objects.filter(agent=agent, server=server).select_related("agent", "server")
    return [g for g in left if not g.tool] if tool else list(left)
