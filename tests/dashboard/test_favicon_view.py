"""GET /favicon.ico: pages that name no icon (the admin's, the login's) get the dashboard's."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_favicon_ico_sends_anyone_to_the_dashboards_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("dashboard/favicon.svg")
    assert finders.find("dashboard/favicon.svg"), "the icon it sends to exists"
