"""Logins that Glassbox itself creates, and the roles it gives them, as audited changes.

`seed_demo` makes the demo's people (a superuser and an approver): the audit log must say who
created each login and who gave it which role, as it does for agents and provider limits, or it
would show people able to approve runs with no record of where they came from. Passwords never
reach the log.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import transaction

from orchestrator import events


def create_user(
    username: str, *, email: str, password: str, superuser: bool = False, user=None, actor: str = ""
) -> User:
    """Create a login (a superuser when `superuser`) and record `user.created`. `actor` names who
    created it when no user did (the command line: `console.cli_actor()`)."""
    model = get_user_model()
    with transaction.atomic():
        if superuser:
            account = model.objects.create_superuser(username=username, email=email, password=password)
        else:
            account = model.objects.create_user(username=username, email=email, password=password)
        kind = "superuser" if superuser else "user"
        events.record(
            "user.created",
            user=user,
            actor_name=actor,
            message=f"{kind} {username} created",
            payload={"username": username, "superuser": superuser, "staff": account.is_staff},
        )
    return account


def grant_role(account: User, role: Group, *, user=None, actor: str = "") -> bool:
    """Give `account` the role `role` (a group) and record `user.role_granted`; False, and nothing
    recorded, when it already held it."""
    with transaction.atomic():
        if account.groups.filter(pk=role.pk).exists():
            return False
        account.groups.add(role)
        username = account.get_username()
        events.record(
            "user.role_granted",
            user=user,
            actor_name=actor,
            message=f"user {username} given the {role.name} role",
            payload={"username": username, "role": role.name},
        )
    return True
