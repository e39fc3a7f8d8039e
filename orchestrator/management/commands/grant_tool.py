"""`python manage.py grant_tool AGENT SERVER[:TOOL] [--approval]`: let an agent use a server or one tool."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from orchestrator.governance import grant_wording
from orchestrator.governance.tool_registry import ToolRegistryError
from orchestrator.management import console


class Command(BaseCommand):
    help = "Grant an agent a whole tool server (SERVER) or one of its tools (SERVER:TOOL)."

    def add_arguments(self, parser):
        parser.add_argument("agent", help="The agent's name")
        parser.add_argument("target", metavar="SERVER[:TOOL]", help="A server, or one tool of it")
        parser.add_argument("--approval", action="store_true", help="Each call waits for a person's approval")

    def handle(self, *args, agent, target, approval, **options):
        try:
            said = grant_wording.grant_in_words(agent, target, requires_approval=approval, actor=console.cli_actor())
        except ToolRegistryError as error:
            raise CommandError(error.sentence) from None
        self.stdout.write(said)
