"""`python manage.py tool_server add|list|refresh|remove`: MCP tool servers in the registry.

    tool_server add NAME --stdio "COMMAND ARGS…" [--env NAME=VALUE]…
    tool_server add NAME --url URL [--header NAME=ENVVAR]…
    tool_server list
    tool_server refresh NAME
    tool_server remove NAME

`add` starts (or reaches) the server and lists its tools over MCP before saving anything: a
command that does not exist or a process that does not speak MCP is a one-line error, exit 1.
Environment values are stored encrypted and shown as NAME=••••; a header's value is read from
the named environment variable whenever a worker connects, and never stored.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from orchestrator.governance import secrets, tool_registry
from orchestrator.governance.tool_registry import ToolRegistryError
from orchestrator.management import console
from orchestrator.models import ToolServer
from orchestrator.wording import counted


class Command(BaseCommand):
    help = "Register, list, refresh or remove MCP tool servers."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{add,list,refresh,remove}")
        add = actions.add_parser("add", help="Register a server once it has listed its tools over MCP")
        add.add_argument("name", help="The server's name in the registry (letters, digits, - and _)")
        transport = add.add_mutually_exclusive_group(required=True)
        transport.add_argument("--stdio", metavar='"COMMAND ARGS…"', help="Start the server as a child process")
        transport.add_argument("--url", help="Reach the server over streamable HTTP")
        add.add_argument(
            "--env", action="append", default=[], metavar="NAME=VALUE", help="Environment of a stdio server (repeat)"
        )
        add.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="NAME=ENVVAR",
            help="HTTP header whose value is read from the environment variable ENVVAR (repeat)",
        )
        actions.add_parser("list", help="Servers, their tools, and which agents hold them")
        refresh = actions.add_parser("refresh", help="List a server's tools again")
        refresh.add_argument("name")
        remove = actions.add_parser("remove", help="Remove a server and every grant of it")
        remove.add_argument("name")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except ToolRegistryError as error:
            raise CommandError(error.sentence) from None

    def _add(self, *, name, stdio, url, env, header, **_):
        command: list[str] = []
        if stdio is not None:
            try:
                command = tool_registry.split_command(stdio)
            except ToolRegistryError as error:
                raise CommandError(f"--stdio: {error}") from None
            if not command:
                raise CommandError("--stdio needs a command")
        server = tool_registry.add_server(
            name,
            command=command,
            env=tool_registry.parse_env(env),
            url=url or "",
            headers=tool_registry.parse_headers(header),
            actor=console.cli_actor(),
        )
        tools = list(server.tools.values_list("name", flat=True))
        self.stdout.write(
            f"Added tool server {server.name} ({server.get_transport_display()}: {server.endpoint})"
            + (f", environment {secrets.masked(server.env_names)}" if server.env_names else "")
            + f"; {counted(len(tools), 'tool')}: {', '.join(tools) or 'none'}."
        )

    def _list(self, **_):
        servers = list(ToolServer.objects.prefetch_related("tools"))
        if not servers:
            self.stdout.write('No tool servers. `python manage.py tool_server add NAME --stdio "COMMAND"` adds one.')
            return
        rows = [
            (
                s.name,
                s.get_transport_display(),
                s.status,
                console.shorten(s.endpoint, 60),
                secrets.masked(s.env_names) or ", ".join(f"{h}=${v}" for h, v in s.headers.items()) or "-",
            )
            for s in servers
        ]
        self.stdout.write(console.table(["SERVER", "TRANSPORT", "STATUS", "ENDPOINT", "ENV / HEADERS"], rows))
        for server in servers:
            self.stdout.write(f"\n{server.name}:" + (f" {server.status_message}" if server.status_message else ""))
            holders = tool_registry.holders(server)
            for tool in server.tools.all():
                held = ", ".join(
                    f"{agent}{' (approval)' if approval else ''}" for agent, approval in holders[tool.name]
                )
                self.stdout.write(
                    f"  {tool.name}: {console.shorten(tool.description, 70) or '-'}  [agents: {held or 'none'}]"
                )

    def _refresh(self, *, name, **_):
        server = self._server(name)
        refresh = tool_registry.refresh_server(server, actor=console.cli_actor())
        changes = [
            f"{label}: {', '.join(names)}"
            for label, names in (("added", refresh.added), ("removed", refresh.removed), ("changed", refresh.changed))
            if names
        ]
        self.stdout.write(
            f"Refreshed tool server {server.name}: {counted(len(refresh.tools), 'tool')}"
            + (f"; {'; '.join(changes)}." if changes else "; no change.")
        )

    def _remove(self, *, name, **_):
        server = self._server(name)
        tool_registry.remove_server(server, actor=console.cli_actor())
        self.stdout.write(f"Removed tool server {name} and its grants.")

    @staticmethod
    def _server(name: str) -> ToolServer:
        try:
            return ToolServer.objects.get(name=name)
        except ToolServer.DoesNotExist:
            raise CommandError(
                f"No tool server named {name!r}. `python manage.py tool_server list` shows them."
            ) from None
