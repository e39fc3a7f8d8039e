"""Strict readers for settings that come from environment variables.

A value the reader does not understand stops start-up with ImproperlyConfigured naming the
variable and what it accepts: `GLASSBOX_HTTPS=ture` must not silently turn HSTS and secure
cookies off. An unset or empty variable takes the default.
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in TRUE_WORDS:
        return True
    if value.lower() in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean: use one of {', '.join(TRUE_WORDS)} (on) or {', '.join(FALSE_WORDS)} (off)"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a whole number") from None
    _check_minimum(name, value, number, minimum)
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    _check_minimum(name, value, number, minimum)
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(name)
    if value is None:
        return default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}")
    return value


def _check_minimum(name: str, raw: str, number: float, minimum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} is below the smallest allowed value, {minimum}")


def env_decimal(name: str, default: str, *, minimum: Decimal | None = None) -> Decimal:
    value = _raw(name)
    if value is None:
        return Decimal(default)
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name}={value!r} is not a decimal number such as 0.50") from None
    if not number.is_finite():
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} is below the smallest allowed value, {minimum}")
    return number
