"""Security (DESIGN §6): CSP and headers, CSRF on every form, untrusted agent output, the API key
never shown or logged, request size limits, and the production profile's settings (checked in
subprocesses: the settings module decides at import time)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.views.debug import SafeExceptionReporterFilter

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.governance import tokens
from orchestrator.models import Event, TaskRun
from tests.dashboard.test_permissions import VIEWS, view_url

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-api03-THIS-MUST-NEVER-LEAK-0123456789abcdef"
STRONG_SECRET_KEY = "x7$Qm2!vLp9#Rz4@Tn8%Wk1^Yb6&Hc3*Jd5(Fg0)Se2-Ua7+Ix9=Ko4_Pl1"


@pytest.fixture
def superuser(db):
    return User.objects.create_superuser("root")


@pytest.fixture
def world(superuser, make_agent, make_plan, priced_limit):
    make_agent("researcher")
    plan = make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])})
    run = runs.launch(plan, launched_by=User.objects.create_user("someone"), require_plan_approval=True)
    return {
        "plan": plan.pk,
        "plan_id": plan.pk,
        "run_id": run.pk,
        "task_id": run.tasks.get(subtask__key="a").pk,
        "checkpoint_id": run.checkpoints.get().pk,
        "key": "a",
        "token": "no-such-draft",
        "number": 1,
        "name": "researcher",
    }


def dashboard_get_urls(world) -> list[str]:
    return [view_url(name, world) for name, (methods, _) in VIEWS.items() if "GET" in methods]


ADMIN_PAGES = [
    "admin:index",
    "admin:orchestrator_agent_changelist",
    "admin:orchestrator_agent_add",
    "admin:orchestrator_providerlimit_changelist",
    "admin:orchestrator_plan_changelist",
    "admin:orchestrator_run_changelist",
    "admin:orchestrator_taskrun_changelist",
    "admin:orchestrator_checkpoint_changelist",
    "admin:orchestrator_event_changelist",
    "admin:orchestrator_apitoken_changelist",
    "admin:orchestrator_apitoken_add",
]


def html_pages(client, world) -> dict[str, str]:
    """Every HTML page a superuser can open: dashboard views, the admin, the API docs, the login page."""
    urls = dashboard_get_urls(world) + [reverse(name) for name in ADMIN_PAGES] + ["/api/docs"]
    urls += [
        reverse("admin:orchestrator_run_change", args=[world["run_id"]]),
        reverse("admin:orchestrator_plan_change", args=[world["plan"]]),
    ]
    pages = {}
    for url in urls:
        response = client.get(url, follow=True)
        if response.get("Content-Type", "").startswith("text/html") and not response.streaming:
            pages[url] = response.content.decode()
    pages["/accounts/login/"] = Client().get(reverse("login")).content.decode()
    return pages


class Markup(HTMLParser):
    """Collects what a Content-Security-Policy of 'self' only would block or must know about."""

    def __init__(self):
        super().__init__()
        self.inline_scripts, self.external, self.handlers, self.style_attrs = [], [], [], []
        self.style_blocks = 0
        self.post_forms, self.csrf_fields = 0, 0
        self._script_open = False
        self._script_has_src = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name, value in attrs.items():
            if name.startswith("on"):
                self.handlers.append(f"<{tag} {name}>")
            if name == "style":
                self.style_attrs.append(f"<{tag} style={value!r}>")
            if name in ("src", "href", "action") and value and re.match(r"^(https?:)?//", value):
                self.external.append(value)
            if name in ("href", "src", "action") and value and value.strip().lower().startswith("javascript:"):
                self.handlers.append(f"<{tag} {name}=javascript:>")
        if tag == "script":
            self._script_open = True
            self._script_has_src = "src" in attrs or attrs.get("type") == "application/json"
        if tag == "style":
            self.style_blocks += 1
        if tag == "form" and (attrs.get("method") or "").lower() == "post":
            self.post_forms += 1
        if tag == "input" and attrs.get("name") == "csrfmiddlewaretoken":
            self.csrf_fields += 1

    def handle_data(self, data):
        if self._script_open and not self._script_has_src and data.strip():
            self.inline_scripts.append(data.strip()[:80])

    def handle_endtag(self, tag):
        if tag == "script":
            self._script_open = False


def parse(html: str) -> Markup:
    markup = Markup()
    markup.feed(html)
    return markup


# --- Headers -------------------------------------------------------------------------------------


def csp_directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/", "/api/openapi.json"])
def test_content_security_policy_allows_only_our_origin(db, url):
    response = Client().get(url)
    directives = csp_directives(response)
    assert directives["script-src"] == ["'self'"]
    assert directives["style-src"] == ["'self'"]
    assert directives["default-src"] == ["'self'"]
    assert directives["connect-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


def test_security_headers(db):
    response = Client().get(reverse("login"))
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


def test_pages_need_nothing_the_policy_forbids(superuser, world):
    """No inline script, event handler, javascript: URL, inline style or third-party resource."""
    client = Client()
    client.force_login(superuser)
    pages = html_pages(client, world)
    assert len(pages) >= 20
    problems = {}
    for url, html in pages.items():
        markup = parse(html)
        found = markup.inline_scripts + markup.handlers + markup.style_attrs + markup.external
        if markup.style_blocks:
            found.append(f"{markup.style_blocks} <style> block(s)")
        if found:
            problems[url] = found
    assert not problems, problems


def test_every_post_form_carries_a_csrf_token(superuser, world):
    client = Client()
    client.force_login(superuser)
    pages = html_pages(client, world)
    counted = 0
    for url, html in pages.items():
        markup = parse(html)
        assert markup.csrf_fields >= markup.post_forms, (
            f"{url}: {markup.post_forms} POST forms, {markup.csrf_fields} CSRF tokens"
        )
        counted += markup.post_forms
    assert counted >= 5  # the run page's controls, the admin's forms, the login form


def test_posts_without_the_csrf_token_are_refused(personas, world):
    from orchestrator.models import Run

    browser = Client(enforce_csrf_checks=True)
    assert browser.post(reverse("login"), {"username": "x", "password": "y"}).status_code == 403
    browser.force_login(personas["launcher"])
    run = Run.objects.get(pk=world["run_id"])
    assert browser.post(reverse("run_cancel", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_APPROVAL
    denials = list(Event.objects.filter(type="access.denied", payload__permission="csrf").order_by("id"))
    assert [(d.actor_name, d.payload["action"]) for d in denials] == [
        ("anonymous", "POST /accounts/login/"),
        ("launcher", f"POST /runs/{run.pk}/cancel/"),
    ]


# --- Untrusted agent output ----------------------------------------------------------------------

ATTACKS = [
    "<script>alert('x1')</script>",
    "<img src=x onerror=\"alert('x2')\">",
    "[click](javascript:alert('x3'))",
    "<a href=\"javascript:alert('x4')\">link</a>",
    "<iframe src=//evil.example/x5></iframe>",
    '<div style="background:url(//evil.example/x6)">styled</div>',
    "<svg onload=alert('x7')></svg>",
]


def test_agent_output_is_sanitised_wherever_it_is_shown(superuser, world):
    output = "**bold claim**\n\n" + "\n\n".join(ATTACKS)
    TaskRun.objects.filter(pk=world["task_id"]).update(state="succeeded", output=output, summary=output, error=output)
    TaskRun.objects.filter(run_id=world["run_id"]).exclude(pk=world["task_id"]).update(state="succeeded", output=output)
    client = Client()
    client.force_login(superuser)
    urls = [view_url(name, world) for name in ("run_detail", "run_task", "run_task_output")]
    urls.append(view_url("run_detail", world) + f"?task={world['task_id']}")
    for url in urls:
        html = client.get(url, HTTP_HX_REQUEST="true").content.decode()
        assert "<strong>bold claim</strong>" in html, f"{url} did not render the output"
        markup = parse(html)
        assert not markup.handlers, (url, markup.handlers)
        for marker in ("x1", "x2", "x3", "x4", "x5", "x6", "x7"):
            assert not re.search(
                rf"<(script|img|iframe|svg)[^>]*>[^<]*{marker}|<[^>]+(onerror|onload|href=\"javascript)[^>]*{marker}",
                html,
            ), (url, marker)
        assert "evil.example" not in "".join(markup.external), url
        assert 'style="background' not in html


# --- Secrets -------------------------------------------------------------------------------------


def test_the_api_key_never_appears_in_a_response_or_a_log(superuser, world, settings, monkeypatch, caplog):
    import logging

    settings.ANTHROPIC_API_KEY = SECRET
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.force_login(superuser)
    _, raw = tokens.issue(superuser, "scan")
    bodies = list(html_pages(client, world).values())
    for url in [
        "/api/runs",
        f"/api/runs/{world['run_id']}",
        f"/api/runs/{world['run_id']}/events",
        "/api/checkpoints",
        "/api/agents",
        "/api/openapi.json",
        reverse("health"),
    ]:
        response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {raw}")
        bodies.append(response.content.decode() + str(dict(response.items())))
    for name in ("run_download_md", "run_download_json"):
        bodies.append(client.get(view_url(name, world)).content.decode())
    bodies.append(client.get(reverse("admin:orchestrator_event_export", args=["jsonl"])).getvalue().decode())
    assert len(bodies) > 25
    assert not [body[:200] for body in bodies if SECRET in body or SECRET[:20] in body]
    assert SECRET not in caplog.text


def test_error_reports_mask_the_api_key(settings):
    settings.ANTHROPIC_API_KEY = SECRET
    safe = SafeExceptionReporterFilter().get_safe_settings()
    assert safe["ANTHROPIC_API_KEY"] != SECRET and set(safe["ANTHROPIC_API_KEY"]) == {"*"}


# --- Request sizes -------------------------------------------------------------------------------


def test_upload_limits_fit_the_plan_limit(settings):
    # a 5 MB plan as a JSON string, every newline escaped, still fits an API body
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE >= 2 * plans.MAX_PLAN_BYTES
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= 16 * 1024 * 1024
    assert plans.MAX_PLAN_BYTES <= settings.FILE_UPLOAD_MAX_MEMORY_SIZE <= 8 * 1024 * 1024


# --- The production profile (subprocesses) -------------------------------------------------------


def run_django(code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "GLASSBOX_", "SECRET_KEY", "DEBUG"))}
    base.update({"DJANGO_SETTINGS_MODULE": "glassbox.settings", "PYTHONPATH": str(ROOT)})
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def test_refuses_to_start_with_debug_off_and_the_default_secret_key():
    result = run_django("import django; django.setup()", DEBUG="0")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "DEBUG is off but SECRET_KEY is the built-in development key: set SECRET_KEY." in result.stderr


PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": STRONG_SECRET_KEY,
    "ALLOWED_HOSTS": "glassbox.example.com",
    "GLASSBOX_HTTPS": "1",
    "DATABASE_URL": "postgres://glassbox:secret@127.0.0.1:5432/glassbox",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}
CHECK_DEPLOY = "import sys; from django.core.management import call_command; import django; django.setup(); call_command('check', deploy=True, fail_level='WARNING')"


def test_check_deploy_is_clean_in_the_production_profile():
    result = run_django(CHECK_DEPLOY, **PRODUCTION)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "System check identified no issues" in result.stdout + result.stderr


def test_check_deploy_warns_without_https():
    """The same check fails when HTTPS is off: the clean result above is due to GLASSBOX_HTTPS."""
    result = run_django(CHECK_DEPLOY, **{**PRODUCTION, "GLASSBOX_HTTPS": "0"})
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, check


def test_https_setting_turns_on_redirect_hsts_and_secure_cookies():
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, getattr(s, 'SECURE_PROXY_SSL_HEADER', None)]))"
    )
    on = run_django(code, **PRODUCTION, GLASSBOX_BEHIND_PROXY="1")
    assert on.returncode == 0, on.stderr[-2000:]
    assert json.loads(on.stdout) == [True, 31536000, True, True, True, ["HTTP_X_FORWARDED_PROTO", "https"]]
    off = run_django(code, **{**PRODUCTION, "GLASSBOX_HTTPS": "0"})
    assert json.loads(off.stdout) == [False, 0, True, False, False, None]


# --- Static files (served by daphne through glassbox.asgi) ----------------------------------------


def static_get(path: str) -> tuple[int, dict[str, str]]:
    from asgiref.sync import async_to_sync
    from asgiref.testing import ApplicationCommunicator

    from glassbox.asgi import application

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost")],
    }

    async def get():
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(10)
        while (await communicator.receive_output(10)).get("more_body"):
            pass
        return start

    start = async_to_sync(get)()
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}


@pytest.mark.parametrize("path", ["/static/../../../etc/passwd", "/static/dashboard/../../../../etc/passwd"])
def test_a_static_path_that_escapes_the_static_folders_is_404(db, path):
    status, _ = static_get(path)
    assert status == 404


def test_static_files_carry_the_pages_security_headers(db):
    status, headers = static_get("/static/dashboard/base.css")
    assert status == 200 and headers["content-type"].startswith("text/css")
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in headers["content-security-policy"]
