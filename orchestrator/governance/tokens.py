"""Per-user API tokens for scripts: issued once, stored hashed, revocable.

A token looks like `gbx_3f9a1c2e_<43 random characters>`. The part after `gbx_` up to the
second underscore is its prefix, stored in clear so that people can tell their tokens apart in
the admin; the whole token is stored only as its SHA-256 hash. A token has 256 random bits, so
a plain hash (no salt, no slow KDF) is enough: nobody can guess one, and a leaked database
gives no token back. The token is returned once by `issue` and never again.

Issuing and revoking write an Event (audit trail); using a token does not (it would flood the
log), but it stamps `last_used_at` at most once a minute.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator import events
from orchestrator.models import ApiToken
from orchestrator.wording import Refusal

TOKEN_PREFIX = "gbx_"
PREFIX_CHARS = 8
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenError(Refusal):
    """A token cannot be issued or revoked; the message says why, for people (`sentence` on its own)."""


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def issue(user, name: str, *, by=None) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the token text, which is never shown again.

    `by` is the person who issued it (an admin), when it is not the owner.
    """
    name = (name or "").strip()
    if not name:
        raise TokenError("a token needs a name saying what it is for, e.g. 'CI pipeline'")
    max_name = ApiToken._meta.get_field("name").max_length or 0
    if len(name) > max_name:
        raise TokenError(f"the token name is {len(name)} characters long; at most {max_name} are allowed")
    if not getattr(user, "is_active", False):
        raise TokenError(f"user {user.get_username()} is inactive: activate the account before issuing a token")
    with transaction.atomic():
        while True:
            prefix = secrets.token_hex(PREFIX_CHARS // 2)
            if not ApiToken.objects.filter(prefix=prefix).exists():
                break
        raw = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
        token = ApiToken.objects.create(user=user, name=name, prefix=prefix, token_hash=hash_token(raw))
        actor = by if by is not None else user
        events.record(
            "api_token.created",
            user=actor,
            message=f"API token {prefix}… ({name}) issued to {user.get_username()}",
            payload={"token": prefix, "name": name, "owner": user.get_username()},
        )
    return token, raw


def revoke(token: ApiToken, *, by=None) -> bool:
    """Revoke a token (from now on it authenticates nobody). False if it was revoked already."""
    with transaction.atomic():
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if changed:
            token.refresh_from_db()
            events.record(
                "api_token.revoked",
                user=by,
                message=f"API token {token.prefix}… ({token.name}) of {token.user.get_username()} revoked",
                payload={"token": token.prefix, "name": token.name, "owner": token.user.get_username()},
            )
    return bool(changed)


def authenticate(raw: str | None):
    """The active user a token belongs to, or None (unknown, malformed or revoked token, inactive user)."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(raw), revoked_at__isnull=True).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
    return token.user


def describe_refused(raw: str | None) -> str:
    """Who a refused bearer token claims to be, for the audit log ("" when it is no token of ours).

    Names the token by its prefix (never the secret part) and says why it was refused, so that a
    script still using a revoked token can be found: "API token 3f9a1c2e… (revoked, of alice)".
    """
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return ""
    prefix = raw[len(TOKEN_PREFIX) :].split("_", 1)[0][:PREFIX_CHARS]
    token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(raw)).first()
    if token is None:
        return f"API token {prefix}… (unknown)"
    owner = token.user.get_username()
    if token.revoked_at is not None:
        return f"API token {token.prefix}… (revoked, of {owner})"
    if not token.user.is_active:
        return f"API token {token.prefix}… (of {owner}, an inactive user)"
    return f"API token {token.prefix}… (of {owner})"
