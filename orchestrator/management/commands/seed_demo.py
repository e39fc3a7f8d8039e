"""`python manage.py seed_demo`: the demo team, its provider limits, two logins, the demo tool server
and the example plans.

Safe to run again and again (`make run` does so on every start): agents and provider limits
are brought back to the demo values, the demo users are created only when absent (a changed
password is never reset), the demo tool server `workspace` is registered (or its command brought
up to date) and granted to the researcher and the writer, and an example plan is imported only
once. The logins: `demo`, a superuser, and `approver`, who holds the Approver role and can approve
the plans `demo` launches (separation of duties refuses a launcher's approval of their own plan).

Every change goes through the governance modules, so the audit log names who made it as
`cli:<os user>`, as for `manage.py agent`: each agent and provider limit created or changed, each
login created and role given, the tool server and its grants. What did not change records nothing.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from orchestrator import plans
from orchestrator.governance import accounts, registry, tool_registry
from orchestrator.management import console
from orchestrator.models import Agent, Plan, ProviderLimit, ToolGrant, ToolServer
from orchestrator.wording import counted

DEMO_USERNAME = "demo"
DEMO_PASSWORD_ENV = "GLASSBOX_DEMO_PASSWORD"
# A second person holding the Approver role: separation of duties keeps whoever launched a run
# from approving its plan, so a newcomer needs someone else to approve what `demo` launches.
APPROVER_USERNAME = "approver"
APPROVER_PASSWORD_ENV = "GLASSBOX_APPROVER_PASSWORD"
APPROVER_ROLE = "Approver"
EXAMPLES_DIR = Path(settings.BASE_DIR) / "examples"
EXAMPLE_PLANS = ("research_brief.yaml", "feature_pipeline.yaml", "exploration.yaml", "workspace_report.yaml")
# The demo MCP tool server (orchestrator/tools/demo_server.py), run by this Python, and who may use it.
DEMO_TOOL_SERVER = "workspace"
DEMO_TOOL_COMMAND = (sys.executable, "-m", "orchestrator.tools.demo_server")
DEMO_TOOL_GRANTS = ("researcher", "writer")
SIMULATED_MODEL = "sim-1"
DEMO_LATENCY = {"latency": {"dist": "lognormal", "median_s": 1.0, "sigma": 0.4}}


@dataclass(frozen=True)
class DemoAgent:
    name: str
    role: str
    capabilities: tuple[str, ...]
    max_concurrency: int
    system_prompt: str


DEMO_TEAM = (
    DemoAgent(
        "researcher",
        "Gathers facts and frames questions",
        ("research", "summarise sources", "compare options", "frame questions"),
        4,
        "You are a careful researcher. Answer the question you are given with facts you can "
        "support, say what is uncertain, and keep the summary short enough for the next step.",
    ),
    DemoAgent(
        "architect",
        "Designs systems and data models",
        ("system design", "data modelling", "trade-off analysis", "API design"),
        2,
        "You are a software architect. Produce designs that a developer can implement without "
        "guessing: name the components, the data, the interfaces and the trade-offs you chose.",
    ),
    DemoAgent(
        "coder",
        "Writes and changes code",
        ("python", "django", "sql", "refactoring", "profiling"),
        3,
        "You are a senior developer. Write small, readable, tested code that follows the "
        "design you are given, and note every place where you had to make a choice.",
    ),
    DemoAgent(
        "tester",
        "Writes tests and designs measurements",
        ("pytest", "test design", "load testing", "instrumentation"),
        3,
        "You are a test engineer. Turn requirements into checks that fail when the behaviour "
        "is wrong, and say how each measurement can be trusted.",
    ),
    DemoAgent(
        "reviewer",
        "Reviews work for correctness and security",
        ("code review", "security review", "consistency checks"),
        2,
        "You are a strict reviewer. Separate blocking issues from suggestions, point to the "
        "exact place, and propose a concrete fix for each issue.",
    ),
    DemoAgent(
        "writer",
        "Merges results into readable documents",
        ("synthesis", "technical writing", "decision briefs"),
        2,
        "You are a technical writer. Merge the inputs you are given into one clear document, "
        "keep every claim traceable to an input, and say where the inputs disagree.",
    ),
)

# Generous limits: the demo should show concurrency, not throttling. Prices match a
# mid-size Claude model so that the cost columns show realistic numbers.
SIMULATED_LIMIT = {
    "requests_per_minute": 600,
    "input_tokens_per_minute": 2_000_000,
    "output_tokens_per_minute": 400_000,
    "max_in_flight": 16,
    "input_price_per_mtok": Decimal("3.00"),
    "output_price_per_mtok": Decimal("15.00"),
}
ANTHROPIC_DEFAULT_LIMIT = {
    "requests_per_minute": 50,
    "input_tokens_per_minute": 30_000,
    "output_tokens_per_minute": 8_000,
    "max_in_flight": 4,
    "input_price_per_mtok": Decimal("3.00"),
    "output_price_per_mtok": Decimal("15.00"),
}
# Public list prices in USD per million tokens (input, output) of the current Claude models, by the
# model ids agents name (an alias and, where one exists, the dated id). Read on 2026-11-22 from
# public copies of Anthropic's pricing and models pages (docs.claude.com/en/docs/about-claude/pricing,
# .../models/overview) — "Claude API Cheatsheet 2026" (dev.to/hiyoyok, May 2026: Opus 4.8 $5/$25,
# Sonnet 4.6 $3/$15, Haiku 4.5 $1/$5), claudecodeguides.com (April 2026: Opus 4.7 $5/$25) and
# claudelab.net (July 2026: Sonnet 5 at the Sonnet list price, $2/$10 introductory) — and checked
# against the SDK's model list (anthropic 2.12, which marks claude-sonnet-4-5 deprecated). Prompt-cache
# reads cost 0.1x and 5-minute cache writes 1.25x the input price (ProviderLimit.cost). Seeded once
# by `seed_demo --provider anthropic`; prices edited in the admin are kept.
CLAUDE_LIST_PRICES = {
    "claude-opus-4-8": (Decimal("5.00"), Decimal("25.00")),
    "claude-opus-4-7": (Decimal("5.00"), Decimal("25.00")),
    "claude-sonnet-5": (Decimal("3.00"), Decimal("15.00")),
    "claude-sonnet-4-6": (Decimal("3.00"), Decimal("15.00")),
    "claude-haiku-4-5": (Decimal("1.00"), Decimal("5.00")),
    "claude-haiku-4-5-20251001": (Decimal("1.00"), Decimal("5.00")),
}
# Models other than the demo's get prices and an in-flight cap only: their per-minute limits are
# learned from the API's anthropic-ratelimit-*-limit headers (orchestrator/engine/feedback.py).
ANTHROPIC_PRICE_ONLY_LIMIT = {"max_in_flight": 4}


def list_prices(model: str) -> dict[str, Decimal]:
    """The ProviderLimit price fields of a current Claude model; {} for a model we have no price for."""
    if model not in CLAUDE_LIST_PRICES:
        return {}
    input_price, output_price = CLAUDE_LIST_PRICES[model]
    return {"input_price_per_mtok": input_price, "output_price_per_mtok": output_price}


def approver_role() -> Group:
    """The Approver group, with the permissions the roles migration gives it (restored if a
    database flush removed it: the migration's ROLES are the one definition)."""
    roles = importlib.import_module("orchestrator.migrations.0006_roles").ROLES
    group, _ = Group.objects.get_or_create(name=APPROVER_ROLE)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="orchestrator", codename__in=roles[APPROVER_ROLE])
    )
    return group


class Command(BaseCommand):
    help = "Create or refresh the demo agents, provider limits, demo login and example plans."

    def add_arguments(self, parser):
        parser.add_argument(
            "--provider",
            choices=[Agent.Provider.SIMULATED.value, Agent.Provider.ANTHROPIC.value],  # plain names in its error
            default=Agent.Provider.SIMULATED,
            help="Provider for the demo agents (default: simulated, no API key needed).",
        )

    def handle(self, *args, provider: str, **options):
        with transaction.atomic():
            self.seed_provider_limits(provider)
            self.seed_agents(provider)
            self.seed_demo_user()
            self.seed_approver()
        self.seed_tool_server()
        self.import_example_plans()

    def seed_provider_limits(self, provider: str) -> None:
        label = f"{Agent.Provider.SIMULATED}:{SIMULATED_MODEL}"
        outcome = self.save_limit(Agent.Provider.SIMULATED, SIMULATED_MODEL, SIMULATED_LIMIT)
        self.stdout.write(f"Provider limit {label}: {outcome}")
        if provider == Agent.Provider.ANTHROPIC:
            # Real account limits differ per tier: create conservative values once and leave
            # what an administrator set in the admin alone.
            model = settings.GLASSBOX_MODEL
            values = {**ANTHROPIC_DEFAULT_LIMIT, **list_prices(model)}
            outcome = self.save_limit(Agent.Provider.ANTHROPIC, model, values, keep_existing=True)
            self.stdout.write(f"Provider limit {Agent.Provider.ANTHROPIC}:{model}: {outcome}")
            for model in CLAUDE_LIST_PRICES:
                if model == settings.GLASSBOX_MODEL:
                    continue
                values = {**ANTHROPIC_PRICE_ONLY_LIMIT, **list_prices(model)}
                outcome = self.save_limit(Agent.Provider.ANTHROPIC, model, values, keep_existing=True)
                if outcome == "created":
                    outcome = "created with list prices"
                self.stdout.write(f"Provider limit {Agent.Provider.ANTHROPIC}:{model}: {outcome}")
            if not settings.ANTHROPIC_API_KEY:
                self.stdout.write(
                    self.style.WARNING("ANTHROPIC_API_KEY is not set: tasks of these agents will fail until it is.")
                )

    def save_limit(self, provider: str, model: str, values: dict, *, keep_existing: bool = False) -> str:
        """Create a provider limit, or bring it to `values` (unless `keep_existing`), through the
        registry so that each change is audited as the command line's; what happened, in words."""
        limit = ProviderLimit.objects.filter(provider=provider, model=model).first()
        if limit is not None and keep_existing:
            return "kept as it is"
        return self.save_values(
            registry.save_provider_limit, limit or ProviderLimit(provider=provider, model=model), values
        )

    def seed_agents(self, provider: str) -> None:
        model = settings.GLASSBOX_MODEL if provider == Agent.Provider.ANTHROPIC else SIMULATED_MODEL
        for member in DEMO_TEAM:
            values = {
                "role": member.role,
                "capabilities": list(member.capabilities),
                "provider": provider,
                "model": model,
                "system_prompt": member.system_prompt,
                "max_concurrency": member.max_concurrency,
                "timeout_s": settings.GLASSBOX_DEFAULT_TIMEOUT_S,
                "max_retries": settings.GLASSBOX_DEFAULT_MAX_RETRIES,
                "max_output_tokens": 1024,
                # The latency model is the simulated provider's; Claude's durations are estimated
                # from output tokens (plans.estimated_duration_s).
                "provider_options": DEMO_LATENCY if provider == Agent.Provider.SIMULATED else {},
                "status": Agent.Status.ACTIVE,
            }
            agent = Agent.objects.filter(name=member.name).first() or Agent(name=member.name)
            outcome = self.save_values(registry.save_agent, agent, values)
            self.stdout.write(f"Agent {member.name} ({provider}:{model}, {member.max_concurrency} slots): {outcome}")

    def save_values(self, save, obj, values: dict) -> str:
        """Give `obj` (an agent or a provider limit, saved or new) these field values and save it
        through the registry's `save` when that creates or changes it; the outcome in words."""
        created = obj._state.adding
        before = registry.audited_values(obj)
        for field, value in values.items():
            setattr(obj, field, value)
        changes = registry.changed_fields(before, obj)
        if not created and not changes:
            return "kept as it is"
        self.registry_save(save, obj)
        return "created" if created else f"updated ({registry.describe_changes(changes)})"

    def registry_save(self, save, obj) -> None:
        """`save(obj)` as the command line's user; settings the registry refuses (a model name too
        long for GLASSBOX_MODEL, say) stop the command naming each problem."""
        try:
            save(obj, actor=console.cli_actor())
        except registry.InvalidSettings as invalid:
            raise CommandError(f"{obj._meta.verbose_name.capitalize()} {obj} not saved: {invalid}.") from None

    def seed_demo_user(self) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(username=DEMO_USERNAME).exists():
            self.stdout.write(f"User {DEMO_USERNAME}: exists, password left unchanged")
            return
        password = os.environ.get(DEMO_PASSWORD_ENV) or "demo"
        accounts.create_user(
            DEMO_USERNAME, email="demo@example.com", password=password, superuser=True, actor=console.cli_actor()
        )
        self.stdout.write(
            f"User {DEMO_USERNAME}: created as superuser, {self.password_text(DEMO_PASSWORD_ENV, 'demo')}"
        )

    def seed_approver(self) -> None:
        """The demo approver: holds the Approver role only, so it can approve plans `demo` launches."""
        user_model = get_user_model()
        role = approver_role()
        user = user_model.objects.filter(username=APPROVER_USERNAME).first()
        if user is not None:
            accounts.grant_role(user, role, actor=console.cli_actor())
            self.stdout.write(f"User {APPROVER_USERNAME}: exists ({APPROVER_ROLE} role), password left unchanged")
            return
        password = os.environ.get(APPROVER_PASSWORD_ENV) or APPROVER_USERNAME
        user = accounts.create_user(
            APPROVER_USERNAME, email="approver@example.com", password=password, actor=console.cli_actor()
        )
        accounts.grant_role(user, role, actor=console.cli_actor())
        self.stdout.write(
            f"User {APPROVER_USERNAME}: created with the {APPROVER_ROLE} role, "
            f"{self.password_text(APPROVER_PASSWORD_ENV, APPROVER_USERNAME)}: log in as {APPROVER_USERNAME} "
            f"to approve the plans that {DEMO_USERNAME} launches (separation of duties)"
        )

    def password_text(self, variable: str, default: str) -> str:
        """How to log in: the default password in full, or where a chosen one came from (never echoed)."""
        return f"password from {variable}" if os.environ.get(variable) else f"password '{default}'"

    def seed_tool_server(self) -> None:
        """Register the demo tool server once it has listed its tools (or point it at this Python),
        and grant it to the demo agents that use it. Each change is an audited registry change."""
        server = ToolServer.objects.filter(name=DEMO_TOOL_SERVER).first()
        command = list(DEMO_TOOL_COMMAND)
        try:
            if server is None:
                server = tool_registry.add_server(DEMO_TOOL_SERVER, command=command, actor=console.cli_actor())
                self.stdout.write(f"Tool server {DEMO_TOOL_SERVER}: registered ({server.tools.count()} tools)")
            elif [server.command, *server.args] != command:
                checked = tool_registry.candidate(DEMO_TOOL_SERVER, command=command, existing=server)
                server = tool_registry.save(checked, actor=console.cli_actor())
                self.stdout.write(f"Tool server {DEMO_TOOL_SERVER}: command updated")
            else:
                self.stdout.write(f"Tool server {DEMO_TOOL_SERVER}: kept as it is")
        except tool_registry.ToolRegistryError as error:
            raise CommandError(f"The demo tool server could not be registered: {error}") from None
        for name in DEMO_TOOL_GRANTS:
            if not ToolGrant.objects.filter(agent__name=name, server=server, tool="").exists():
                tool_registry.grant(name, DEMO_TOOL_SERVER, actor=console.cli_actor())
                self.stdout.write(f"Tool grant {name} → {DEMO_TOOL_SERVER}: created")

    def import_example_plans(self) -> None:
        for file_name in EXAMPLE_PLANS:
            if Plan.objects.filter(source_name=file_name).exists():
                self.stdout.write(f"Plan {file_name}: already imported")
                continue
            path = EXAMPLES_DIR / file_name
            try:
                spec, document = plans.load_file(path)
                plan = plans.save_plan(spec, document=document, source=Plan.Source.FILE, source_name=file_name)
            except plans.PlanValidationError as error:
                raise CommandError(f"Example plan {file_name} was not imported.\n{error.report(str(path))}") from None
            self.stdout.write(
                f"Plan {file_name}: imported as plan {plan.pk} ({counted(plan.subtasks.count(), 'subtask')})"
            )
