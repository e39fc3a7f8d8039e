"""Secrets stored by the registry (a tool server's declared environment), encrypted at rest.

A stdio tool server may need a credential in its environment (``--env API_TOKEN=...``). The
value has to be stored, since workers start the server long after it was registered, but it is
stored encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from the ``cryptography`` package) under
a key derived from Django's ``SECRET_KEY``: a database dump or backup alone does not reveal it.
Rotating ``SECRET_KEY`` keeps old values readable as long as the old key is listed in
``SECRET_KEY_FALLBACKS``; values are re-sealed with the current key whenever they are saved.

Only names are ever shown: the admin, the commands, the audit log and its export list
``NAME=••••``; the tool client masks the values in any text it passes on (a server's error
output, ``orchestrator.tools.sessions.redact``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from orchestrator.tools.sessions import MASK

_CONTEXT = b"glassbox/tool-server-env/v1:"


class SecretsUnreadable(Exception):
    """The stored value was sealed with a key that is neither SECRET_KEY nor a fallback."""


def _fernet(secret_key: str) -> Fernet:
    digest = hashlib.sha256(_CONTEXT + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _keys() -> MultiFernet:
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_fernet(key) for key in keys])


def seal(values: Mapping[str, str]) -> str:
    """``values`` encrypted as one token ("" when there is nothing to keep)."""
    if not values:
        return ""
    return _keys().encrypt(json.dumps(dict(values), sort_keys=True).encode()).decode()


def unseal(token: str) -> dict[str, str]:
    if not token:
        return {}
    try:
        return json.loads(_keys().decrypt(token.encode()))
    except InvalidToken:
        raise SecretsUnreadable(
            "the stored environment cannot be decrypted: SECRET_KEY changed and the old key is not in "
            "SECRET_KEY_FALLBACKS; add it back, or register the server's environment again"
        ) from None


def masked(names: Iterable[str]) -> str:
    """``A=••••, B=••••``: what people see of a declared environment."""
    return ", ".join(f"{name}={MASK}" for name in names)
