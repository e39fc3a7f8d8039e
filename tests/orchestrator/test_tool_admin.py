"""Tool servers and grants in the admin: saved only once the server speaks MCP, the environment's
values never rendered, every change audited with the person who made it."""

from __future__ import annotations

import shlex
import sys

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from orchestrator.governance import secrets, tool_registry
from orchestrator.models import Agent, Event, ToolGrant, ToolServer
from tests.orchestrator.tools.conftest import TEST_SERVER

COMMAND = shlex.join([sys.executable, str(TEST_SERVER)])
SECRET = "tok-admin-31337"
# The change page's read-only inlines (tools, grants) post empty management forms.
INLINES = {f"{prefix}-{name}": "0" for prefix in ("tools", "grants") for name in ("TOTAL_FORMS", "INITIAL_FORMS")}


@pytest.fixture
def superuser(db):
    return User.objects.create_superuser("root")


@pytest.fixture
def testsrv(db):
    return tool_registry.add_server("testsrv", command=shlex.split(COMMAND), env={"SERVICE_TOKEN": SECRET})


def test_adding_a_server_in_the_admin_discovers_its_tools_and_audits_it(client, superuser):
    client.force_login(superuser)
    response = client.post(
        reverse("admin:orchestrator_toolserver_add"),
        {
            "name": "testsrv",
            "command_line": COMMAND,
            "environment": f"SERVICE_TOKEN={SECRET}\n",
            "url": "",
            "header_lines": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    server = ToolServer.objects.get(name="testsrv")
    assert server.env_names == ["SERVICE_TOKEN"] and secrets.unseal(server.env_sealed) == {"SERVICE_TOKEN": SECRET}
    assert server.tools.filter(name="echo").exists()
    event = Event.objects.get(type="tool_server.added")
    assert event.actor_user == superuser and SECRET not in str(event.payload)


def test_a_server_that_does_not_speak_mcp_is_a_form_error_and_the_secret_is_not_sent_back(client, superuser):
    client.force_login(superuser)
    response = client.post(
        reverse("admin:orchestrator_toolserver_add"),
        {
            "name": "bad",
            "command_line": f"{shlex.quote(sys.executable)} -c 'print(1)'",
            "environment": f"SERVICE_TOKEN={SECRET}",
            "url": "",
            "header_lines": "",
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "does not speak MCP" in page and SECRET not in page
    assert not ToolServer.objects.exists() and not Event.objects.exists()


def test_a_command_line_with_an_open_quote_is_a_form_error_in_words(client, superuser):
    client.force_login(superuser)
    form = {"name": "bad", "command_line": "'unclosed", "environment": "", "url": "", "header_lines": ""}
    response = client.post(reverse("admin:orchestrator_toolserver_add"), form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"command_line": ["A quotation mark is not closed"]}
    assert not ToolServer.objects.exists() and not Event.objects.exists()


def test_every_bad_environment_and_header_line_is_named_with_its_line_number(client, superuser):
    client.force_login(superuser)
    response = client.post(
        reverse("admin:orchestrator_toolserver_add"),
        {
            "name": "bad",
            "command_line": COMMAND,
            "environment": f"NOEQUALS\n\n1BAD={SECRET}\nOK=1\nOK=2",
            "url": "",
            "header_lines": "X-Ok=TOKEN\nbad header=TOKEN",
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "environment": [
            "Line 1: environment variable 'NOEQUALS' is not NAME=VALUE with a valid name; "
            "line 3: environment variable '1BAD' is not NAME=VALUE with a valid name; "
            "line 5: environment variable OK is given twice"
        ],
        "header_lines": ["Line 2: header 'bad header' is not HEADER=ENVVAR with a valid name"],
    }
    assert SECRET not in response.content.decode() and not ToolServer.objects.exists()


def test_the_change_page_and_the_list_show_names_never_values(client, superuser, testsrv):
    client.force_login(superuser)
    for url in (
        reverse("admin:orchestrator_toolserver_changelist"),
        reverse("admin:orchestrator_toolserver_change", args=[testsrv.pk]),
    ):
        page = client.get(url).content.decode()
        assert "SERVICE_TOKEN=••••" in page and SECRET not in page


def test_a_change_keeps_the_environment_unless_a_new_one_is_given(client, superuser, testsrv):
    client.force_login(superuser)
    url = reverse("admin:orchestrator_toolserver_change", args=[testsrv.pk])
    form = {"command_line": COMMAND, "environment": "", "url": "", "header_lines": "", **INLINES}
    assert client.post(url, form).status_code == 302
    assert secrets.unseal(ToolServer.objects.get(pk=testsrv.pk).env_sealed) == {"SERVICE_TOKEN": SECRET}
    assert not Event.objects.filter(type="tool_server.changed").exists()  # nothing changed
    assert client.post(url, {**form, "environment": "SERVICE_TOKEN=rotated-token-2"}).status_code == 302
    assert secrets.unseal(ToolServer.objects.get(pk=testsrv.pk).env_sealed) == {"SERVICE_TOKEN": "rotated-token-2"}
    changed = Event.objects.get(type="tool_server.changed")
    assert changed.actor_user == superuser and changed.payload["changes"]["env"] == [
        ["SERVICE_TOKEN"],
        ["SERVICE_TOKEN"],
    ]
    assert "rotated-token-2" not in str(changed.payload) and SECRET not in str(changed.payload)


def test_grants_in_the_admin_go_through_the_registry(client, superuser, testsrv):
    client.force_login(superuser)
    agent = Agent.objects.create(name="coder")
    response = client.post(
        reverse("admin:orchestrator_toolgrant_add"),
        {"agent": agent.pk, "server": testsrv.pk, "tool": "teleport", "requires_approval": ""},
    )
    assert response.status_code == 200 and "has no tool" in response.content.decode()
    response = client.post(
        reverse("admin:orchestrator_toolgrant_add"),
        {"agent": agent.pk, "server": testsrv.pk, "tool": "echo", "requires_approval": "on"},
    )
    assert response.status_code == 302
    grant = ToolGrant.objects.get()
    assert grant.requires_approval and Event.objects.get(type="tool.granted").actor_user == superuser
    response = client.post(reverse("admin:orchestrator_toolgrant_delete", args=[grant.pk]), {"post": "yes"})
    assert response.status_code == 302 and not ToolGrant.objects.exists()
    assert Event.objects.get(type="tool.revoked").actor_user == superuser


def test_deleting_a_tools_own_grant_warns_that_the_servers_grant_still_lets_the_agent_call_it(
    client, superuser, testsrv
):
    client.force_login(superuser)
    agent = Agent.objects.create(name="coder")
    tool_registry.grant(agent, "testsrv")
    asked = tool_registry.grant(agent, "testsrv:echo", requires_approval=True)
    response = client.post(
        reverse("admin:orchestrator_toolgrant_delete", args=[asked.pk]), {"post": "yes"}, follow=True
    )
    shown = [str(m) for m in response.context["messages"]]
    assert (
        "coder → testsrv:echo revoked. It can still call it through its grant of testsrv (no approval needed)." in shown
    )


def test_the_refresh_action_and_removal_are_audited(client, superuser, testsrv):
    client.force_login(superuser)
    client.post(
        reverse("admin:orchestrator_toolserver_changelist"), {"action": "refresh", "_selected_action": [testsrv.pk]}
    )
    assert Event.objects.get(type="tool_server.refreshed").actor_user == superuser
    client.post(reverse("admin:orchestrator_toolserver_delete", args=[testsrv.pk]), {"post": "yes"})
    assert not ToolServer.objects.exists()
    assert Event.objects.get(type="tool_server.removed").actor_user == superuser


def test_an_agent_admin_manages_tools_and_a_viewer_only_sees_them(client, personas, testsrv):
    client.force_login(personas["agent_admin"])
    assert client.get(reverse("admin:orchestrator_toolserver_add")).status_code == 200
    assert client.get(reverse("admin:orchestrator_toolgrant_add")).status_code == 200
    assert client.get(reverse("admin:orchestrator_toolserver_delete", args=[testsrv.pk])).status_code == 200
    viewer = personas["viewer"]
    viewer.is_staff = True
    viewer.save()
    client.force_login(viewer)
    assert client.get(reverse("admin:orchestrator_toolserver_changelist")).status_code == 200
    assert client.get(reverse("admin:orchestrator_toolserver_add")).status_code == 403
