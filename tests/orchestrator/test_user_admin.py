"""Logins and roles changed in the admin are on the audit log (orchestrator/admin/users.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.urls import reverse

from orchestrator.models import Event

PASSWORD = "Sturdy-Passphrase-4711"


@pytest.fixture
def root(client, db):
    user = User.objects.create_superuser("root")
    client.force_login(user)
    return user


def change_form(account: User, **changes) -> dict:
    form = {
        "username": account.username,
        "email": account.email,
        "first_name": account.first_name,
        "last_name": account.last_name,
        "date_joined_0": account.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": account.date_joined.strftime("%H:%M:%S"),
        "groups": [str(pk) for pk in account.groups.values_list("pk", flat=True)],
        "user_permissions": [],
        "is_active": "on" if account.is_active else "",
    }
    form.update(changes)
    return {name: value for name, value in form.items() if value != ""}


def test_adding_a_login_in_the_admin_is_audited_without_its_password(client, root):
    form = {"username": "bob", "usable_password": "true", "password1": PASSWORD, "password2": PASSWORD}
    response = client.post(reverse("admin:auth_user_add"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    event = Event.objects.get(type="user.created")
    assert event.actor_user == root and event.message == "user bob created"
    assert event.payload["username"] == "bob" and event.payload["is_superuser"] is False
    assert PASSWORD not in str(event.payload) and "password" not in event.payload


def test_making_a_login_a_superuser_and_an_approver_is_one_event_naming_both(client, root):
    bob = User.objects.create_user("bob", email="bob@example.com")
    approver = Group.objects.get_or_create(name="Approver")[0]
    form = change_form(bob, is_staff="on", is_superuser="on", groups=[str(approver.pk)])
    response = client.post(reverse("admin:auth_user_change", args=[bob.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    (event,) = Event.objects.filter(type="user.changed")
    assert event.actor_user == root
    assert event.message == "user bob changed: staff: no → yes; superuser: no → yes; roles: + Approver"
    assert event.payload["changes"] == {
        "is_staff": [False, True],
        "is_superuser": [False, True],
        "roles": [[], ["Approver"]],
    }


def test_saving_a_login_unchanged_records_nothing(client, root):
    bob = User.objects.create_user("bob")
    response = client.post(reverse("admin:auth_user_change", args=[bob.pk]), change_form(bob))
    assert response.status_code == 302
    assert not Event.objects.exists()


def test_a_password_changed_in_the_admin_is_audited_without_the_password(client, root):
    bob = User.objects.create_user("bob", password="old-Passphrase-1")
    url = reverse("admin:auth_user_password_change", args=[bob.pk])
    response = client.post(url, {"usable_password": "true", "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 302
    event = Event.objects.get(type="user.password_changed")
    assert event.actor_user == root and event.message == "password of user bob changed"
    bob.refresh_from_db()
    assert bob.check_password(PASSWORD)
    assert PASSWORD not in str(event.payload) and bob.password not in str(event.payload)


def test_a_refused_password_change_records_nothing(client, root):
    bob = User.objects.create_user("bob")
    url = reverse("admin:auth_user_password_change", args=[bob.pk])
    response = client.post(url, {"usable_password": "true", "password1": PASSWORD, "password2": "different"})
    assert response.status_code == 200
    assert not Event.objects.exists()


def test_disabling_password_login_in_the_admin_says_so(client, root):
    bob = User.objects.create_user("bob", password="old-Passphrase-1")
    url = reverse("admin:auth_user_password_change", args=[bob.pk])
    response = client.post(url, {"usable_password": "false", "unset-password": "1"})
    assert response.status_code == 302
    event = Event.objects.get(type="user.password_changed")
    assert event.message == "password login of user bob disabled"
    assert event.payload == {"username": "bob", "password_login": False}


def test_a_staff_user_refused_the_password_page_is_audited(client, db):
    target = User.objects.create_superuser("boss")
    staff = User.objects.create_user("staffer", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_user"))
    client.force_login(staff)
    url = reverse("admin:auth_user_password_change", args=[target.pk])
    assert client.get(url).status_code == 403
    assert (
        client.post(url, {"usable_password": "true", "password1": PASSWORD, "password2": PASSWORD}).status_code == 403
    )
    denials = Event.objects.filter(type="access.denied").order_by("id")
    assert [event.payload for event in denials] == [
        {"permission": "auth.change_user", "action": f"{method} {url}"} for method in ("GET", "POST")
    ]
    assert not Event.objects.filter(type="user.password_changed").exists()
    target.refresh_from_db()
    assert not target.check_password(PASSWORD)


def test_deleting_a_login_is_audited_with_what_it_could_do(client, root):
    bob = User.objects.create_user("bob", is_staff=True)
    response = client.post(reverse("admin:auth_user_delete", args=[bob.pk]), {"post": "yes"})
    assert response.status_code == 302
    event = Event.objects.get(type="user.deleted")
    assert event.actor_user == root and event.payload["username"] == "bob" and event.payload["is_staff"] is True
    assert not User.objects.filter(username="bob").exists()


def test_a_roles_permissions_changed_in_the_admin_are_audited(client, root):
    role = Group.objects.create(name="Night shift")
    decide = Permission.objects.get(codename="decide_checkpoint")
    form = {"name": "Night shift", "permissions": [str(decide.pk)]}
    response = client.post(reverse("admin:auth_group_change", args=[role.pk]), form)
    assert response.status_code == 302
    event = Event.objects.get(type="role.changed")
    assert event.actor_user == root
    assert event.message == "role Night shift changed: permissions: + orchestrator.decide_checkpoint"
    client.post(reverse("admin:auth_group_delete", args=[role.pk]), {"post": "yes"})
    assert Event.objects.get(type="role.deleted").payload == {
        "name": "Night shift",
        "permissions": ["orchestrator.decide_checkpoint"],
        "holders": [],
    }


@pytest.mark.parametrize("url", ["/accounts/password_change/", "/admin/password_change/"])
def test_a_person_changing_their_own_password_is_audited_without_it(client, db, url):
    staff = User.objects.create_user("staffy", password="old-Passphrase-1", is_staff=True)
    client.force_login(staff)
    wrong = {"old_password": "not-it", "new_password1": PASSWORD, "new_password2": PASSWORD}
    assert client.post(url, wrong).status_code == 200  # refused: nothing changed, nothing recorded
    assert not Event.objects.filter(type="user.password_changed").exists()
    form = {"old_password": "old-Passphrase-1", "new_password1": PASSWORD, "new_password2": PASSWORD}
    assert client.post(url, form).status_code == 302
    event = Event.objects.get(type="user.password_changed")
    assert event.actor_user == staff and event.message == "password of user staffy changed"
    staff.refresh_from_db()
    assert staff.check_password(PASSWORD) and PASSWORD not in str(event.payload)


def test_deleting_a_role_says_who_held_it(client, root):
    role = Group.objects.create(name="Night shift")
    User.objects.create_user("bob").groups.add(role)
    client.post(reverse("admin:auth_group_delete", args=[role.pk]), {"post": "yes"})
    assert Event.objects.get(type="role.deleted").payload["holders"] == ["bob"]


@pytest.mark.parametrize("url", ["/accounts/password_change/", "/admin/password_change/"])
def test_a_visitor_not_logged_in_is_sent_to_the_login_and_nothing_is_recorded(client, db, url):
    form = {"old_password": "x", "new_password1": PASSWORD, "new_password2": PASSWORD}
    response = client.post(url, form)
    assert response.status_code == 302 and "login" in response["Location"]
    assert not Event.objects.exists()
