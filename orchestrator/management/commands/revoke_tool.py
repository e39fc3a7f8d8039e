"""`python manage.py revoke_tool AGENT SERVER[:TOOL]`: remove exactly that grant."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from orchestrator.governance import grant_wording, tool_registry
from orchestrator.governance.tool_registry import ToolRegistryError
from orchestrator.management import console


class Command(BaseCommand):
    help = "Revoke an agent's grant of a tool server (SERVER) or of one tool (SERVER:TOOL)."

    def add_arguments(self, parser):
        parser.add_argument("agent", help="The agent's name")
        parser.add_argument("target", metavar="SERVER[:TOOL]", help="The grant, as it was given")

    def handle(self, *args, agent, target, **options):
        try:
            left = tool_registry.revoke(agent, target, actor=console.cli_actor())
        except ToolRegistryError as error:
            raise CommandError(error.sentence) from None
        self.stdout.write(
            " ".join(filter(None, [f"Revoked {target} from {agent}.", grant_wording.still_granted(left)]))
        )
