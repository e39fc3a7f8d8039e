"""The admin as governance console: registry changes audited, history read-only, the audit log
read-only for everyone (superusers too) with filters and streamed exports, API tokens shown once."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.test import AsyncClient
from django.urls import reverse
from django.utils import timezone

from orchestrator import events
from orchestrator.admin.base import refusal_text
from orchestrator.engine import runs
from orchestrator.engine.runs import ActionError
from orchestrator.governance import tokens
from orchestrator.models import Agent, ApiToken, Checkpoint, Event, ProviderLimit, Run
from tests.conftest import fast_latency


@pytest.fixture
def superuser(db):
    return User.objects.create_superuser("root")


def staff_in(role: str, name: str | None = None) -> User:
    from tests.conftest import ensure_roles

    ensure_roles()
    user = User.objects.create_user(name or role.lower().replace(" ", "_"), is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def a_run(make_agent, make_plan):
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", [])})
    return runs.launch(plan, launched_by=User.objects.create_user("launcher_of_run"))


def changelist_action(client, model: str, action: str, ids, **extra):
    url = reverse(f"admin:orchestrator_{model}_changelist")
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids], **extra}, follow=True)


# --- The audit log -------------------------------------------------------------------------------


def test_superusers_cannot_add_change_or_delete_events(client, superuser, a_run):
    client.force_login(superuser)
    event = Event.objects.first()
    assert client.get(reverse("admin:orchestrator_event_add")).status_code == 403
    assert client.get(reverse("admin:orchestrator_event_delete", args=[event.pk])).status_code == 403
    assert client.post(reverse("admin:orchestrator_event_delete", args=[event.pk]), {"post": "yes"}).status_code == 403
    change_url = reverse("admin:orchestrator_event_change", args=[event.pk])
    page = client.get(change_url)
    assert page.status_code == 200 and b'name="_save"' not in page.content  # shown read-only
    before = Event.objects.values().get(pk=event.pk)
    assert client.post(change_url, {"type": "forged", "message": "forged"}).status_code == 403
    assert Event.objects.values().get(pk=event.pk) == before


def test_attempts_to_tamper_with_the_log_are_themselves_audited(client, superuser, a_run):
    client.force_login(superuser)
    event = Event.objects.first()
    client.get(reverse("admin:orchestrator_event_add"))
    client.post(reverse("admin:orchestrator_event_change", args=[event.pk]), {"type": "forged"})
    client.post(reverse("admin:orchestrator_event_delete", args=[event.pk]), {"post": "yes"})
    denials = Event.objects.filter(type="access.denied").order_by("id")
    assert [d.payload["permission"] for d in denials] == [
        "orchestrator.add_event",
        "orchestrator.change_event",
        "orchestrator.delete_event",
    ]
    assert {d.actor_user for d in denials} == {superuser}


def test_the_event_changelist_offers_no_add_and_no_delete(client, superuser, a_run):
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_event_changelist"))
    assert page.status_code == 200
    assert reverse("admin:orchestrator_event_add").encode() not in page.content
    assert b"delete_selected" not in page.content
    assert b"export_csv" in page.content and b"Export as JSON Lines" in page.content


def test_the_audit_log_gives_each_events_time_to_the_second_in_utc(client, superuser, a_run, monkeypatch):
    """The list gave "Nov. 28, 2026, 10:31 a.m.": no seconds, no zone, for a log read for the
    order of things."""
    with monkeypatch.context() as patched:
        patched.setattr(timezone, "now", lambda: datetime(2026, 11, 28, 10, 31, 7, 250_000, tzinfo=UTC))
        event = events.record("note", run=a_run, message="the latest")
    client.force_login(superuser)
    listed = client.get(reverse("admin:orchestrator_event_changelist")).content.decode()
    assert "2026-11-28 10:31:07 UTC" in listed and "10:31 a.m." not in listed
    shown = client.get(reverse("admin:orchestrator_event_change", args=[event.pk])).content.decode()
    assert "2026-11-28 10:31:07 UTC" in shown
    assert client.post(reverse("admin:orchestrator_event_change", args=[event.pk]), {"time": "x"}).status_code == 403


def test_the_event_changelist_says_what_an_event_without_a_message_did_as_the_run_page_does(client, superuser, a_run):
    """A task.succeeded event keeps its story in its payload: the list showed "-" for it."""
    task = a_run.tasks.get()
    events.record(
        "task.succeeded", run=a_run, task=task, payload={"attempt": 1, "output_tokens": 401, "cost_usd": "0.0031"}
    )
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_event_changelist")).content.decode()
    assert "attempt 1 · output tokens 401 · $0.0031" in page
    assert '<td class="field-task">a</td>' in page  # the task by its key


def test_the_event_changelist_shows_the_newest_first(client, superuser, a_run):
    events.record("note", run=a_run, message="the latest")
    client.force_login(superuser)
    listed = list(client.get(reverse("admin:orchestrator_event_changelist")).context["cl"].result_list)
    assert listed[0].message == "the latest"
    assert [e.pk for e in listed] == sorted((e.pk for e in listed), reverse=True)


def test_the_event_changelist_gives_each_events_time_to_the_second_in_utc(client, superuser, a_run):
    """The audit log said "Nov. 28, 2026, 3 p.m." of an event at 15:00:57 (Django's English format):
    events a minute apart read alike, and no time zone was named."""
    created = Event.objects.get(run=a_run, type="run.created").created_at
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_event_changelist")).content.decode()
    assert f"{created:%Y-%m-%d %H:%M:%S} UTC" in page
    assert not re.search(r"\b[ap]\.m\.|\bnoon\b|\bmidnight\b", page)
    run_page = client.get(reverse("admin:orchestrator_run_change", args=[a_run.pk])).content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", run_page)  # its start, read-only


def test_deleting_events_through_a_bulk_action_is_impossible(client, superuser, a_run):
    client.force_login(superuser)
    count = Event.objects.count()
    response = changelist_action(
        client, "event", "delete_selected", Event.objects.values_list("pk", flat=True), post="yes"
    )
    assert response.status_code == 200
    assert Event.objects.count() == count


def _listed_ids(page) -> set[int]:
    return {obj.pk for obj in page.context["cl"].result_list}


@pytest.mark.parametrize(
    "query, expected",
    [
        ("type=note", {"note"}),
        ("actor=alice", {"note"}),
        ("actor_kind__exact=user", {"note", "run.created", "run.started"}),
    ],
)
def test_events_filter_by_type_and_actor(client, superuser, a_run, query, expected):
    alice = User.objects.create_user("alice")
    events.record("note", run=a_run, user=alice, message="hello")
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_event_changelist") + "?" + query)
    assert page.status_code == 200
    assert {e.type for e in page.context["cl"].result_list} == expected


def test_events_filter_by_run_agent_and_date(client, superuser, a_run, make_plan):
    other = runs.launch(make_plan({"b": ("researcher", [])}))
    agent = Agent.objects.get(name="researcher")
    client.force_login(superuser)
    url = reverse("admin:orchestrator_event_changelist")
    by_run = client.get(f"{url}?run={other.pk}")
    assert _listed_ids(by_run) == set(other.events.values_list("pk", flat=True))
    by_agent = client.get(f"{url}?agent__id__exact={agent.pk}")
    assert _listed_ids(by_agent) == set(Event.objects.filter(agent=agent).values_list("pk", flat=True))
    assert _listed_ids(by_agent)
    first = Event.objects.order_by("created_at").first().created_at
    by_date = client.get(
        f"{url}?created_at__year={first.year}&created_at__month={first.month}&created_at__day={first.day}"
    )
    assert _listed_ids(by_date) == set(Event.objects.values_list("pk", flat=True))
    assert not _listed_ids(client.get(f"{url}?created_at__year={first.year - 1}"))
    bad = client.get(f"{url}?run=abc")
    assert bad.status_code == 302 and bad.url.endswith("?e=1")


def test_export_link_streams_the_filtered_events_as_csv_and_is_audited(client, superuser, a_run):
    client.force_login(superuser)
    response = client.get(
        reverse("admin:orchestrator_event_export", args=["csv"]) + f"?run={a_run.pk}&type=run.created"
    )
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="glassbox-audit-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["type"], r["run"]) for r in rows] == [("run.created", str(a_run.pk))]
    exported = Event.objects.get(type="audit.exported")
    assert exported.actor_user == superuser
    assert exported.payload == {"format": "csv", "filters": {"run": str(a_run.pk), "type": "run.created"}}


def test_export_jsonl_under_asgi_streams_asynchronously(superuser, a_run):
    async def fetch():
        client = AsyncClient()
        await client.aforce_login(superuser)
        response = await client.get(reverse("admin:orchestrator_event_export", args=["jsonl"]) + f"?run={a_run.pk}")
        assert response.streaming and response.is_async
        return [line async for line in response.streaming_content]

    lines = b"".join(async_to_sync(fetch)()).decode().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(
        a_run.events.order_by("id").values_list("seq", flat=True)
    )


def test_export_refuses_an_unknown_format_or_filter(client, superuser, a_run):
    client.force_login(superuser)
    assert client.get(reverse("admin:orchestrator_event_export", args=["xml"])).status_code == 400
    bad = client.get(reverse("admin:orchestrator_event_export", args=["csv"]) + "?run=abc")
    assert bad.status_code == 400 and b"filters are not valid" in bad.content
    assert not Event.objects.filter(type="audit.exported").exists()


def test_export_needs_view_permission_on_events(client, a_run):
    staff = staff_in("Agent admin")
    client.force_login(staff)
    assert client.get(reverse("admin:orchestrator_event_export", args=["csv"])).status_code == 403
    denial = Event.objects.get(type="access.denied")
    assert denial.actor_user == staff and denial.payload["permission"] == "orchestrator.view_event"
    assert client.get(reverse("admin:orchestrator_event_changelist")).status_code == 403
    assert Event.objects.filter(type="access.denied").count() == 2


def test_a_viewer_with_staff_status_reads_and_exports_the_log(client, a_run):
    client.force_login(staff_in("Viewer"))
    assert client.get(reverse("admin:orchestrator_event_changelist")).status_code == 200
    response = changelist_action(client, "event", "export_jsonl", a_run.events.values_list("pk", flat=True))
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == a_run.events.count()
    assert Event.objects.get(type="audit.exported").payload["filters"] == {"selected": str(len(lines))}


# --- Agent registry and provider limits ----------------------------------------------------------


def _agent_form(agent: Agent, **changes) -> dict:
    data = {
        "name": agent.name,
        "role": agent.role,
        "capabilities": json.dumps(agent.capabilities),
        "provider": agent.provider,
        "model": agent.model,
        "system_prompt": agent.system_prompt,
        "max_concurrency": agent.max_concurrency,
        "timeout_s": agent.timeout_s,
        "max_retries": agent.max_retries,
        "max_output_tokens": agent.max_output_tokens,
        "max_steps": agent.max_steps,
        "provider_options": json.dumps(agent.provider_options),
        "status": agent.status,
        "owner": "",
    }
    data.update(changes)
    return data


def test_an_agent_admin_edits_an_agent_and_the_change_is_audited(client, make_agent):
    agent = make_agent("researcher")
    admin_user = staff_in("Agent admin")
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:orchestrator_agent_change", args=[agent.pk]), _agent_form(agent, max_concurrency=9)
    )
    assert response.status_code == 302, response.content[:2000]
    agent.refresh_from_db()
    assert agent.max_concurrency == 9
    event = Event.objects.get(type="agent.changed")
    assert event.actor_user == admin_user and event.payload["changes"] == {"max_concurrency": [4, 9]}


def test_an_agent_admin_adds_an_agent_and_it_is_audited(client, db):
    admin_user = staff_in("Agent admin")
    client.force_login(admin_user)
    form = _agent_form(Agent(name="critic", role="Critic"))
    response = client.post(reverse("admin:orchestrator_agent_add"), form)
    assert response.status_code == 302
    assert Event.objects.get(type="agent.created").agent == Agent.objects.get(name="critic")


def test_the_admin_refuses_provider_options_the_provider_would_refuse_naming_each(client, make_agent):
    """{"latency": "fast", "failure_rate": 7} was once saved, and the run failed only when it ran."""
    agent = make_agent("researcher")
    client.force_login(staff_in("Agent admin"))
    form = _agent_form(agent, provider_options=json.dumps({"latency": "fast", "failure_rate": 7, "seeed": 1}))
    response = client.post(reverse("admin:orchestrator_agent_change", args=[agent.pk]), form)
    assert response.status_code == 200  # the form again, with the problems
    html = response.content.decode()
    assert "Latency must be an object, got &#x27;fast&#x27;." in html
    assert "Failure_rate must be between 0 and 1, got 7.0." in html
    assert "Unknown option &#x27;seeed&#x27;" in html
    agent.refresh_from_db()
    assert agent.provider_options == fast_latency() and not Event.objects.filter(type="agent.changed").exists()


def test_an_anthropic_agent_takes_no_simulated_options(client, make_agent):
    agent = make_agent("researcher")
    client.force_login(staff_in("Agent admin"))
    form = _agent_form(agent, provider="anthropic", model="claude-sonnet-4-6")  # latency options kept by mistake
    response = client.post(reverse("admin:orchestrator_agent_change", args=[agent.pk]), form)
    assert (
        "Unknown option &#x27;latency&#x27;: the anthropic provider takes no provider options."
        in response.content.decode()
    )
    form = _agent_form(agent, provider="anthropic", model="claude-sonnet-4-6", provider_options="{}")
    assert client.post(reverse("admin:orchestrator_agent_change", args=[agent.pk]), form).status_code == 302


def test_activate_and_retire_actions_are_audited(client, make_agent):
    researcher, writer = make_agent("researcher"), make_agent("writer", status=Agent.Status.DRAFT)
    admin_user = staff_in("Agent admin")
    client.force_login(admin_user)
    changelist_action(client, "agent", "retire", [researcher.pk])
    changelist_action(client, "agent", "activate", [writer.pk, researcher.pk])
    researcher.refresh_from_db(), writer.refresh_from_db()
    assert (researcher.status, writer.status) == ("active", "active")
    moves = [
        (e.payload["agent"], e.payload["from"], e.payload["to"])
        for e in Event.objects.filter(type="agent.status_changed").order_by("id")
    ]
    assert moves[0] == ("researcher", "active", "retired")
    assert sorted(moves[1:]) == [("researcher", "retired", "active"), ("writer", "draft", "active")]
    assert set(Event.objects.filter(type="agent.status_changed").values_list("actor_user", flat=True)) == {
        admin_user.pk
    }


def test_agents_are_never_deleted_not_even_by_a_superuser(client, superuser, make_agent):
    agent = make_agent("researcher")
    client.force_login(superuser)
    assert client.get(reverse("admin:orchestrator_agent_delete", args=[agent.pk])).status_code == 403
    changelist_action(client, "agent", "delete_selected", [agent.pk], post="yes")
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_a_viewer_cannot_change_agents_in_the_admin(client, make_agent):
    agent = make_agent("researcher")
    client.force_login(staff_in("Viewer"))
    response = client.post(
        reverse("admin:orchestrator_agent_change", args=[agent.pk]), _agent_form(agent, max_concurrency=9)
    )
    assert response.status_code == 403
    assert Event.objects.get(type="access.denied").payload == {
        "permission": "orchestrator.change_agent",
        "action": f"POST {reverse('admin:orchestrator_agent_change', args=[agent.pk])}",
    }
    changelist_action(client, "agent", "retire", [agent.pk])
    agent.refresh_from_db()
    assert (agent.max_concurrency, agent.status) == (4, "active")


def test_agent_changelist_filters_by_status_and_provider(client, make_agent):
    make_agent("researcher"), make_agent("writer", status=Agent.Status.RETIRED)
    client.force_login(staff_in("Agent admin"))
    url = reverse("admin:orchestrator_agent_changelist")
    assert [a.name for a in client.get(url + "?status__exact=retired").context["cl"].result_list] == ["writer"]
    assert len(client.get(url + "?provider__exact=simulated").context["cl"].result_list) == 2


def test_provider_limit_edits_are_audited_and_engine_fields_read_only(client, db):
    limit = ProviderLimit.objects.create(
        provider="simulated", model="sim-1", effective_in_flight=3, learned_requests_per_minute=16
    )
    admin_user = staff_in("Agent admin")
    client.force_login(admin_user)
    page = client.get(reverse("admin:orchestrator_providerlimit_change", args=[limit.pk])).content.decode()
    assert "Learned requests per minute" in page and "Learned from the provider" in page
    data = {
        "provider": "simulated",
        "model": "sim-1",
        "requests_per_minute": "120",
        "input_tokens_per_minute": "",
        "output_tokens_per_minute": "",
        "max_in_flight": "",
        "input_price_per_mtok": "3",
        "output_price_per_mtok": "15",
        "effective_in_flight": "99",
        "learned_requests_per_minute": "1000",
    }
    response = client.post(reverse("admin:orchestrator_providerlimit_change", args=[limit.pk]), data)
    assert response.status_code == 302
    limit.refresh_from_db()
    assert (limit.requests_per_minute, limit.effective_in_flight, limit.learned_requests_per_minute) == (120, 3, 16)
    event = Event.objects.get(type="provider_limit.changed")
    assert event.actor_user == admin_user
    assert event.payload["changes"]["requests_per_minute"] == [None, 120]


def _limit_form(model: str, **values: str) -> dict:
    """The provider limit form's fields for a new simulated model: no limits, no price, but `values`."""
    return {
        "provider": "simulated",
        "model": model,
        **dict.fromkeys(ProviderLimit.CONFIGURED_LIMITS, ""),
        "input_price_per_mtok": "0",
        "output_price_per_mtok": "0",
        **values,
    }


def test_the_admin_names_every_bad_provider_limit_value_at_once_and_saves_nothing(client, db):
    client.force_login(staff_in("Agent admin"))
    data = _limit_form(
        "negprice",
        requests_per_minute="-5",
        output_tokens_per_minute="0",
        max_in_flight="0",
        input_price_per_mtok="-1",
        output_price_per_mtok="-3",
    )
    response = client.post(reverse("admin:orchestrator_providerlimit_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    no_zero = "Enter 1 or more, or leave it blank for no limit (0 would mean no limit too)."
    assert errors == {
        "requests_per_minute": [no_zero],
        "output_tokens_per_minute": [no_zero],
        "max_in_flight": [no_zero],
        "input_price_per_mtok": ["A price cannot be negative: enter 0 or more."],
        "output_price_per_mtok": ["A price cannot be negative: enter 0 or more."],
    }
    assert not ProviderLimit.objects.exists() and not Event.objects.filter(type__startswith="provider_limit").exists()


def test_a_blank_provider_limit_means_no_limit_and_prices_of_0_are_no_price(client, db):
    """Both prices at 0 is the default a limit is made with: nothing tells it from a price set on
    purpose, so it counts as none, and the form says so under the prices."""
    client.force_login(staff_in("Agent admin"))
    form = client.get(reverse("admin:orchestrator_providerlimit_add")).content.decode()
    assert form.count("With both prices at 0 (the default) the model counts as unpriced") == 2
    data = _limit_form("free", output_tokens_per_minute="1")
    assert client.post(reverse("admin:orchestrator_providerlimit_add"), data).status_code == 302
    limit = ProviderLimit.objects.get(model="free")
    assert (limit.requests_per_minute, limit.output_tokens_per_minute, limit.output_price_per_mtok) == (None, 1, 0)
    assert not limit.is_priced


def test_deleting_a_provider_limit_in_the_admin_is_audited(client, superuser):
    limit = ProviderLimit.objects.create(provider="simulated", model="sim-1")
    client.force_login(superuser)
    response = client.post(reverse("admin:orchestrator_providerlimit_delete", args=[limit.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert Event.objects.get(type="provider_limit.deleted").actor_user == superuser


# --- History: plans, runs, tasks, checkpoints ----------------------------------------------------


@pytest.mark.parametrize("model", ["plan", "plannerattempt", "run", "taskrun", "attempt", "checkpoint"])
def test_history_cannot_be_added_or_changed_by_a_superuser(client, superuser, a_run, model):
    client.force_login(superuser)
    assert client.get(reverse(f"admin:orchestrator_{model}_add")).status_code == 403
    obj = {
        "plan": a_run.plan,
        "run": a_run,
        "taskrun": a_run.tasks.first(),
        "attempt": a_run.tasks.first().attempts.first(),
        "checkpoint": None,
        "plannerattempt": None,
    }[model]
    if obj is not None:
        assert client.get(reverse(f"admin:orchestrator_{model}_delete", args=[obj.pk])).status_code == 403
        page = client.get(reverse(f"admin:orchestrator_{model}_change", args=[obj.pk]))
        assert page.status_code == 200 and b'name="_save"' not in page.content


def test_every_model_is_in_the_admin():
    from django.apps import apps
    from django.contrib import admin as django_admin

    missing = [
        m.__name__
        for m in apps.get_app_config("orchestrator").get_models()
        if m not in django_admin.site._registry
        and m.__name__ not in ("Subtask", "Dependency", "RateCounter", "EventSequence")
    ]
    assert not missing, f"register these in orchestrator/admin/: {missing}"


def test_plan_page_shows_its_subtasks_inline(client, superuser, a_run):
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_plan_change", args=[a_run.plan.pk]))
    html = re.sub(r"\s+", " ", page.content.decode())
    assert '<td class="field-key"> <p>a</p> </td>' in html
    assert '<td class="field-title"> <p>A</p> </td>' in html
    assert 'name="subtasks-0-key"' not in html  # shown, not editable


def test_run_actions_call_the_engine_with_the_control_permission(client, a_run):
    launcher = staff_in("Launcher")
    client.force_login(launcher)
    response = changelist_action(client, "run", "pause", [a_run.pk])
    a_run.refresh_from_db()
    assert a_run.status == Run.Status.PAUSED
    assert Event.objects.get(type="run.paused").actor_user == launcher
    response = changelist_action(client, "run", "pause", [a_run.pk])
    assert f"Run {a_run.pk} is paused: it cannot be paused" in response.content.decode()  # named once


def test_run_actions_are_not_offered_without_the_control_permission(client, a_run):
    client.force_login(staff_in("Viewer"))
    page = client.get(reverse("admin:orchestrator_run_changelist"))
    assert b'value="pause"' not in page.content
    changelist_action(client, "run", "cancel", [a_run.pk])
    a_run.refresh_from_db()
    assert a_run.status == Run.Status.RUNNING


def test_checkpoint_approval_obeys_separation_of_duties(client, make_agent, make_plan):
    make_agent("researcher")
    approver = staff_in("Approver")
    plan = make_plan({"a": ("researcher", [])})
    own = runs.launch(plan, launched_by=approver, require_plan_approval=True)
    other = runs.launch(plan, launched_by=User.objects.create_user("someone"), require_plan_approval=True)
    client.force_login(approver)
    mine, theirs = own.checkpoints.get(), other.checkpoints.get()
    response = changelist_action(client, "checkpoint", "approve", [mine.pk, theirs.pk])
    mine.refresh_from_db(), theirs.refresh_from_db()
    assert (mine.status, theirs.status) == (Checkpoint.Status.PENDING, Checkpoint.Status.APPROVED)
    assert f"Checkpoint {mine.pk}: separation of duties: approver launched run" in response.content.decode()
    response = changelist_action(client, "checkpoint", "approve", [theirs.pk])
    assert f"Checkpoint {theirs.pk} was already approved by approver" in response.content.decode()


# --- API tokens ----------------------------------------------------------------------------------


def test_issuing_a_token_in_the_admin_shows_it_once(client, superuser):
    alice = User.objects.create_user("alice")
    client.force_login(superuser)
    page = client.post(reverse("admin:orchestrator_apitoken_add"), {"user": alice.pk, "name": "CI"})
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    raw = page.context["issued"][0][1]
    assert raw.encode() in page.content and tokens.authenticate(raw) == alice
    token = ApiToken.objects.get()
    assert Event.objects.get(type="api_token.created").actor_user == superuser
    for url in (
        reverse("admin:orchestrator_apitoken_changelist"),
        reverse("admin:orchestrator_apitoken_change", args=[token.pk]),
    ):
        listed = client.get(url)
        assert (
            listed.status_code == 200 and raw.encode() not in listed.content and token.prefix.encode() in listed.content
        )


def test_the_admin_refuses_a_token_for_an_inactive_user(client, superuser):
    bob = User.objects.create_user("bob", is_active=False)
    client.force_login(superuser)
    page = client.post(reverse("admin:orchestrator_apitoken_add"), {"user": bob.pk, "name": "CI"})
    assert page.status_code == 200 and b"bob is inactive" in page.content
    assert not ApiToken.objects.exists()


def test_revoke_and_reissue_actions(client, superuser):
    alice = User.objects.create_user("alice")
    first, first_raw = tokens.issue(alice, "CI")
    client.force_login(superuser)
    page = changelist_action(client, "apitoken", "reissue", [first.pk])
    new_raw = page.context["issued"][0][1]
    assert tokens.authenticate(first_raw) is None and tokens.authenticate(new_raw) == alice
    replacement = ApiToken.objects.get(revoked_at__isnull=True)
    changelist_action(client, "apitoken", "revoke", [replacement.pk])
    assert tokens.authenticate(new_raw) is None
    assert Event.objects.filter(type="api_token.revoked").count() == 2


def test_tokens_cannot_be_edited_or_deleted(client, superuser):
    token, _ = tokens.issue(User.objects.create_user("alice"), "CI")
    client.force_login(superuser)
    assert client.get(reverse("admin:orchestrator_apitoken_delete", args=[token.pk])).status_code == 403
    assert client.post(reverse("admin:orchestrator_apitoken_change", args=[token.pk]), {"name": "x"}).status_code == 403


def test_a_refusal_names_its_object_once():
    assert refusal_text("Run 3", ActionError("run 3 is paused: it cannot be paused")) == (
        "Run 3 is paused: it cannot be paused"
    )
    assert refusal_text("Task scope of run 3", ActionError("task scope already ended (succeeded)")) == (
        "Task scope of run 3 already ended (succeeded)"
    )
    assert refusal_text("Run 3", ActionError("run 35 already ended (failed)")) == "Run 3: run 35 already ended (failed)"
    assert refusal_text("Checkpoint 5", ActionError("separation of duties: you launched run 2")) == (
        "Checkpoint 5: separation of duties: you launched run 2"
    )
