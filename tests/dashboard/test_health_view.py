"""GET /health/: public, JSON, 200 when everything answers and 503 otherwise, nothing secret."""

from __future__ import annotations

import socket

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

SECRET = "s3cret-pa55word"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_health_answers_200_with_every_check_and_needs_no_login(client):
    response = client.get(reverse("health"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]
    body = response.json()
    assert body["status"] == "ok"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "broker": True,
        "channel_layer": True,
    }


def test_health_answers_head_but_refuses_writes(client):
    assert client.head(reverse("health")).status_code == 200
    assert client.post(reverse("health")).status_code == 405


def test_health_answers_503_naming_the_failed_check_and_nothing_secret(client, settings):
    port = free_port()
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://:{SECRET}@127.0.0.1:{port}/0"]},
        }
    }

    response = client.get(reverse("health"))

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["channel_layer"]["ok"] is False
    assert body["checks"]["channel_layer"]["error"] == "ConnectionError"
    assert body["checks"]["database"]["ok"] is True
    text = response.content.decode()
    assert SECRET not in text and str(port) not in text and "redis://" not in text


def test_a_plain_http_probe_is_answered_even_when_https_is_enforced(client, settings):
    # Load balancers probe each instance directly over HTTP; a redirect would read as "down".
    settings.SECURE_SSL_REDIRECT = True
    assert client.get(reverse("health")).status_code == 200
    assert client.get(reverse("home")).status_code == 301
