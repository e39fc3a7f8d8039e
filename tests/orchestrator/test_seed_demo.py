"""seed_demo: idempotent, never resets the demo user's password, leaves a runnable demo."""

from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from orchestrator.governance import registry
from orchestrator.management import console
from orchestrator.models import Agent, Plan, ProviderLimit, Subtask

DEMO_AGENTS = {"researcher", "architect", "coder", "tester", "reviewer", "writer"}
EXAMPLES = {"research_brief.yaml", "feature_pipeline.yaml", "exploration.yaml", "workspace_report.yaml"}

pytestmark = pytest.mark.django_db


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def test_seed_creates_active_simulated_team_limits_user_and_plans(monkeypatch):
    monkeypatch.delenv("GLASSBOX_DEMO_PASSWORD", raising=False)
    output = seed()

    agents = {agent.name: agent for agent in Agent.objects.all()}
    assert set(agents) >= DEMO_AGENTS
    for name in DEMO_AGENTS:
        agent = agents[name]
        assert agent.status == Agent.Status.ACTIVE and agent.is_schedulable
        assert agent.provider == Agent.Provider.SIMULATED and agent.model == "sim-1"
        assert 2 <= agent.max_concurrency <= 4
        assert agent.max_output_tokens == 1024
        assert agent.role and agent.capabilities
        assert agent.provider_options["latency"] == {"dist": "lognormal", "median_s": 1.0, "sigma": 0.4}

    limit = ProviderLimit.objects.get(provider="simulated", model="sim-1")
    assert limit.input_price_per_mtok == Decimal("3") and limit.output_price_per_mtok == Decimal("15")
    assert limit.requests_per_minute and limit.max_in_flight

    user = get_user_model().objects.get(username="demo")
    assert user.is_superuser and user.is_staff and user.check_password("demo")

    plans = {plan.source_name: plan for plan in Plan.objects.all()}
    assert set(plans) == EXAMPLES
    assert plans["exploration.yaml"].subtasks.count() == 22
    assert plans["feature_pipeline.yaml"].subtasks.get(key="design").gate == Subtask.Gate.AFTER
    assert "User demo: created" in output and "imported as plan" in output


def test_seed_is_idempotent_and_restores_agents():
    seed()
    counts = (Agent.objects.count(), ProviderLimit.objects.count(), Plan.objects.count(), Subtask.objects.count())
    Agent.objects.filter(name="coder").update(status=Agent.Status.RETIRED, max_concurrency=9)

    output = seed()

    assert (
        Agent.objects.count(),
        ProviderLimit.objects.count(),
        Plan.objects.count(),
        Subtask.objects.count(),
    ) == counts
    coder = Agent.objects.get(name="coder")
    assert coder.status == Agent.Status.ACTIVE and coder.max_concurrency == 3
    assert get_user_model().objects.filter(username="demo").count() == 1
    assert "already imported" in output and "password left unchanged" in output


def test_seed_never_resets_a_changed_password(monkeypatch):
    seed()
    user = get_user_model().objects.get(username="demo")
    user.set_password("changed-by-the-owner")
    user.save()

    monkeypatch.setenv("GLASSBOX_DEMO_PASSWORD", "something-else")
    seed()

    user.refresh_from_db()
    assert user.check_password("changed-by-the-owner")


def test_demo_password_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GLASSBOX_DEMO_PASSWORD", "s3cret-demo-pass")
    output = seed()
    assert get_user_model().objects.get(username="demo").check_password("s3cret-demo-pass")
    assert "s3cret-demo-pass" not in output


def test_anthropic_provider_switches_the_team(settings):
    settings.GLASSBOX_MODEL = "claude-test-model"
    seed("--provider", "anthropic")
    for agent in Agent.objects.filter(name__in=DEMO_AGENTS):
        assert agent.provider == Agent.Provider.ANTHROPIC and agent.model == "claude-test-model"
        assert agent.status == Agent.Status.ACTIVE
    assert ProviderLimit.objects.filter(provider="anthropic", model="claude-test-model").exists()

    for limit in ProviderLimit.objects.all():  # seeded past the admin's form: valid all the same
        assert registry.field_problems(limit) == {}, limit
    seed()  # back to the simulated team
    assert set(Agent.objects.filter(name__in=DEMO_AGENTS).values_list("provider", flat=True)) == {"simulated"}


def test_seed_creates_an_approver_who_may_approve_what_demo_launches(monkeypatch, make_plan):
    """With only the demo login a newcomer could not approve their own plan (separation of
    duties): the demo approver can, and the output says how to log in as it."""
    from orchestrator.engine import approvers, runs
    from orchestrator.models import Checkpoint

    monkeypatch.delenv("GLASSBOX_APPROVER_PASSWORD", raising=False)
    output = seed()
    approver = get_user_model().objects.get(username="approver")
    assert approver.check_password("approver") and not approver.is_superuser and not approver.is_staff
    assert list(approver.groups.values_list("name", flat=True)) == ["Approver"]
    assert approver.has_perm("orchestrator.decide_checkpoint") and not approver.has_perm("orchestrator.launch_run")
    assert "User approver: created with the Approver role, password 'approver'" in output
    assert "User demo: created as superuser, password 'demo'" in output

    demo = get_user_model().objects.get(username="demo")
    run = runs.launch(Plan.objects.get(source_name="research_brief.yaml"), launched_by=demo, require_plan_approval=True)
    checkpoint = run.checkpoints.get(kind=Checkpoint.Kind.PLAN)
    assert approvers.approvers(checkpoint) == ["approver"]
    with pytest.raises(
        runs.ActionError,
        match=r"demo launched run \d+, so another approver must approve its plan \(who may approve: approver\)",
    ):
        runs.decide(checkpoint, approve=True, user=demo)
    runs.decide(checkpoint, approve=True, user=approver)
    run.refresh_from_db()
    assert run.status == "running"

    assert "User approver: exists (Approver role), password left unchanged" in seed()


def test_the_approver_password_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GLASSBOX_APPROVER_PASSWORD", "s3cret-approver-pass")
    output = seed()
    assert get_user_model().objects.get(username="approver").check_password("s3cret-approver-pass")
    assert "s3cret-approver-pass" not in output and "password from GLASSBOX_APPROVER_PASSWORD" in output


def test_seed_registers_the_demo_tool_server_and_grants_it_once():
    from orchestrator.governance import tool_registry
    from orchestrator.models import Event, ToolGrant, ToolServer

    output = seed()
    server = ToolServer.objects.get(name="workspace")
    assert set(server.tools.values_list("name", flat=True)) == {"write_file", "read_file", "list_files", "calculate"}
    assert "Tool server workspace: registered (4 tools)" in output
    assert sorted(ToolGrant.objects.values_list("agent__name", "tool", "requires_approval")) == [
        ("researcher", "", False),
        ("writer", "", False),
    ]
    # The audit log names who ran it, as every command does (it said "seed_demo", naming no one).
    seeded = Event.objects.filter(type__in=["tool_server.added", "tool.granted"])
    assert {e.actor_name for e in seeded} == {console.cli_actor()} and seeded.count() == 3
    [grant] = tool_registry.granted_servers(Agent.objects.get(name="writer"))
    assert grant.server.args == ("-m", "orchestrator.tools.demo_server")
    events_before = Event.objects.count()
    assert "Tool server workspace: kept as it is" in seed()
    assert ToolGrant.objects.count() == 2 and Event.objects.count() == events_before
    ToolServer.objects.filter(name="workspace").update(command="/old/venv/bin/python")
    assert "Tool server workspace: command updated" in seed()
    assert Event.objects.filter(type="tool_server.changed").count() == 1


def test_the_workspace_example_gives_its_report_full_inputs():
    seed()
    plan = Plan.objects.get(source_name="workspace_report.yaml")
    assert dict(plan.subtasks.values_list("key", "inputs")) == {"figures": "", "notes": "", "report": "full"}


def test_an_unknown_provider_is_refused_naming_the_choices_as_typed():
    """The error read "choose from Agent.Provider.SIMULATED, Agent.Provider.ANTHROPIC"."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"invalid choice: 'bogus' \(choose from 'simulated', 'anthropic'\)"):
        call_command("seed_demo", "--provider", "bogus")


def test_the_audit_log_names_the_command_line_for_what_the_demo_creates(monkeypatch):
    """The demo's agents, limits, logins and role were in the registry with no event saying who
    made them, while the same changes from the admin or `manage.py agent` are audited."""
    from orchestrator.models import Event

    monkeypatch.setenv("GLASSBOX_DEMO_PASSWORD", "s3cret-demo-pass")
    seed()

    seeded = Event.objects.exclude(type__startswith="tool")
    assert {e.actor_name for e in seeded} == {console.cli_actor()}
    assert sorted(seeded.filter(type="agent.created").values_list("payload__agent", flat=True)) == sorted(DEMO_AGENTS)
    assert list(seeded.filter(type="provider_limit.created").values_list("message", flat=True)) == [
        "provider limit simulated:sim-1 created"
    ]
    assert list(seeded.filter(type="user.created").values_list("message", flat=True)) == [
        "superuser demo created",
        "user approver created",
    ]
    assert list(seeded.filter(type="user.role_granted").values_list("message", flat=True)) == [
        "user approver given the Approver role"
    ]
    assert not any("s3cret-demo-pass" in f"{e.message} {e.payload}" for e in Event.objects.all())


def test_a_second_seed_records_only_what_it_changed_back():
    from orchestrator.models import Event

    seed()
    events_before = Event.objects.count()
    output = seed()
    assert Event.objects.count() == events_before
    assert "Agent coder (simulated:sim-1, 3 slots): kept as it is" in output
    assert "Provider limit simulated:sim-1: kept as it is" in output

    Agent.objects.filter(name="coder").update(status=Agent.Status.RETIRED, max_concurrency=9)
    ProviderLimit.objects.filter(model="sim-1").update(max_in_flight=3)
    get_user_model().objects.get(username="approver").groups.clear()
    output = seed()

    assert "Agent coder (simulated:sim-1, 3 slots): updated (max_concurrency 9 → 3, status retired → active)" in output
    assert "Provider limit simulated:sim-1: updated (max_in_flight 3 → 16)" in output
    new = Event.objects.filter(pk__gt=Event.objects.order_by("pk")[events_before - 1].pk)
    assert sorted(new.values_list("type", "actor_name")) == [
        ("agent.changed", console.cli_actor()),
        ("agent.status_changed", console.cli_actor()),
        ("provider_limit.changed", console.cli_actor()),
        ("user.role_granted", console.cli_actor()),
    ]
    assert new.get(type="agent.changed").payload["changes"] == {
        "max_concurrency": [9, 3],
        "status": ["retired", "active"],
    }


def test_anthropic_limits_are_created_once_as_the_command_line(settings):
    from orchestrator.models import Event

    settings.GLASSBOX_MODEL = "claude-sonnet-4-6"
    output = seed("--provider", "anthropic")
    created = Event.objects.filter(type="provider_limit.created")
    assert created.count() == ProviderLimit.objects.count() == 1 + len(seed_demo_prices())
    assert {e.actor_name for e in created} == {console.cli_actor()}
    assert "Provider limit anthropic:claude-haiku-4-5: created with list prices" in output

    ProviderLimit.objects.filter(model="claude-haiku-4-5").update(max_in_flight=1)  # set by an administrator
    events_before = Event.objects.count()
    assert "Provider limit anthropic:claude-haiku-4-5: kept as it is" in seed("--provider", "anthropic")
    assert ProviderLimit.objects.get(model="claude-haiku-4-5").max_in_flight == 1
    assert Event.objects.count() == events_before


def seed_demo_prices() -> dict:
    from orchestrator.management.commands.seed_demo import CLAUDE_LIST_PRICES

    return CLAUDE_LIST_PRICES
