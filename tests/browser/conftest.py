"""Browser tests: Debian's Chromium driven by Playwright against a live daphne server.

Fixtures:

- `daphne_server`: `python -m daphne` in a subprocess against the test database (the same
  DATABASE_URL hand-over as the `qcluster` fixture), on a free port; `.url`, `.logs()`. One per
  module (`module_daphne`, its environment extended by the `daphne_env` fixture).
- `cluster`: one real qcluster (the shared `qcluster` fixture), started and seen running.
- `browser_user`: a user with every dashboard permission (view, launch, control, decide).
- `chromium`: a Playwright Chromium browser (headless, /usr/bin/chromium), one per module. A
  missing Chromium FAILS the test, naming `make browser`; it never skips.
- `page`: a fresh page on the live server (base_url set). A JavaScript error, a console error
  (a Content-Security-Policy violation, a failed script) or a failed test leaves a screenshot
  in test-artifacts/ and the JavaScript problems fail the test.
- `logged_in_page`: `page`, logged in as `browser_user` through the login form.
- `screenshot`: `screenshot(page, "name")` saves test-artifacts/<test>/<name>.png.

Each browser test is marked `browser`; mark it also `processes` when it uses `cluster`.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Permission, User

from orchestrator.engine.cluster import cluster_is_running
from tests.conftest import ROOT, child_env

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts"
VIEWPORT = {"width": 1280, "height": 860}
SERVER_START_TIMEOUT_S = 60.0
BROWSER_PASSWORD = "glassbox-browser-test-pass"
DASHBOARD_PERMISSIONS = ("view_run", "launch_run", "control_run", "decide_checkpoint")
# Playwright's sync API keeps an event loop current in the test's thread; the Django ORM calls
# the test itself makes (fixtures, assertions) are synchronous and safe, so while a browser is
# open the ORM's async-context guard is lifted for this process only (never for the children).
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


# --- Live server ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class DaphneServer:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT_S) -> None:
        """Until the login page answers 200; fails with daphne's output when it does not."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"daphne exited with code {self.process.returncode} on start:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as error:
                last = f"HTTP {error.code}"
            except OSError as error:
                last = str(error)
            time.sleep(0.2)
        pytest.fail(f"daphne did not answer on {self.url} within {timeout} s ({last}):\n{self.logs()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def daphne_env() -> dict[str, str]:
    """What the module's daphne gets in its environment besides `child_env()` (a module that
    needs more overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def module_daphne(django_db_setup, tmp_path_factory, daphne_env):
    """One daphne for the module's tests: starting one (a Python process importing Django and the
    project) took 3 to 6 s of each browser test's set-up. Each test still has its own data (the
    database is emptied after it) and its own browser context (cookies, storage)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    env = child_env(**daphne_env)
    env.pop(ASYNC_UNSAFE, None)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "glassbox.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DaphneServer(process, port, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def daphne_server(transactional_db, module_daphne):
    """daphne serving glassbox.asgi on a free port against this test's database (committed data:
    daphne reads it from another process)."""
    if module_daphne.process.poll() is not None:
        pytest.fail(f"daphne exited with code {module_daphne.process.returncode}:\n{module_daphne.logs()}")
    return module_daphne


@pytest.fixture
def cluster(qcluster):
    """One real qcluster with two workers, running (its stats visible) before the test goes on."""
    qcluster.workers = 2
    qcluster.start()
    deadline = time.monotonic() + 60
    while not cluster_is_running():
        if any(proc.poll() is not None for proc in qcluster.procs):
            pytest.fail(f"qcluster exited on start:\n{qcluster.logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"qcluster did not report running within 60 s:\n{qcluster.logs()}")
        time.sleep(0.2)
    return qcluster


# --- Users ---------------------------------------------------------------------------------------


@functools.cache
def browser_password_hash() -> str:
    """BROWSER_PASSWORD hashed once per process: hashing a password takes a noticeable time (0.4 s
    here), and daphne checks it again at each log-in."""
    return make_password(BROWSER_PASSWORD)


@pytest.fixture
def browser_user(transactional_db) -> User:
    """A user (not a superuser) holding every dashboard permission; password BROWSER_PASSWORD."""
    user = User.objects.create(username="browser", email="browser@example.com", password=browser_password_hash())
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="orchestrator", codename__in=DASHBOARD_PERMISSIONS)
    )
    return user


# --- Browser -------------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium (Debian's, through Playwright), one for the module's tests (each opens
    a context of its own: `page`). Missing Chromium fails the test."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: the browser tests need it. "
            "Run `make browser` (apt-get install chromium chromium-driver)."
        )
    from playwright.sync_api import sync_playwright

    previous = os.environ.get(ASYNC_UNSAFE)
    os.environ[ASYNC_UNSAFE] = "true"
    manager = sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        manager.stop()
        if previous is None:
            os.environ.pop(ASYNC_UNSAFE, None)
        else:
            os.environ[ASYNC_UNSAFE] = previous


def artifact_dir(node_name: str) -> Path:
    path = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", node_name)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def screenshot(request):
    """`screenshot(page, name)`: a full-page PNG in test-artifacts/<test>/<name>.png; returns its path."""

    def take(page, name: str) -> Path:
        path = artifact_dir(request.node.name) / f"{name}.png"
        # caret="initial": hiding the caret would inject a <style>, which the CSP refuses.
        page.screenshot(path=str(path), full_page=True, caret="initial")
        return path

    return take


@pytest.fixture
def page(request, chromium, daphne_server):
    """A new page on the live server. JavaScript errors and console errors fail the test."""
    context = chromium.new_context(base_url=daphne_server.url, viewport=VIEWPORT)
    context.set_default_timeout(15_000)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"on {page.url}: JavaScript error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(
                f"on {page.url}: console {message.type}: {message.text} ({message.location.get('url', '')})"
            )
            if message.type == "error"
            else None
        ),
    )
    page.js_problems = problems
    yield page
    failed = getattr(request.node, "report_call", None) is not None and request.node.report_call.failed
    if failed or problems:
        try:
            page.screenshot(path=str(artifact_dir(request.node.name) / "at-end.png"), full_page=True, caret="initial")
        except Exception:  # a page that cannot be captured must not hide the failure
            pass
    context.close()
    if problems and not failed:
        pytest.fail("the browser reported problems:\n" + "\n".join(problems) + f"\n\ndaphne:\n{daphne_server.logs()}")


def log_in(page, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


@pytest.fixture
def logged_in_page(page, browser_user):
    """`page`, logged in as `browser_user` through the login form, on the runs page."""
    log_in(page, browser_user.username, BROWSER_PASSWORD)
    return page
