"""The agent registry and provider limits: every change is an Event; retired agents are not scheduled;
the roles data migration."""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Group, User

from orchestrator.engine import runs
from orchestrator.governance import registry
from orchestrator.models import Agent, Event, ProviderLimit, TaskRun


@pytest.fixture
def admin_user(db):
    return User.objects.create_user("alice")


def test_set_status_changes_the_agent_and_records_who_did_it(make_agent, admin_user):
    agent = make_agent("researcher")
    assert registry.set_status(agent, Agent.Status.RETIRED, user=admin_user) is True
    agent.refresh_from_db()
    assert agent.status == "retired"
    event = Event.objects.get(type="agent.status_changed")
    assert (event.agent, event.actor_user, event.actor_name) == (agent, admin_user, "alice")
    assert event.payload == {"agent": "researcher", "from": "active", "to": "retired"}
    assert event.message == "agent researcher active → retired"


def test_set_status_to_the_same_status_records_nothing(make_agent, admin_user):
    agent = make_agent("researcher")
    assert registry.set_status(agent, Agent.Status.ACTIVE, user=admin_user) is False
    assert not Event.objects.filter(type__startswith="agent.").exists()


def test_set_status_refuses_an_unknown_status(make_agent):
    agent = make_agent("researcher")
    with pytest.raises(registry.RegistryError) as refused:
        registry.set_status(agent, "sleeping")
    # A clause after a colon ("…: unknown agent status"), a sentence on its own.
    assert str(refused.value) == "unknown agent status 'sleeping': use one of draft, active, retired"
    assert refused.value.sentence == "Unknown agent status 'sleeping': use one of draft, active, retired"
    agent.refresh_from_db()
    assert agent.status == "active"


def test_a_retired_agent_is_never_scheduled(make_plan, make_agent, admin_user):
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", [])})
    registry.set_status(Agent.objects.get(name="researcher"), Agent.Status.RETIRED, user=admin_user)
    run = runs.launch(plan)
    task = run.tasks.get()
    assert task.state == TaskRun.State.READY
    assert task.wait_reason == "agent researcher is retired, not active"
    assert not task.attempts.exists()


def test_reactivating_an_agent_lets_its_waiting_tasks_run(make_plan, make_agent, admin_user):
    from orchestrator.engine import scheduler

    agent = make_agent("researcher")
    plan = make_plan({"a": ("researcher", [])})
    registry.set_status(agent, Agent.Status.RETIRED, user=admin_user)
    run = runs.launch(plan)
    registry.set_status(agent, Agent.Status.ACTIVE, user=admin_user)
    scheduler.advance(run.pk)
    assert run.tasks.get().state == TaskRun.State.QUEUED


def test_save_agent_records_a_new_agent_with_its_fields(admin_user):
    agent = Agent(name="critic", role="Critic", max_concurrency=3, owner=admin_user)
    registry.save_agent(agent, user=admin_user)
    event = Event.objects.get(type="agent.created")
    assert event.agent == agent and event.actor_user == admin_user
    fields = event.payload["fields"]
    assert fields["name"] == "critic" and fields["max_concurrency"] == 3 and fields["owner"] == "alice"
    assert fields["status"] == "active"


def test_save_agent_records_each_changed_field_old_and_new(make_agent, admin_user):
    agent = make_agent("researcher")
    agent.max_concurrency, agent.model = 7, "sim-2"
    registry.save_agent(agent, user=admin_user)
    event = Event.objects.get(type="agent.changed")
    assert event.payload["changes"] == {"model": ["sim-1", "sim-2"], "max_concurrency": [4, 7]}
    assert event.message == "agent researcher changed: model sim-1 → sim-2, max_concurrency 4 → 7"


def test_a_change_of_a_long_value_is_named_and_its_values_kept_in_the_payload(make_agent, admin_user):
    agent = make_agent("researcher")
    agent.system_prompt = "You are a careful researcher who cites every source it uses."
    agent.provider_options = {}
    registry.save_agent(agent, user=admin_user)
    event = Event.objects.get(type="agent.changed")
    assert event.message == "agent researcher changed: system_prompt, provider_options"
    assert event.payload["changes"]["system_prompt"][1] == agent.system_prompt
    assert not Event.objects.filter(type="agent.status_changed").exists()


def test_a_status_change_through_save_agent_is_also_a_status_event(make_agent, admin_user):
    agent = make_agent("researcher")
    agent.status = Agent.Status.RETIRED
    registry.save_agent(agent, user=admin_user)
    assert Event.objects.get(type="agent.changed").payload["changes"] == {"status": ["active", "retired"]}
    assert Event.objects.get(type="agent.status_changed").payload == {
        "agent": "researcher",
        "from": "active",
        "to": "retired",
    }


def test_saving_an_unchanged_agent_records_nothing(make_agent, admin_user):
    agent = make_agent("researcher")
    registry.save_agent(agent, user=admin_user)
    assert not Event.objects.filter(type__startswith="agent.").exists()


def test_long_texts_are_cut_in_the_audit_payload_not_in_the_row(make_agent, admin_user):
    agent = make_agent("researcher")
    agent.system_prompt = "x" * 5000
    registry.save_agent(agent, user=admin_user)
    old, new = Event.objects.get(type="agent.changed").payload["changes"]["system_prompt"]
    assert old == "" and len(new) == registry.MAX_AUDIT_TEXT + 1 and new.endswith("…")
    agent.refresh_from_db()
    assert len(agent.system_prompt) == 5000


def test_provider_limit_changes_are_recorded_with_money_as_text(db, admin_user):
    limit = ProviderLimit(provider="simulated", model="sim-1", input_price_per_mtok=Decimal("3"))
    registry.save_provider_limit(limit, user=admin_user)
    created = Event.objects.get(type="provider_limit.created")
    assert created.payload["fields"]["input_price_per_mtok"] == "3.0000"
    limit.output_price_per_mtok, limit.requests_per_minute = Decimal("15.5"), 60
    registry.save_provider_limit(limit, user=admin_user)
    changed = Event.objects.get(type="provider_limit.changed")
    assert changed.actor_user == admin_user
    assert changed.payload["changes"] == {
        "requests_per_minute": [None, 60],
        "output_price_per_mtok": ["0.0000", "15.5000"],
    }
    assert changed.message == (
        "provider limit simulated:sim-1 changed: requests_per_minute no limit → 60, output_price_per_mtok 0.0000 → 15.5000"
    )


def test_save_provider_limit_refuses_negative_prices_and_zero_limits_naming_each(db, admin_user):
    limit = ProviderLimit(
        provider="simulated", model="negprice", max_in_flight=0, output_tokens_per_minute=0, input_price_per_mtok=-1
    )
    with pytest.raises(registry.InvalidProviderLimit) as refused:
        registry.save_provider_limit(limit, user=admin_user)
    assert set(refused.value.problems) == {"max_in_flight", "output_tokens_per_minute", "input_price_per_mtok"}
    assert "leave it blank for no limit" in str(refused.value) and "cannot be negative" in str(refused.value)
    assert not ProviderLimit.objects.exists() and not Event.objects.exists()


def test_lowering_max_in_flight_brings_the_adaptive_cap_down(db):
    limit = ProviderLimit.objects.create(provider="simulated", model="sim-1", max_in_flight=8, effective_in_flight=6)
    limit.max_in_flight = 2
    registry.save_provider_limit(limit)
    limit.refresh_from_db()
    assert (limit.max_in_flight, limit.effective_in_flight) == (2, 2)


def test_deleting_a_provider_limit_is_recorded(db, admin_user):
    limit = ProviderLimit.objects.create(provider="simulated", model="sim-1", requests_per_minute=10)
    registry.delete_provider_limit(limit, user=admin_user)
    assert not ProviderLimit.objects.exists()
    event = Event.objects.get(type="provider_limit.deleted")
    assert event.payload["limit"] == "simulated:sim-1" and event.payload["fields"]["requests_per_minute"] == 10


def test_limits_saved_as_zero_before_the_validators_become_blank_keeping_their_meaning(db, admin_user):
    """Data migration 0019: a 0 (which admission always read as no limit) becomes blank, so the
    admin can save the row again without being stopped on a field left untouched."""
    migration = importlib.import_module("orchestrator.migrations.0019_provider_limit_zero_is_no_limit")
    old = ProviderLimit.objects.create(provider="simulated", model="old", requests_per_minute=10)
    ProviderLimit.objects.filter(pk=old.pk).update(max_in_flight=0, output_tokens_per_minute=0)  # as saved before 0018
    kept = ProviderLimit.objects.create(provider="simulated", model="kept", max_in_flight=3)

    migration.zero_limits_to_blank(django_apps, None)

    old.refresh_from_db()
    assert (old.requests_per_minute, old.max_in_flight, old.output_tokens_per_minute) == (10, None, None)
    assert ProviderLimit.objects.get(pk=kept.pk).max_in_flight == 3
    old.input_price_per_mtok = Decimal("2.5")
    registry.save_provider_limit(old, user=admin_user)  # refused before: "Enter 1 or more…" on max_in_flight


# --- Roles (data migration 0006_roles) -----------------------------------------------------------

VIEW = {
    "view_run",
    "view_plan",
    "view_subtask",
    "view_dependency",
    "view_taskrun",
    "view_attempt",
    "view_checkpoint",
    "view_event",
    "view_agent",
    "view_toolserver",
    "view_tool",
    "view_toolgrant",
}


@pytest.mark.parametrize(
    "role, expected",
    [
        ("Viewer", VIEW),
        ("Launcher", VIEW | {"launch_run", "control_run"}),
        ("Approver", VIEW | {"decide_checkpoint"}),
        (
            "Agent admin",
            {
                "view_agent",
                "add_agent",
                "change_agent",
                "view_providerlimit",
                "add_providerlimit",
                "change_providerlimit",
                "view_toolserver",
                "add_toolserver",
                "change_toolserver",
                "delete_toolserver",
                "view_tool",
                "view_toolgrant",
                "add_toolgrant",
                "change_toolgrant",
                "delete_toolgrant",
            },
        ),
    ],
)
def test_the_migration_creates_each_role_with_exactly_its_permissions(db, role, expected):
    group = Group.objects.get(name=role)
    assert {p.codename for p in group.permissions.all()} == expected
    assert {p.content_type.app_label for p in group.permissions.all()} == {"orchestrator"}


def test_no_role_may_delete_agents_or_touch_the_audit_log(db):
    for group in Group.objects.filter(name__in=["Viewer", "Launcher", "Approver", "Agent admin"]):
        codenames = set(group.permissions.values_list("codename", flat=True))
        assert not codenames & {"delete_agent", "add_event", "change_event", "delete_event"}, group.name


def test_a_change_of_max_steps_is_audited(make_agent, admin_user):
    agent = make_agent("researcher")
    agent.max_steps = 12
    registry.save_agent(agent, user=admin_user)
    assert Event.objects.get(type="agent.changed").payload["changes"] == {"max_steps": [8, 12]}
