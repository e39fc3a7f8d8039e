"""Settings read from the environment: strict, so a typo stops start-up instead of turning a switch off."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from glassbox.env import env_bool, env_choice, env_decimal, env_float, env_int
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
    ],
)
def test_booleans_accept_the_usual_words(monkeypatch, raw, expected):
    monkeypatch.setenv("GLASSBOX_X", raw)
    assert env_bool("GLASSBOX_X", not expected) is expected


@pytest.mark.parametrize("raw", [None, ""])
def test_unset_or_empty_takes_the_default(monkeypatch, raw):
    if raw is None:
        monkeypatch.delenv("GLASSBOX_X", raising=False)
    else:
        monkeypatch.setenv("GLASSBOX_X", raw)
    assert env_bool("GLASSBOX_X", True) is True
    assert env_int("GLASSBOX_X", 7) == 7
    assert env_float("GLASSBOX_X", 1.5) == 1.5
    assert env_decimal("GLASSBOX_X", "0.50") == Decimal("0.50")


def test_a_misspelt_boolean_names_the_variable_and_the_accepted_words(monkeypatch):
    monkeypatch.setenv("GLASSBOX_HTTPS", "ture")
    with pytest.raises(ImproperlyConfigured) as error:
        env_bool("GLASSBOX_HTTPS", False)
    assert "GLASSBOX_HTTPS='ture'" in str(error.value)
    assert "true" in str(error.value) and "false" in str(error.value)


@pytest.mark.parametrize(
    "reader, raw, words",
    [
        (lambda: env_int("GLASSBOX_X", 1), "4.5", "not a whole number"),
        (lambda: env_int("GLASSBOX_X", 1, minimum=1), "0", "below the smallest allowed value, 1"),
        (lambda: env_float("GLASSBOX_X", 1.0), "fast", "not a number"),
        (lambda: env_float("GLASSBOX_X", 1.0), "nan", "not a finite number"),
        (lambda: env_float("GLASSBOX_X", 1.0, minimum=0), "-2", "below the smallest allowed value"),
        (lambda: env_decimal("GLASSBOX_X", "0.50"), "fifty cents", "not a decimal number"),
        (
            lambda: env_choice("GLASSBOX_X", "database", ("database", "redis")),
            "memcached",
            "not one of: database, redis",
        ),
    ],
)
def test_bad_numbers_and_choices_are_refused_with_the_problem_named(monkeypatch, reader, raw, words):
    monkeypatch.setenv("GLASSBOX_X", raw)
    with pytest.raises(ImproperlyConfigured) as error:
        reader()
    assert f"GLASSBOX_X={raw!r}" in str(error.value)
    assert words in str(error.value)


def test_start_up_stops_on_a_bad_security_switch():
    """What an operator sees: `manage.py check` fails at once and names the variable."""
    env = {"PATH": "/usr/bin:/bin", "GLASSBOX_HTTPS": "ture", "DJANGO_SETTINGS_MODULE": "glassbox.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "GLASSBOX_HTTPS='ture' is not a boolean" in done.stderr
