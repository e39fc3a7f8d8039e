"""Tool grants in words: what a person reads back after granting or revoking (the commands and the
admin print these sentences), for a server and tools built as rows, without starting the server."""

from __future__ import annotations

import pytest

from orchestrator.governance import tool_registry
from orchestrator.governance.grant_wording import approval_grants, grant_in_words, still_granted
from orchestrator.governance.tool_registry import ToolRegistryError
from orchestrator.models import Agent, Event, Tool, ToolGrant, ToolServer


@pytest.fixture
def coder(make_agent) -> Agent:
    """An agent and a tool server `srv` offering `echo` and `add`, as its registration lists them."""
    server = ToolServer.objects.create(name="srv", transport=ToolServer.Transport.STDIO, command="srv-mcp")
    Tool.objects.bulk_create([Tool(server=server, name="echo"), Tool(server=server, name="add")])
    return make_agent("coder")


def test_a_new_grant_says_whether_each_call_needs_a_persons_approval(coder):
    assert grant_in_words(coder, "srv:echo", requires_approval=True) == (
        "Granted srv:echo to coder (each call approved by a person)."
    )
    assert grant_in_words("coder", "srv") == "Granted srv to coder (no approval needed)."
    assert {(g.target, g.requires_approval) for g in coder.tool_grants.all()} == {("srv:echo", True), ("srv", False)}


def test_granting_what_the_agent_holds_already_says_nothing_changed(coder):
    grant_in_words(coder, "srv:echo", requires_approval=True)
    assert grant_in_words(coder, "srv:echo", requires_approval=True) == (
        "coder already holds srv:echo (each call approved by a person): nothing changed."
    )
    assert [e.type for e in Event.objects.filter(type__startswith="tool.")] == ["tool.granted"]


@pytest.mark.parametrize(
    "before, after, said",
    [
        (True, False, "Changed coder's grant of srv:echo: no approval needed (was: each call approved by a person)."),
        (False, True, "Changed coder's grant of srv:echo: each call approved by a person (was: no approval needed)."),
    ],
)
def test_granting_again_with_the_other_approval_says_what_it_was_and_is_now(coder, before, after, said):
    grant_in_words(coder, "srv:echo", requires_approval=before)
    assert grant_in_words(coder, "srv:echo", requires_approval=after) == said
    assert ToolGrant.objects.get(agent=coder, tool="echo").requires_approval is after


def test_a_grant_refused_says_why_and_gives_nothing(coder):
    with pytest.raises(ToolRegistryError, match=r"tool server srv has no tool 'nope' \(it offers: add, echo\)"):
        grant_in_words(coder, "srv:nope")
    with pytest.raises(ToolRegistryError, match="no agent named 'nobody'"):
        grant_in_words("nobody", "srv")
    assert not ToolGrant.objects.exists()


def test_revoking_a_tools_grant_under_a_server_grant_says_the_tool_is_still_callable_without_approval(coder):
    """The server's grant decides about the tool once its own grant is gone: revoking the grant
    that asked for approval lets the agent call it freely, and the sentence says so."""
    grant_in_words(coder, "srv")
    grant_in_words(coder, "srv:echo", requires_approval=True)
    left = tool_registry.revoke(coder, "srv:echo")
    assert still_granted(left) == "It can still call it through its grant of srv (no approval needed)."


def test_revoking_a_server_grant_names_the_tool_grants_the_agent_still_holds(coder):
    grant_in_words(coder, "srv")
    grant_in_words(coder, "srv:echo", requires_approval=True)
    grant_in_words(coder, "srv:add")
    left = tool_registry.revoke(coder, "srv")
    assert still_granted(left) == (
        "It still holds srv:add (no approval needed), srv:echo (each call approved by a person)."
    )


def test_revoking_the_only_grant_leaves_nothing_to_say(coder):
    grant_in_words(coder, "srv:echo")
    assert tool_registry.revoke(coder, "srv:echo") == []
    assert still_granted([]) == ""
    assert not coder.tool_grants.exists()


def test_the_grants_a_run_may_stop_for_are_those_with_approval_each_named(coder, make_agent):
    """The pre-flight names what its agents may ask a person to approve: a tool, or a whole server."""
    server = ToolServer.objects.get(name="srv")
    writer = make_agent("writer")
    ToolGrant.objects.create(agent=coder, server=server, tool="echo", requires_approval=True)
    ToolGrant.objects.create(agent=coder, server=server, tool="add")  # no approval: never stops a run
    ToolGrant.objects.create(agent=writer, server=server, requires_approval=True)
    named = [grant.text for grant in approval_grants([writer, coder])]
    assert named == ["srv:echo (coder)", "any tool of srv (writer)"]
    assert approval_grants([make_agent("reviewer")]) == []
