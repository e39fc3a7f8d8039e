"""Tool servers and grants in the registry: registered only once they speak MCP, every change an
Event naming who made it, nothing saved on bad input, the most specific grant decides."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time

import pytest
from django.contrib.auth.models import User

from orchestrator.governance import secrets, tool_registry
from orchestrator.governance.tool_registry import ToolRegistryError
from orchestrator.models import Agent, Event, Tool, ToolGrant, ToolServer
from tests.orchestrator.tools.conftest import TEST_SERVER

TEST_COMMAND = [sys.executable, str(TEST_SERVER)]


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice")


@pytest.fixture
def testsrv(db, alice):
    return tool_registry.add_server("testsrv", command=TEST_COMMAND, env={"SERVICE_TOKEN": "tok-123456"}, user=alice)


def nothing_saved() -> bool:
    return not ToolServer.objects.exists() and not Tool.objects.exists() and not Event.objects.exists()


def test_adding_a_stdio_server_lists_its_tools_and_records_who_did_it(testsrv, alice):
    assert testsrv.status == "ready" and testsrv.refreshed_at is not None
    assert {"echo", "hang", "crash", "environment"} <= set(testsrv.tools.values_list("name", flat=True))
    echo = testsrv.tools.get(name="echo")
    assert echo.description == "Return the text." and echo.input_schema["required"] == ["text"]
    event = Event.objects.get(type="tool_server.added")
    assert (event.actor_user, event.actor_name) == (alice, "alice")
    assert event.payload["server"] == "testsrv" and event.payload["env"] == ["SERVICE_TOKEN"]
    assert "echo" in event.payload["tools"]


def test_the_declared_environment_is_stored_encrypted_and_only_its_names_shown(testsrv):
    assert testsrv.env_names == ["SERVICE_TOKEN"]
    assert "tok-123456" not in testsrv.env_sealed and testsrv.env_sealed
    assert secrets.unseal(testsrv.env_sealed) == {"SERVICE_TOKEN": "tok-123456"}
    assert tool_registry.server_spec(testsrv).env == {"SERVICE_TOKEN": "tok-123456"}
    assert "tok-123456" not in repr(tool_registry.server_spec(testsrv))


def test_an_old_secret_key_in_the_fallbacks_still_opens_the_environment(testsrv, settings):
    old_key = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-brand-new-key", [old_key]
    assert secrets.unseal(testsrv.env_sealed) == {"SERVICE_TOKEN": "tok-123456"}
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(secrets.SecretsUnreadable):
        secrets.unseal(testsrv.env_sealed)
    with pytest.raises(ToolRegistryError, match="cannot be decrypted"):
        tool_registry.server_spec(testsrv)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"command": ["/nonexistent/mcp-server"]}, "could not start: command not found"),
        ({"command": [sys.executable, "-c", "print('hello')"]}, "does not speak MCP"),
        ({"command": [sys.executable, "-c", "import time; time.sleep(60)"]}, "did not complete the MCP handshake"),
        ({"command": TEST_COMMAND, "url": "http://127.0.0.1:1/mcp"}, "either a command"),
        ({}, "either a command"),
        ({"url": "ftp://example.com/mcp"}, "not an http"),
        ({"command": TEST_COMMAND, "env": {"1BAD": "x"}}, "not a valid name"),
        ({"command": TEST_COMMAND, "headers": {"X-Key": "KEY"}}, "--header is for HTTP servers"),
        ({"url": "http://127.0.0.1:1/mcp", "env": {"A": "b"}}, "--env is for stdio servers"),
        ({"url": "http://127.0.0.1:1/mcp"}, "could not be reached"),
    ],
)
def test_bad_input_is_one_line_and_saves_nothing(db, settings, options, message):
    # Time for a failing server to fail by itself; a silent one is waited out, 0.5 s is enough.
    settings.GLASSBOX_TOOL_START_TIMEOUT_S = 0.5 if "handshake" in message else 3
    with pytest.raises(ToolRegistryError, match=message) as error:
        tool_registry.add_server("broken", **options)
    assert "\n" not in str(error.value)
    assert nothing_saved()


def test_every_bad_header_line_is_named_with_its_line_number():
    with pytest.raises(tool_registry.ToolRegistryError) as refused:
        tool_registry.parse_headers(["X-Key=literal-value", "bad header=TOKEN", "X-Ok=TOKEN"], lines=True)
    assert str(refused.value) == (
        "line 1: header X-Key must name the environment variable that holds its value (HEADER=ENVVAR), "
        "not the value itself; line 2: header 'bad header' is not HEADER=ENVVAR with a valid name"
    )


def test_a_server_name_must_be_valid_and_unused(testsrv):
    with pytest.raises(ToolRegistryError, match="not a valid server name"):
        tool_registry.add_server("has space", command=TEST_COMMAND)
    with pytest.raises(ToolRegistryError, match="exists already"):
        tool_registry.add_server("testsrv", command=TEST_COMMAND)
    assert ToolServer.objects.count() == 1


def test_a_secret_printed_by_a_server_that_fails_to_start_is_masked(db):
    with pytest.raises(ToolRegistryError) as error:
        tool_registry.add_server(
            "leaky", command=[*TEST_COMMAND, "--leak-at-start"], env={"SERVICE_TOKEN": "tok-leaked-99"}
        )
    assert "tok-leaked-99" not in str(error.value) and "SERVICE_TOKEN" in str(error.value)
    assert nothing_saved()


def test_refresh_records_added_removed_and_changed_tools(testsrv, alice):
    ToolServer.objects.filter(pk=testsrv.pk).update(args=[str(TEST_SERVER), "--extra"])
    testsrv.refresh_from_db()
    refresh = tool_registry.refresh_server(testsrv, actor="cli:bob")
    assert (refresh.added, refresh.removed) == (["extra"], [])
    event = Event.objects.get(type="tool_server.refreshed")
    assert event.actor_name == "cli:bob" and event.payload["added"] == ["extra"]
    ToolServer.objects.filter(pk=testsrv.pk).update(args=[str(TEST_SERVER)])
    testsrv.refresh_from_db()
    assert tool_registry.refresh_server(testsrv).removed == ["extra"]
    assert not testsrv.tools.filter(name="extra").exists()


def test_a_refresh_that_cannot_reach_the_server_says_so_and_keeps_the_tools(testsrv):
    tools_before = set(testsrv.tools.values_list("name", flat=True))
    ToolServer.objects.filter(pk=testsrv.pk).update(command="/nonexistent/mcp-server")
    testsrv.refresh_from_db()
    with pytest.raises(ToolRegistryError, match="command not found"):
        tool_registry.refresh_server(testsrv, actor="cli:bob")
    testsrv.refresh_from_db()
    assert testsrv.status == "unreachable" and "command not found" in testsrv.status_message
    assert set(testsrv.tools.values_list("name", flat=True)) == tools_before
    assert Event.objects.get(type="tool_server.refresh_failed").actor_name == "cli:bob"


def test_grants_are_audited_and_a_second_grant_changes_only_the_approval(testsrv, make_agent, alice):
    agent = make_agent("coder")
    created = tool_registry.grant("coder", "testsrv:echo", user=alice)
    assert (created.tool, created.requires_approval, created.granted_by) == ("echo", False, alice)
    same = tool_registry.grant(agent, "testsrv:echo", requires_approval=True, actor="cli:bob")
    assert same.pk == created.pk and same.requires_approval
    granted, changed = Event.objects.filter(type__startswith="tool.").order_by("id")
    assert (granted.type, granted.actor_name, granted.agent) == ("tool.granted", "alice", agent)
    assert granted.payload == {"agent": "coder", "target": "testsrv:echo", "requires_approval": False}
    assert (changed.type, changed.actor_name, changed.payload["requires_approval"]) == (
        "tool.grant_changed",
        "cli:bob",
        [False, True],
    )
    tool_registry.grant(agent, "testsrv:echo", requires_approval=True)
    assert Event.objects.filter(type__startswith="tool.").count() == 2


@pytest.mark.parametrize(
    "agent, target, message",
    [
        ("nobody", "testsrv", "no agent named 'nobody'"),
        ("coder", "elsewhere", "no tool server named 'elsewhere'"),
        ("coder", "testsrv:teleport", r"has no tool 'teleport' \(it offers: "),
        ("coder", "testsrv:", "is not SERVER or SERVER:TOOL"),
        ("retired", "testsrv", "agent retired is retired"),
    ],
)
def test_bad_grants_are_refused_and_save_nothing(testsrv, make_agent, agent, target, message):
    make_agent("coder")
    make_agent("retired", status=Agent.Status.RETIRED)
    events_before = Event.objects.count()
    with pytest.raises(ToolRegistryError, match=message):
        tool_registry.grant(agent, target)
    assert not ToolGrant.objects.exists() and Event.objects.count() == events_before


def test_revoke_removes_exactly_the_grant_named(testsrv, make_agent):
    agent = make_agent("coder")
    tool_registry.grant(agent, "testsrv:echo")
    with pytest.raises(ToolRegistryError, match=r"holds no grant testsrv \(it holds: testsrv:echo\)"):
        tool_registry.revoke(agent, "testsrv")
    tool_registry.revoke(agent, "testsrv:echo", actor="cli:bob")
    assert not ToolGrant.objects.exists()
    event = Event.objects.get(type="tool.revoked")
    assert (event.actor_name, event.payload["target"]) == ("cli:bob", "testsrv:echo")


def test_the_most_specific_grant_decides_and_only_granted_tools_are_offered(testsrv, make_agent):
    agent, other = make_agent("coder"), make_agent("writer")
    tool_registry.grant(agent, "testsrv", requires_approval=True)
    tool_registry.grant(agent, "testsrv:echo")  # echo without approval, the rest with
    tool_registry.grant(other, "testsrv:pid")
    [grant] = tool_registry.granted_servers(agent)
    approvals = {tool.name: tool.requires_approval for tool in grant.tools}
    assert approvals["echo"] is False and approvals["crash"] is True
    assert set(approvals) == set(testsrv.tools.values_list("name", flat=True))
    assert grant.server.env == {"SERVICE_TOKEN": "tok-123456"} and grant.server.command == sys.executable
    [only] = tool_registry.granted_servers(other)
    assert [tool.name for tool in only.tools] == ["pid"]
    assert tool_registry.granted_servers(make_agent("idle")) == []
    assert tool_registry.holders(testsrv)["echo"] == [("coder", False)]
    assert tool_registry.holders(testsrv)["pid"] == [("coder", True), ("writer", False)]


def test_a_tool_two_granted_servers_share_is_offered_under_qualified_names(testsrv, make_agent):
    tool_registry.add_server("second", command=TEST_COMMAND)
    agent = make_agent("coder")
    tool_registry.grant(agent, "testsrv:echo")
    tool_registry.grant(agent, "second:echo")
    tool_registry.grant(agent, "second:pid")
    names = sorted(tool.name for grant in tool_registry.granted_servers(agent) for tool in grant.tools)
    assert names == ["pid", "second__echo", "testsrv__echo"]


def test_removing_a_server_removes_its_grants_and_names_them(testsrv, make_agent):
    tool_registry.grant(make_agent("coder"), "testsrv:echo")
    tool_registry.remove_server(testsrv, actor="cli:bob")
    assert not ToolServer.objects.exists() and not ToolGrant.objects.exists()
    event = Event.objects.get(type="tool_server.removed")
    assert event.payload["grants"] == ["coder → testsrv:echo"] and event.actor_name == "cli:bob"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_server():
    port = free_port()
    process = subprocess.Popen(
        [*TEST_COMMAND, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


def test_an_http_server_gets_its_header_values_from_the_environment_never_stored(db, http_server, monkeypatch):
    import asyncio

    from orchestrator.tools.toolbox import Toolbox

    monkeypatch.setenv("TEST_MCP_KEY", "hdr-secret-777")
    server = tool_registry.add_server("remote", url=http_server, headers={"X-Api-Key": "TEST_MCP_KEY"})
    assert server.transport == "http" and server.headers == {"X-Api-Key": "TEST_MCP_KEY"}
    assert "hdr-secret-777" not in str(ToolServer.objects.filter(pk=server.pk).values().get())
    assert "hdr-secret-777" not in str(list(Event.objects.values()))
    agent = Agent.objects.create(name="caller")
    tool_registry.grant(agent, "remote:header_digest")

    grants = tool_registry.granted_servers(agent)

    async def call():
        async with Toolbox(grants) as box:
            return await box.call("header_digest", {"name": "X-Api-Key"})

    assert asyncio.run(call()).text == hashlib.sha256(b"hdr-secret-777").hexdigest()
    monkeypatch.delenv("TEST_MCP_KEY")
    with pytest.raises(ToolRegistryError, match="needs the environment variable TEST_MCP_KEY, which is not set"):
        tool_registry.refresh_server(server)
