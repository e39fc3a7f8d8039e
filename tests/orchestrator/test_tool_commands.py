"""`tool_server`, `grant_tool`, `revoke_tool`: one-line errors and a non-zero exit on bad input,
nothing saved, every change an event naming who ran the command."""

from __future__ import annotations

import sys

import pytest
from django.core.management.base import CommandError

from orchestrator.management import console
from orchestrator.models import Event, ToolGrant, ToolServer
from tests.orchestrator.test_cli import manage, run_command
from tests.orchestrator.tools.conftest import TEST_SERVER

STDIO = f'"{sys.executable}" "{TEST_SERVER}"'


@pytest.fixture
def registered(db):
    return run_command("tool_server", "add", "testsrv", "--stdio", STDIO, "--env", "SERVICE_TOKEN=tok-abcdef")


def test_add_lists_the_tools_and_masks_the_environment(registered):
    out, _ = registered
    assert out.startswith("Added tool server testsrv (stdio: ") and "SERVICE_TOKEN=••••" in out
    assert "echo" in out and "tok-abcdef" not in out
    event = Event.objects.get(type="tool_server.added")
    assert event.actor_name == console.cli_actor() and event.actor_name.startswith("cli:")


def test_add_counts_the_tools_in_words_and_echoes_the_command_as_a_shell_reads_it(registered):
    """It said "3 tool(s)", and dropped the quotes of an argument with a space in it
    ("python -c import sys" for `python -c "import sys"`)."""
    out, _ = registered
    server = ToolServer.objects.get(name="testsrv")
    assert f"; {server.tools.count()} tools: " in out and "tool(s)" not in out
    server.args = [*server.args, "--label", "two words"]
    assert server.endpoint.endswith(" --label 'two words'")


def test_list_shows_servers_tools_and_who_holds_them(registered, make_agent):
    make_agent("coder")
    make_agent("writer")
    run_command("grant_tool", "coder", "testsrv")
    run_command("grant_tool", "writer", "testsrv:echo", "--approval")
    out, _ = run_command("tool_server", "list")
    assert "testsrv" in out and "SERVICE_TOKEN=••••" in out and "tok-abcdef" not in out
    echo_line = next(line for line in out.splitlines() if line.strip().startswith("echo:"))
    assert "[agents: coder, writer (approval)]" in echo_line
    crash_line = next(line for line in out.splitlines() if line.strip().startswith("crash:"))
    assert "[agents: coder]" in crash_line


def test_list_without_servers_says_how_to_add_one(db):
    out, _ = run_command("tool_server", "list")
    assert "No tool servers" in out and "tool_server add" in out


def test_grant_and_revoke_report_and_record_the_change(registered, make_agent):
    make_agent("coder")
    out, _ = run_command("grant_tool", "coder", "testsrv:echo", "--approval")
    assert out.strip() == "Granted testsrv:echo to coder (each call approved by a person)."
    out, _ = run_command("revoke_tool", "coder", "testsrv:echo")
    assert out.strip() == "Revoked testsrv:echo from coder."
    assert [e.type for e in Event.objects.filter(type__startswith="tool.")] == ["tool.granted", "tool.revoked"]
    assert {e.actor_name for e in Event.objects.filter(type__startswith="tool.")} == {console.cli_actor()}


def test_granting_again_says_whether_anything_changed(registered, make_agent):
    """It said "Granted" each time, also when the grant was there already or had just lost its approval."""
    make_agent("coder")
    out, _ = run_command("grant_tool", "coder", "testsrv", "--approval")
    assert out.strip() == "Granted testsrv to coder (each call approved by a person)."
    out, _ = run_command("grant_tool", "coder", "testsrv", "--approval")
    assert out.strip() == "coder already holds testsrv (each call approved by a person): nothing changed."
    out, _ = run_command("grant_tool", "coder", "testsrv")
    assert out.strip() == (
        "Changed coder's grant of testsrv: no approval needed (was: each call approved by a person)."
    )
    assert [e.type for e in Event.objects.filter(type__startswith="tool.")] == ["tool.granted", "tool.grant_changed"]


def test_revoking_a_tools_own_grant_says_the_servers_grant_still_lets_the_agent_call_it(registered, make_agent):
    """Revoking the grant that asked for approval does not take the tool away from an agent that
    holds the whole server: it may call it with no approval now, and the command says so."""
    make_agent("coder")
    run_command("grant_tool", "coder", "testsrv")
    run_command("grant_tool", "coder", "testsrv:echo", "--approval")
    out, _ = run_command("revoke_tool", "coder", "testsrv:echo")
    assert out.strip() == (
        "Revoked testsrv:echo from coder. It can still call it through its grant of testsrv (no approval needed)."
    )
    run_command("grant_tool", "coder", "testsrv:echo", "--approval")
    out, _ = run_command("revoke_tool", "coder", "testsrv")
    assert out.strip() == "Revoked testsrv from coder. It still holds testsrv:echo (each call approved by a person)."


def test_refresh_reports_what_changed(registered):
    ToolServer.objects.filter(name="testsrv").update(args=[str(TEST_SERVER), "--extra"])
    out, _ = run_command("tool_server", "refresh", "testsrv")
    assert out.strip().endswith("added: extra.")
    out, _ = run_command("tool_server", "refresh", "testsrv")
    assert out.strip().endswith("no change.")


def test_remove_drops_the_server_and_its_grants(registered, make_agent):
    make_agent("coder")
    run_command("grant_tool", "coder", "testsrv")
    run_command("tool_server", "remove", "testsrv")
    assert not ToolServer.objects.exists() and not ToolGrant.objects.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["tool_server", "add", "bad", "--stdio", "/nonexistent/server"], "command not found"),
        (["tool_server", "add", "bad", "--stdio", f'"{sys.executable}" -c "print(1)"'], "does not speak MCP"),
        (["tool_server", "add", "bad", "--stdio", STDIO, "--env", "NOEQUALS"], "is not NAME=VALUE"),
        (  # what --header takes, as the README and the admin write it, not an environment's NAME=VALUE
            ["tool_server", "add", "bad", "--url", "http://127.0.0.1:1/mcp", "--header", "X-Key"],
            "^Header 'X-Key' is not HEADER=ENVVAR with a valid name$",
        ),
        (
            ["tool_server", "add", "bad", "--url", "http://127.0.0.1:1/mcp", "--header", "X-Key=literal-value"],
            "must name the environment variable",
        ),
        (["tool_server", "add", "bad", "--stdio", "'unclosed"], "--stdio: a quotation mark is not closed"),
        (["tool_server", "refresh", "ghost"], "No tool server named 'ghost'"),
        (["grant_tool", "nobody", "testsrv"], "^No agent named 'nobody'$"),
        (["grant_tool", "coder", "testsrv:teleport"], "has no tool 'teleport'"),
        (["grant_tool", "coder", "ghost"], r"^No tool server named 'ghost' \(`tool_server list` shows them\)$"),
        (["revoke_tool", "coder", "testsrv"], "^Agent coder holds no grant testsrv"),
    ],
)
def test_bad_input_is_an_error_and_saves_nothing(registered, make_agent, args, message):
    make_agent("coder")
    before = (ToolServer.objects.count(), ToolGrant.objects.count(), Event.objects.count())
    with pytest.raises(CommandError, match=message):
        run_command(*args)
    assert (ToolServer.objects.count(), ToolGrant.objects.count(), Event.objects.count()) == before


def test_at_the_terminal_a_bad_server_is_one_line_and_exit_1(transactional_db):
    result = manage("tool_server", "add", "bad", "--stdio", f'"{sys.executable}" -c "print(1)"')
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "does not speak MCP" in result.stderr
    assert "Traceback" not in result.stderr
    assert not ToolServer.objects.exists()
