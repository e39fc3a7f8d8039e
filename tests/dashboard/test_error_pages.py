"""The error pages a person meets: 403, 404 and 500 in the site's look, in words a person
understands, with a way back to the runs; never the internal name of a permission."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error

from orchestrator.engine import runs

pytestmark = pytest.mark.django_db

LAUNCH_REFUSED = "You don&#x27;t have permission to launch runs; ask an admin for the Launcher role."


def assert_site_page(html: str) -> None:
    """The site's page: its stylesheet, its brand, and a way on to the runs."""
    assert "dashboard/base.css" in html
    assert 'class="brand"' in html
    assert 'href="/runs/">Go to the runs</a>' in html


def test_a_refused_page_says_what_was_refused_and_which_role_allows_it(client, personas):
    client.force_login(personas["viewer"])
    response = client.get("/runs/new/")
    assert response.status_code == 403
    html = response.content.decode()
    assert LAUNCH_REFUSED in html
    assert "orchestrator.launch_run" not in html
    assert_site_page(html)
    assert 'aria-label="Main"' in html  # the viewer's navigation is there


def test_a_refused_htmx_action_answers_the_sentence_alone_for_the_message_line(
    client, personas, make_plan, demo_agents
):
    run = runs.launch(make_plan({"a": ("researcher", [])}), budget_usd="1", require_plan_approval=True)
    client.force_login(personas["viewer"])
    response = client.post(f"/runs/{run.pk}/cancel/", HTTP_HX_REQUEST="true")
    assert response.status_code == 403
    assert response.content.decode() == (
        "You don't have permission to pause, resume or cancel runs, or retry and skip tasks; "
        "ask an admin for the Launcher role."
    )


def test_an_unknown_run_is_a_page_not_found_in_the_sites_look(client, personas, settings):
    settings.DEBUG = False  # with DEBUG on Django shows its own debug page, whatever the template
    client.force_login(personas["viewer"])
    response = client.get("/runs/999999/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing here" in html
    assert "No page is at this address" in html
    assert "URLconf" not in html and "No Run matches" not in html
    assert_site_page(html)


def test_the_server_error_page_needs_no_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = server_error(RequestFactory().get("/runs/1/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on the server" in html
    assert_site_page(html)
    assert 'aria-label="Main"' not in html  # no user: no navigation
