"""The base layout: header, CSRF for htmx, vendored scripts only, nothing the CSP would refuse."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

VENDOR = ROOT / "static" / "vendor"


def test_vendored_htmx_is_2_0_with_the_htmx_2_websocket_extension():
    htmx = (VENDOR / "htmx" / "htmx.min.js").read_text()
    assert re.search(r'version:"2\.0\.\d+"', htmx), "static/vendor/htmx/htmx.min.js is not htmx 2.0.x"
    assert 'htmx.defineExtension("ws"' in (VENDOR / "htmx-ext-ws" / "ws.min.js").read_text()
    readme = (VENDOR / "README.md").read_text()
    version = re.search(r'version:"(2\.0\.\d+)"', htmx).group(1)
    assert f"| {version} |" in readme, "static/vendor/README.md does not record the vendored htmx version"
    for licence in (VENDOR / "htmx" / "LICENSE", VENDOR / "htmx-ext-ws" / "LICENSE"):
        assert "Zero" in licence.read_text()


@pytest.mark.parametrize("url", ["/runs/", "/runs/new/", "/approvals/", "/accounts/login/"])
def test_pages_carry_no_inline_script_handler_or_style(client, personas, url):
    if url != "/accounts/login/":
        client.force_login(personas["launcher"])
        personas["launcher"].groups.add(personas["approver"].groups.get())
    html = client.get(url).text
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert re.findall(r"\son[a-z]+\s*=", html) == []
    assert "hx-on" not in html and "javascript:" not in html
    assert re.findall(r"\sstyle\s*=", html) == []
    assert re.findall(r"<style", html) == []
    assert "//cdn" not in html and "https://" not in html


def test_the_header_for_someone_who_may_do_everything(client, personas):
    user = personas["launcher"]
    user.groups.add(personas["approver"].groups.get())
    user.is_staff = True
    user.save()
    client.force_login(user)
    html = client.get("/runs/").text
    assert re.search(r'<body hx-headers=\'\{"X-CSRFToken": "[A-Za-z0-9]{64}"\}\'', html)
    assert '<script src="/static/vendor/htmx/htmx.min.js" defer></script>' in html
    assert '<script src="/static/vendor/htmx-ext-ws/ws.min.js" defer></script>' in html
    assert '"includeIndicatorStyles": false' in html
    for link in ('href="/runs/"', 'href="/plans/"', 'href="/runs/new/"', 'href="/approvals/"', 'href="/admin/"'):
        assert link in html
    assert "Log out" in html and ">launcher<" in html


def test_the_header_for_a_viewer_has_only_what_they_may_use(client, personas):
    client.force_login(personas["viewer"])
    html = client.get("/runs/").text
    assert 'href="/runs/new/"' not in html and 'href="/approvals/"' not in html and 'href="/admin/"' not in html
    assert "Log out" in html


def test_the_login_page_has_no_navigation(client):
    html = client.get("/accounts/login/").text
    assert "Log out" not in html and 'href="/runs/new/"' not in html
    assert 'name="username"' in html and 'name="password"' in html
