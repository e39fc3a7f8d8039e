"""The error pages in Chromium, at 1280 px and on a phone: a refused page (403) and an unknown run
(404) in the site's look, saying what happened in words and leading back to the runs.

This module's daphne runs with DEBUG off, as a deployment does: with DEBUG on (the default of
`make run`) Django answers a 404 with its own debug page, whatever the site's template says.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import expect

from tests.browser.conftest import BROWSER_PASSWORD, browser_password_hash, log_in
from tests.browser.test_narrow import PHONE, overflow

pytestmark = [pytest.mark.browser]

WIDE = {"width": 1280, "height": 860}


@pytest.fixture(scope="module")
def daphne_env() -> dict[str, str]:
    return {"DEBUG": "0", "SECRET_KEY": "glassbox-browser-test-secret-key-not-for-production"}


@pytest.fixture
def viewer(transactional_db) -> User:
    """A user who may see runs but not launch them."""
    user = User.objects.create(username="viewer", password=browser_password_hash())
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="orchestrator", codename="view_run"))
    return user


def test_a_refused_page_and_an_unknown_run_say_so_in_the_sites_look(page, viewer, screenshot):
    log_in(page, viewer.username, BROWSER_PASSWORD)
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        response = page.goto("/runs/new/")
        assert response is not None and response.status == 403
        expect(page.get_by_role("heading", name="You can't do this")).to_be_visible()
        expect(
            page.get_by_text("You don't have permission to launch runs; ask an admin for the Launcher role.")
        ).to_be_visible()
        expect(page.locator("body")).not_to_contain_text("orchestrator.launch_run")
        expect(page.get_by_role("navigation", name="Main")).to_be_visible()
        assert overflow(page) == [], f"at {viewport['width']} px"
        screenshot(page, f"403-{viewport['width']}")

        response = page.goto("/runs/999999/")
        assert response is not None and response.status == 404
        expect(page.get_by_role("heading", name="There is nothing here")).to_be_visible()
        assert overflow(page) == [], f"at {viewport['width']} px"
        screenshot(page, f"404-{viewport['width']}")
        page.get_by_role("link", name="Go to the runs").click()
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    # The browser logs each 4xx answer as a failed resource: expected here.
    page.js_problems[:] = [p for p in page.js_problems if "status of 40" not in p]
