"""`python manage.py agent NAME [settings]`: show, create or change an agent of the registry.

Without settings it prints the agent. With settings it creates the agent (when NAME is new) or
changes the given fields, through the registry (`governance.registry.save_agent`): the model's
validators and the provider's option schema are checked first, every problem is listed, and
nothing is saved when one is found (exit 1). Each change is an audit event, as in the admin.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from orchestrator.governance import registry
from orchestrator.management import console
from orchestrator.models import Agent

# Option name → model field, for the settings a person may give.
FIELDS = {
    "role": "role",
    "provider": "provider",
    "model": "model",
    "system_prompt": "system_prompt",
    "max_concurrency": "max_concurrency",
    "timeout": "timeout_s",
    "max_retries": "max_retries",
    "max_output_tokens": "max_output_tokens",
    "status": "status",
}


def json_object(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise CommandError(
            f"--options is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None


class Command(BaseCommand):
    help = "Show an agent, or create or change it (every setting checked first; nothing saved on a problem)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="The agent's name (a slug), e.g. researcher")
        parser.add_argument("--role", help="What the agent does, in a few words")
        parser.add_argument("--provider", choices=Agent.Provider.values)
        parser.add_argument("--model", help="The provider's model, e.g. sim-1 or claude-sonnet-4-6")
        parser.add_argument("--system-prompt", dest="system_prompt")
        parser.add_argument("--max-concurrency", dest="max_concurrency", type=int)
        parser.add_argument("--timeout", type=int, help="Seconds an attempt may take")
        parser.add_argument("--max-retries", dest="max_retries", type=int)
        parser.add_argument("--max-output-tokens", dest="max_output_tokens", type=int)
        parser.add_argument("--status", choices=Agent.Status.values)
        parser.add_argument(
            "--options",
            help='Provider options as JSON, e.g. \'{"latency": {"dist": "fixed", "seconds": 1}, "failure_rate": 0.1}\'',
        )

    def handle(self, *args, name: str, **options):
        given = {field: options[option] for option, field in FIELDS.items() if options.get(option) is not None}
        if options.get("options") is not None:
            given["provider_options"] = json_object(options["options"])
        agent = Agent.objects.filter(name=name).first()
        if not given:
            if agent is None:
                raise CommandError(f"No agent named {name!r}: give settings (e.g. --provider simulated) to create it.")
            self.stdout.write(f"Agent {agent.name}")
            self.show(agent)
            return
        created = agent is None
        agent = agent or Agent(name=name)
        for field, value in given.items():
            setattr(agent, field, value)
        try:
            registry.save_agent(agent, actor=console.cli_actor())
        except registry.InvalidAgent as invalid:
            lines = [f"  {field}: {problem}" for field, problems in invalid.problems.items() for problem in problems]
            raise CommandError(
                f"Agent {name!r} not saved, {len(lines)} problem{'s' if len(lines) != 1 else ''}:\n" + "\n".join(lines)
            ) from None
        self.stdout.write(f"Agent {agent.name}: {'created' if created else 'saved'}")
        self.show(agent)

    def show(self, agent: Agent) -> None:
        for label, value in (
            ("status", agent.status),
            ("role", agent.role),
            ("provider", f"{agent.provider}:{agent.model}"),
            ("max concurrency", agent.max_concurrency),
            ("timeout", f"{agent.timeout_s} s"),
            ("max retries", agent.max_retries),
            ("max output tokens", agent.max_output_tokens),
            ("provider options", json.dumps(agent.provider_options, sort_keys=True)),
        ):
            self.stdout.write(f"  {label:18} {value}")
