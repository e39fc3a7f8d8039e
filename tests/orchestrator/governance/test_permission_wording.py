"""A refused permission in words: what the person may not do and the role that allows it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from orchestrator.governance.permission_wording import NEEDS, denial_in_words
from tests.conftest import ensure_roles


def test_a_refusal_says_what_was_refused_and_which_role_allows_it():
    assert denial_in_words("orchestrator.launch_run") == (
        "You don't have permission to launch runs; ask an admin for the Launcher role."
    )
    assert denial_in_words("orchestrator.decide_checkpoint") == (
        "You don't have permission to approve or reject plans and checkpoints; ask an admin for the Approver role."
    )


def test_a_permission_without_words_is_not_named():
    said = denial_in_words("orchestrator.change_agent")
    assert "orchestrator" not in said and "change_agent" not in said
    assert said == "You don't have permission to do this; ask an admin for a role that allows it."


@pytest.mark.django_db
def test_each_role_named_holds_the_permission_it_is_named_for():
    """The roles are groups that a migration makes (0006_roles): a role renamed there or losing the
    permission would send people asking for the wrong one."""
    ensure_roles()
    for permission, needed in NEEDS.items():
        codename = permission.split(".")[1]
        role = Group.objects.get(name=needed.role)
        assert role.permissions.filter(codename=codename, content_type__app_label="orchestrator").exists(), permission
