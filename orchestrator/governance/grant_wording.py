"""Tool grants in words: what the grant and revoke commands and the admin say back to a person,
and which grants the pre-flight names as ones a run may stop for.

Whether a grant was new, unchanged or changed its approval ("Granted …", "… already holds …:
nothing changed.", "Changed …'s grant of …"), and what a revoke left the agent of what it revoked
(a server's grant still covers a tool whose own grant went). The grants that ask a person to
approve each call, each named ("workspace:write_file (researcher)", "any tool of shell
(researcher)"), for the pre-flight's Checkpoints figure. The changes themselves, and their events,
are `tool_registry`'s; this module only reads grants and words them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.governance.tool_registry import agent_named, grant, parse_target
from orchestrator.models import Agent, ToolGrant

APPROVAL_WORDS = {True: "each call approved by a person", False: "no approval needed"}


def grant_in_words(agent: Agent | str, target: str, *, requires_approval: bool = False, actor: str = "") -> str:
    """Grant as `tool_registry.grant` does, and say what changed: a grant given again was reported as
    "Granted" whether it was new, unchanged, or had just lost its approval."""
    agent = agent_named(agent)
    server_name, tool = parse_target(target)
    before = ToolGrant.objects.filter(agent=agent, server__name=server_name, tool=tool).first()
    given = grant(agent, target, requires_approval=requires_approval, actor=actor)
    how = APPROVAL_WORDS[given.requires_approval]
    if before is None:
        return f"Granted {given.target} to {agent.name} ({how})."
    if before.requires_approval == given.requires_approval:
        return f"{agent.name} already holds {given.target} ({how}): nothing changed."
    return f"Changed {agent.name}'s grant of {given.target}: {how} (was: {APPROVAL_WORDS[before.requires_approval]})."


@dataclass(frozen=True)
class ApprovalGrant:
    """A grant under which each call waits for a person: what a run of this agent may stop for."""

    agent: str
    server: str
    tool: str  # "" for the whole server

    @property
    def text(self) -> str:
        """ "workspace:write_file (researcher)", or "any tool of workspace (researcher)"."""
        target = f"{self.server}:{self.tool}" if self.tool else f"any tool of {self.server}"
        return f"{target} ({self.agent})"


def approval_grants(agents: Iterable[Agent]) -> list[ApprovalGrant]:
    """The grants of these agents that require approval per call, by agent, server and tool."""
    rows = (
        ToolGrant.objects.filter(agent__in=[a.pk for a in agents if a.pk is not None], requires_approval=True)
        .order_by("agent__name", "server__name", "tool")
        .values_list("agent__name", "server__name", "tool")
    )
    return [ApprovalGrant(agent, server, tool) for agent, server, tool in rows]


def still_granted(left: list[ToolGrant]) -> str:
    """What a revoke left the agent of what it revoked, in words ("" for nothing).

    Revoking a tool's own grant does not take the tool away when the agent holds its whole server:
    the server's grant decides about it then, so revoking a grant that asked for approval lets the
    agent call the tool with no approval. "Revoked workspace:calculate" alone read as if it could
    no longer call it at all.
    """
    if not left:
        return ""
    if len(left) == 1 and not left[0].tool:
        return (
            f"It can still call it through its grant of {left[0].target} ({APPROVAL_WORDS[left[0].requires_approval]})."
        )
    held = ", ".join(f"{g.target} ({APPROVAL_WORDS[g.requires_approval]})" for g in left)
    return f"It still holds {held}."
