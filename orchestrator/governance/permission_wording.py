"""A refused permission in words a person understands: what they may not do, and which role gives it.

A 403 said "You do not have permission to do this (orchestrator.launch_run)": the internal name of
the permission, and no way forward. The dashboard's error page and the run page's message line say
instead what the person tried to do and which role (migration 0006_roles: Viewer, Launcher,
Approver, Agent admin) an admin gives them for it.
"""

from __future__ import annotations

from typing import NamedTuple


class Needed(NamedTuple):
    action: str  # what the person may not do: "launch runs"
    role: str  # the role that allows it: "Launcher"


NEEDS = {
    "orchestrator.view_run": Needed("see runs", "Viewer"),
    "orchestrator.launch_run": Needed("launch runs", "Launcher"),
    "orchestrator.control_run": Needed("pause, resume or cancel runs, or retry and skip tasks", "Launcher"),
    "orchestrator.decide_checkpoint": Needed("approve or reject plans and checkpoints", "Approver"),
}


def denial_in_words(permission: str) -> str:
    """ "You don't have permission to launch runs; ask an admin for the Launcher role." A permission
    no role is named for here is not named either (it means nothing to the reader)."""
    needed = NEEDS.get(permission)
    if needed is None:
        return "You don't have permission to do this; ask an admin for a role that allows it."
    return f"You don't have permission to {needed.action}; ask an admin for the {needed.role} role."
