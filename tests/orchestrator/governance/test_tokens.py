"""API tokens: issued once, stored hashed, revocable, and the create_api_token command."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from orchestrator.governance import tokens
from orchestrator.models import ApiToken, Event


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice")


def test_a_token_is_stored_only_as_its_sha256(alice):
    token, raw = tokens.issue(alice, "CI pipeline")
    assert raw.startswith(f"gbx_{token.prefix}_") and len(raw) > 40
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    row = ApiToken.objects.values().get(pk=token.pk)
    assert all(raw not in str(value) for value in row.values())


def test_issuing_is_audited_without_the_token(alice):
    admin = User.objects.create_user("root")
    token, raw = tokens.issue(alice, "CI pipeline", by=admin)
    event = Event.objects.get(type="api_token.created")
    assert event.actor_user == admin
    assert event.payload == {"token": token.prefix, "name": "CI pipeline", "owner": "alice"}
    assert raw not in event.message and raw not in str(event.payload)


def test_two_tokens_differ(alice):
    (_, first), (_, second) = tokens.issue(alice, "a"), tokens.issue(alice, "b")
    assert first != second


def test_authenticate_answers_the_owner_of_a_valid_token(alice):
    _, raw = tokens.issue(alice, "ci")
    assert tokens.authenticate(raw) == alice


@pytest.mark.parametrize("guess", [None, "", "gbx_", "Bearer x", "gbx_00000000_wrong", "x" * 500])
def test_authenticate_refuses_anything_else(alice, guess):
    tokens.issue(alice, "ci")
    assert tokens.authenticate(guess) is None


def test_a_revoked_token_authenticates_nobody_and_revoking_is_audited(alice):
    token, raw = tokens.issue(alice, "ci")
    assert tokens.revoke(token, by=alice) is True
    assert tokens.authenticate(raw) is None
    token.refresh_from_db()
    assert token.revoked_at is not None and not token.is_active
    event = Event.objects.get(type="api_token.revoked")
    assert event.actor_user == alice and event.payload["token"] == token.prefix
    assert tokens.revoke(token, by=alice) is False
    assert Event.objects.filter(type="api_token.revoked").count() == 1


def test_the_token_of_an_inactive_user_authenticates_nobody(alice):
    _, raw = tokens.issue(alice, "ci")
    alice.is_active = False
    alice.save()
    assert tokens.authenticate(raw) is None


def test_last_used_is_stamped_at_most_once_a_minute(alice):
    token, raw = tokens.issue(alice, "ci")
    tokens.authenticate(raw)
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    tokens.authenticate(raw)
    token.refresh_from_db()
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    tokens.authenticate(raw)
    token.refresh_from_db()
    assert token.last_used_at > first - timedelta(minutes=1)


@pytest.mark.parametrize(
    "name, message",
    [("", "a token needs a name"), ("   ", "a token needs a name"), ("x" * 101, "at most 100 are allowed")],
)
def test_issue_refuses_a_missing_or_long_name(alice, name, message):
    with pytest.raises(tokens.TokenError, match=message):
        tokens.issue(alice, name)
    assert not ApiToken.objects.exists()


def test_issue_refuses_an_inactive_user(alice):
    alice.is_active = False
    alice.save()
    with pytest.raises(tokens.TokenError, match="user alice is inactive"):
        tokens.issue(alice, "ci")


def test_the_command_prints_the_token_once_on_stdout(alice):
    out, err = StringIO(), StringIO()
    call_command("create_api_token", "alice", "CI pipeline", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert "\n" not in raw and tokens.authenticate(raw) == alice
    assert "not shown again" in err.getvalue() and raw not in err.getvalue()
    assert ApiToken.objects.get().name == "CI pipeline"


def test_the_command_names_an_unknown_user(db):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_api_token", "nobody", "ci", stdout=StringIO(), stderr=StringIO())


def test_the_command_reports_a_refusal_in_words(alice):
    with pytest.raises(CommandError, match="^A token needs a name"):
        call_command("create_api_token", "alice", " ", stdout=StringIO(), stderr=StringIO())
