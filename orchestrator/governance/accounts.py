"""Logins that Glassbox itself creates, and the roles it gives them, as audited changes.

`seed_demo` makes the demo's people (a superuser and an approver), and the admin's pages for logins
and roles (orchestrator/admin/users.py) add, change and delete them: the audit log must say who
created each login, who gave it which role or made it a superuser, and who gave a role which
permission, as it does for agents and provider limits, or it would show people able to approve
runs with no record of where they came from. Passwords never reach the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


# --- Changes made in the admin ------------------------------------------------------------------
# What the audit log keeps of a login: who it is and what it may do. Never its password: a change
# of it is recorded as such, with no value.
AUDITED_FIELDS = ("username", "email", "first_name", "last_name", "is_active", "is_staff", "is_superuser")
LABELS = {
    "password_login": "password login",
    "is_active": "active",
    "is_staff": "staff",
    "is_superuser": "superuser",
    "first_name": "first name",
    "last_name": "last name",
}


def _permission_names(permissions) -> list[str]:
    return sorted(
        f"{app}.{codename}" for app, codename in permissions.values_list("content_type__app_label", "codename")
    )


def standing(account: User) -> dict[str, Any]:
    """A login's audited fields, whether it can log in with a password (never the password), its
    roles (group names) and its own permissions, as the log shows them."""
    values: dict[str, Any] = {name: getattr(account, name) for name in AUDITED_FIELDS}
    values["password_login"] = account.has_usable_password()
    values["roles"] = sorted(account.groups.values_list("name", flat=True))
    values["permissions"] = _permission_names(account.user_permissions)
    return values


def _change_text(name: str, old, new) -> str:
    """One change in words: "superuser: no → yes", "roles: + Approver − Viewer"."""
    label = LABELS.get(name, name)
    if isinstance(new, list):
        moves = [f"+ {item}" for item in new if item not in old] + [f"− {item}" for item in old if item not in new]
        return f"{label}: {' '.join(moves)}"
    if isinstance(new, bool):
        return f"{label}: {'yes' if old else 'no'} → {'yes' if new else 'no'}"
    return f"{label}: {old or '(empty)'} → {new or '(empty)'}"


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, list], str]:
    """What changed, as {name: [old, new]}, and in words ("" when nothing did)."""
    changes = {name: [before[name], after[name]] for name in after if before[name] != after[name]}
    return changes, "; ".join(_change_text(name, old, new) for name, (old, new) in changes.items())


def role_standing(role: Group) -> dict[str, Any]:
    """A role's name, its permissions and who holds it, as the log shows them (a role deleted
    takes its permissions from its holders: the log says from whom)."""
    return {
        "name": role.name,
        "permissions": _permission_names(role.permissions),
        "holders": sorted(role.user_set.values_list("username", flat=True)),
    }


@dataclass(frozen=True)
class Kept:
    """How the audit log keeps one kind of thing the admin changes: logins or roles."""

    family: str  # the events' family: "user" -> user.created, user.changed, user.deleted
    key: str  # the payload's name for what it is about
    standing: Callable[[Any], dict[str, Any]]
    name: Callable[[Any], str]
    noun: Callable[[Any], str]  # what a creation calls it: "superuser", "user", "role"

    def saved(self, obj, before: dict[str, Any] | None, *, user) -> None:
        """`<family>.created` for one just added (`before` None), else `<family>.changed` with each
        change (old, new) in its payload and in words; nothing when nothing the log keeps changed."""
        after = self.standing(obj)
        name = self.name(obj)
        if before is None:
            message = f"{self.noun(obj)} {name} created"
            events.record(f"{self.family}.created", user=user, message=message, payload=after)
            return
        changes, words = _changes(before, after)
        if changes:
            events.record(
                f"{self.family}.changed",
                user=user,
                message=f"{self.family} {name} changed: {words}",
                payload={self.key: name, "changes": changes},
            )

    def deleted(self, obj, *, user) -> None:
        """`<family>.deleted`, with what it was and could do."""
        message = f"{self.family} {self.name(obj)} deleted"
        events.record(f"{self.family}.deleted", user=user, message=message, payload=self.standing(obj))


LOGINS = Kept(
    "user", "username", standing, lambda a: a.get_username(), lambda a: "superuser" if a.is_superuser else "user"
)
ROLES = Kept("role", "role", role_standing, lambda r: r.name, lambda r: "role")


def record_password_changed(account: User, *, user) -> None:
    """`user.password_changed`: who changed it and whether it can still log in with one; no value."""
    username = account.get_username()
    usable = account.has_usable_password()
    # The admin's password page also turns password login off ("Disable password-based
    # authentication"): say so, not "changed".
    message = f"password of user {username} changed" if usable else f"password login of user {username} disabled"
    events.record(
        "user.password_changed",
        user=user,
        message=message,
        payload={"username": username, "password_login": usable},
    )
