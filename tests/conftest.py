"""Shared fixtures: small agents and plans built in code, and real qcluster processes."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from orchestrator.models import Agent, Plan, ProviderLimit, Run

ROOT = Path(__file__).resolve().parent.parent


DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests that open no database connection `no_database`: they behave the same on both
    profiles, so the production pass (`make test-services`) leaves them out."""
    for item in items:
        uses_database = item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(item.fixturenames)
        if not uses_database:
            item.add_marker(pytest.mark.no_database)


# How long the pytest process may take to exit once it is done (its summary printed) before the
# watchdog below prints every thread's stack and ends it with status 1.
EXIT_WATCHDOG_S = 120


def pytest_sessionfinish(session, exitstatus) -> None:
    """The sockets the session's clusters were rung on (orchestrator/orm_broker.py) are removed."""
    from orchestrator.orm_broker import sweep

    sweep()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    """End a test process that does not exit: a thread left running (an event loop whose task
    ignores its cancellation, in a ThreadPoolExecutor the interpreter joins at exit) would hold CI
    until its 90-minute cut, with nothing in the log to say where.

    Armed in the process that runs pytest, not in its pytest-xdist workers: a worker done with its
    share stays up, idle, until the other workers finish theirs, which can take minutes; its
    watchdog then printed a false "Timeout (0:02:00)!" dump in a green run. A worker that does
    not exit is ended by that process when the session ends (execnet kills it after 10 s)."""
    if hasattr(config, "workerinput"):  # an xdist worker
        return
    faulthandler.dump_traceback_later(EXIT_WATCHDOG_S, exit=True)


def fast_latency(seconds: float = 0.2) -> dict:
    return {"latency": {"dist": "fixed", "seconds": seconds}}


class NoHost:
    """Where `run_attempt` keeps the attempt it runs: nowhere (no heartbeat, no live progress)."""

    def track(self, attempt) -> None:
        pass

    def untrack(self, attempt) -> None:
        pass

    async def succeed(self, claim, output, usage, *, keep: int) -> str:
        from orchestrator.engine import agent_runner, attempt_ends

        return await agent_runner.record(attempt_ends.complete, claim, output, usage, keep=keep)  # its own step


class Stopping(NoHost):
    """No host, but one that holds the attempt it runs (`attempt`) to stop it from the test's
    thread (`stop`, on the attempt's loop), as a host's heartbeat or shutdown does."""

    def track(self, attempt) -> None:
        import asyncio

        self.attempt, self.loop = attempt, asyncio.get_running_loop()

    def stop(self, reason: str) -> None:
        self.loop.call_soon_threadsafe(self.attempt.stop, reason)


def run_attempt(attempt_id: int) -> str:
    """Run one queued attempt in this process, as a worker's agent host runs it (claim, stream,
    record its end, advance its run), without the host's chaining or heartbeat. Returns the
    outcome in words."""
    from orchestrator import db_threads
    from orchestrator.engine import agent_runner, execution, scheduler

    outcome, claim = db_threads.run_sync(
        lambda: agent_runner.run_attempt(NoHost(), attempt_id, execution.worker_name())
    )
    if claim is not None:
        scheduler.advance(claim.task.run_id)
    return outcome


def collect(stream, limit: int | None = None) -> list:
    """The items of a provider's async stream, to its end (or its first `limit` items), on an event
    loop of its own; an exception the stream raises is raised here."""
    from orchestrator import db_threads

    async def items() -> list:
        out = []
        try:
            async for item in stream:
                out.append(item)
                if limit is not None and len(out) >= limit:
                    break
        finally:
            await stream.aclose()
        return out

    return db_threads.run_sync(items)


@pytest.fixture
def make_agent(db):
    def make(name: str = "researcher", **fields) -> Agent:
        fields.setdefault("provider_options", fast_latency())
        fields.setdefault("max_concurrency", 4)
        return Agent.objects.create(name=name, role=name.title(), **fields)

    return make


@pytest.fixture
def demo_agents(make_agent):
    """Simulated agents with the demo team's names, fast enough for tests."""
    return {name: make_agent(name) for name in ["researcher", "architect", "coder", "tester", "reviewer", "writer"]}


@pytest.fixture
def priced_limit(db):
    return ProviderLimit.objects.create(
        provider="simulated", model="sim-1", input_price_per_mtok=Decimal("3"), output_price_per_mtok=Decimal("15")
    )


@pytest.fixture
def make_plan(db):
    """Build and save a plan from a compact description: {key: (agent, [upstream keys], extra fields)}."""
    from orchestrator import plans

    def make(tasks: dict, goal: str = "Test goal", defaults: dict | None = None) -> Plan:
        subtasks = []
        for key, spec in tasks.items():
            agent, deps, *extra = spec
            item = {"key": key, "agent": agent, "title": key.replace("_", " ").title(), "depends_on": list(deps)}
            if extra:
                item.update(extra[0])
            subtasks.append(item)
        data = {"goal": goal, "subtasks": subtasks}
        if defaults:
            data["defaults"] = defaults
        spec = plans.validate(data)
        return plans.save_plan(spec, source=Plan.Source.MANUAL)

    return make


@pytest.fixture
def artifacts_dir(tmp_path, settings) -> Path:
    """The runs' working directories (and kept tool results) under this test's own folder."""
    settings.GLASSBOX_ARTIFACTS_DIR = tmp_path / "artifacts"
    return settings.GLASSBOX_ARTIFACTS_DIR


@pytest.fixture
def stopped_clock(monkeypatch):
    """`timezone.now` stopped, moved on only by hand (`stopped_clock(600)`: ten minutes later), so
    that what a duration reads is exact, whatever the machine's load."""
    from django.utils import timezone

    now = [timezone.now()]
    monkeypatch.setattr(timezone, "now", lambda: now[0])

    def move_on(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)

    return move_on


@pytest.fixture
def no_broker(monkeypatch):
    """Admitted attempts are not handed to any broker: a test runs them itself with `run_here`."""
    from orchestrator.engine import dispatch

    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)


def run_here(run: Run) -> Run:
    """Run every queued attempt of `run` in this process (no qcluster) until none is queued:
    the engine's own execution path, so every state comes from its transitions."""
    from orchestrator.models import Attempt

    while attempt := Attempt.objects.filter(task_run__run=run, state=Attempt.State.QUEUED).first():
        run_attempt(attempt.pk)
    run.refresh_from_db()
    return run


def child_database_url() -> str:
    """A DATABASE_URL that points a child process at the database this test uses."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    user = quote(s.get("USER") or "", safe="")
    auth = f"{user}:{quote(s['PASSWORD'], safe='')}@" if s.get("PASSWORD") else (f"{user}@" if user else "")
    return f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def child_env(**overrides) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": child_database_url(),
            "DJANGO_SETTINGS_MODULE": "glassbox.settings",
            "GLASSBOX_LEASE_S": "3",
            "GLASSBOX_TICK_S": "0.5",
            "GLASSBOX_RETRY_BASE_S": "0.2",
            "GLASSBOX_RETRY_MAX_S": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class QCluster:
    """A real `manage.py qcluster` process group against the test database."""

    def __init__(self, log_dir: Path, workers: int = 4, **env):
        self.log_dir = log_dir
        self.workers = workers
        self.env = env
        self.procs: list[subprocess.Popen] = []

    def start(self) -> subprocess.Popen:
        index = len(self.procs)
        log = open(self.log_dir / f"qcluster-{index}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "qcluster"],
            cwd=ROOT,
            env=child_env(GLASSBOX_WORKERS=self.workers, **self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
        """Kill a whole cluster: its main process and every worker in its process group."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM to each cluster's main process (q2 then stops its workers), SIGKILL what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a cluster that did not stop
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.log_dir.glob("qcluster-*.log")))


def _processes():
    """(pid, state, parent pid, process group, session) of every process, from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid, pgrp, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except OSError:
            continue
        yield int(stat.parent.name), state, int(ppid), int(pgrp), int(session)


def child_pids(parent: int) -> list[int]:
    """Direct children of a process."""
    return [pid for pid, _, ppid, _, _ in _processes() if ppid == parent]


def process_ended(pid: int) -> bool:
    """No process has this pid, or it is a zombie: dead, whether or not its new parent (PID 1, once
    its own died) has reaped it yet."""
    return all(state in ("Z", "X") for found, state, _, _, _ in _processes() if found == pid)


def process_group(pgid: int) -> list[int]:
    """The living processes of a process group (a zombie is dead)."""
    return [pid for pid, state, _, pgrp, _ in _processes() if pgrp == pgid and state not in ("Z", "X")]


def session_members(sid: int) -> list[int]:
    """The living processes of a session (a zombie is dead): a stdio tool server's session is
    everything it started, and its launcher's watcher."""
    return [pid for pid, state, _, _, session in _processes() if session == sid and state not in ("Z", "X")]


def kill_session(sid: int) -> None:
    """SIGKILL to every living process of a session: what a failed test left."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pid_written_to(path: Path, timeout: float = 60) -> int:
    """The process id a process writes to `path`, once it has."""
    wait_until(lambda: path.exists() and path.read_text().strip(), timeout, f"a pid in {path.name}")
    return int(path.read_text())


@pytest.fixture
def qcluster(transactional_db, tmp_path):
    """Start real qcluster processes on demand: `qcluster.start()`; all are stopped afterwards."""
    cluster = QCluster(tmp_path)
    yield cluster
    cluster.stop()


def wait_for_run(run: Run, timeout: float = 90, cluster: QCluster | None = None) -> Run:
    """Poll until the run ends; fail with the cluster's logs when it does not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_finished:
            return run
        time.sleep(0.2)
    states = list(run.tasks.values_list("subtask__key", "state", "wait_reason", "error"))
    logs = cluster.logs() if cluster else ""
    pytest.fail(f"run {run.pk} still {run.status} after {timeout} s; tasks: {states}\n{logs}")


def stand_still(monkeypatch) -> None:
    """The rate budgets' clock stands still half-way through a minute: a minute boundary crossed
    during a test would weigh what was taken down as "previous window" and free some of it (one
    request taken before the boundary counts as none just after it)."""
    from orchestrator import ratelimit

    half_way = (time.time() // 60) * 60 + 30
    monkeypatch.setattr(ratelimit.get_storage(), "clock", lambda: half_way)


def in_another_connection(work) -> None:
    """Run `work` on a connection of its own (a thread's), committed, and wait for it."""
    failures: list[BaseException] = []

    def target():
        try:
            work()
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the other connection's write waited for the reader"
    assert not failures, failures


def wait_until(predicate, timeout: float = 30, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {message}")


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """A new channel layer object for each test.

    channels_redis keeps its receive state (a lock, buffers, a count of receivers) on the layer
    object, bound to the event loop that last received; daphne has one loop, but tests run each
    scenario in a loop of its own, and a layer carried over from another test's loop could leave
    a receive that never ends.
    """
    yield
    from channels.layers import channel_layers

    channel_layers.backends.clear()


# --- The production profile (`make test-services`): PostgreSQL and Redis --------------------------

# `make test-services` names every session's Redis keys and django-q2 queue with this prefix, so
# that sessions sharing one Redis never meet, and removes them when the session ends.
TEST_REDIS_PREFIX = "glassbox-test-"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs) -> None:
    """Under pytest-xdist (`make test` runs the tests that start no qcluster two at a time), each
    worker gets Redis keys and a django-q2 queue of its own: `<prefix>-gw0`, `<prefix>-gw1`.

    Set in the worker's environment before it starts, because the settings read them once, at
    import, and django-q2 keeps its queue's name from then on. Without it, one worker's purge of
    the queue or its rate-limit counts would land in the other's test. The test databases are
    pytest-django's business: it suffixes each worker's (`_gw0`)."""
    for number, spec in enumerate(specs):
        for name in ("GLASSBOX_REDIS_PREFIX", "GLASSBOX_Q_NAME"):
            if os.environ.get(name):
                spec.env[name] = f"{os.environ[name]}-gw{number}"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """A session of its own on a shared PostgreSQL: test database `test_<NAME>_<GLASSBOX_TEST_DB_SUFFIX>`.

    Without it two sessions against one server would both use `test_<NAME>`, and the second
    would drop the first one's database while it runs. SQLite keeps GLASSBOX_TEST_SQLITE_PATH.
    """
    from django.conf import settings

    suffix = os.environ.get("GLASSBOX_TEST_DB_SUFFIX", "")
    if not suffix:
        return
    for db in settings.DATABASES.values():
        if db["ENGINE"].endswith("sqlite3"):
            continue
        db.setdefault("TEST", {})
        db["TEST"]["NAME"] = f"{db['TEST'].get('NAME') or 'test_' + db['NAME']}_{suffix}"


@pytest.fixture
def broker(db):
    """The session's django-q2 broker (ORM or Redis), emptied before and after the test.

    Redis is not rolled back between tests like the database: without the purge, tasks one test
    enqueued would still be waiting for the next.
    """
    from django_q.brokers import get_broker

    queue = get_broker()
    queue.purge_queue()
    yield queue
    queue.purge_queue()


def postgres_problem(settings_dict: dict) -> str:
    """Why the PostgreSQL server of `settings_dict` cannot be reached ("" when it can)."""
    import psycopg

    try:
        psycopg.connect(
            dbname="postgres",
            host=settings_dict.get("HOST") or "127.0.0.1",
            port=settings_dict.get("PORT") or 5432,
            user=settings_dict.get("USER") or None,
            password=settings_dict.get("PASSWORD") or None,
            connect_timeout=5,
        ).close()
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return ""


def redis_problem(url: str) -> str:
    """Why the Redis server at `url` cannot be reached ("" when it can)."""
    import redis

    client = redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return ""


@pytest.fixture(scope="session", autouse=True)
def production_profile_services():
    """On PostgreSQL / Redis: check both are there first (a clear stop, not a thousand errors),
    refuse to share a deployment's Redis keys or queue, and remove this session's keys at the end."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if "postgresql" in database["ENGINE"] and (problem := postgres_problem(database)):
        pytest.exit(
            f"PostgreSQL at {database.get('HOST') or '127.0.0.1'}:{database.get('PORT') or 5432} is not reachable "
            f"({problem}). Start it, or point GLASSBOX_TEST_DATABASE_URL at one.",
            returncode=3,
        )
    if not settings.REDIS_URL:
        yield
        return
    if problem := redis_problem(settings.REDIS_URL):
        pytest.exit(
            f"Redis (REDIS_URL) is not reachable ({problem}). Start it, or point GLASSBOX_TEST_REDIS_URL at one.",
            returncode=3,
        )
    prefix, queue = settings.REDIS_PREFIX, settings.Q_CLUSTER["name"]
    if not (prefix.startswith(TEST_REDIS_PREFIX) and queue.startswith(TEST_REDIS_PREFIX)):
        pytest.exit(
            f"REDIS_URL is set but GLASSBOX_REDIS_PREFIX ({prefix!r}) and GLASSBOX_Q_NAME ({queue!r}) do not start "
            f"with {TEST_REDIS_PREFIX!r}: the tests' workers would share keys and the task queue with a "
            "deployment. Run `make test-services`, which names them per session.",
            returncode=3,
        )
    yield
    import redis

    client = redis.from_url(settings.REDIS_URL)
    try:
        for pattern in (f"{prefix}:*", f"django_q:{queue}:*"):
            for key in client.scan_iter(match=pattern, count=1000):
                client.delete(key)
    finally:
        client.close()


# --- Personas (roles from the 0006_roles data migration) ----------------------------------------

PERSONAS = ("anonymous", "outsider", "viewer", "launcher", "approver", "agent_admin")
PERSONA_GROUPS = {"viewer": "Viewer", "launcher": "Launcher", "approver": "Approver", "agent_admin": "Agent admin"}


def ensure_roles() -> None:
    """The role groups as the data migration makes them (a transactional test's flush removes them)."""
    import importlib

    from django.contrib.auth.models import Group, Permission

    roles = {
        name: list(codenames)
        for name, codenames in importlib.import_module("orchestrator.migrations.0006_roles").ROLES.items()
    }
    for name, more in importlib.import_module("orchestrator.migrations.0012_tools_registry").ROLE_ADDITIONS.items():
        roles[name] += more
    for name, codenames in roles.items():
        group, created = Group.objects.get_or_create(name=name)
        if created or not group.permissions.exists():
            group.permissions.set(
                Permission.objects.filter(content_type__app_label="orchestrator", codename__in=codenames)
            )


@pytest.fixture
def personas(db):
    """One user per persona (None for anonymous): outsider (logged in, no group), viewer,
    launcher, approver, agent_admin (staff, so that it can use the admin). No password (hashing
    one takes a noticeable time): log them in with `client.force_login`."""
    from django.contrib.auth.models import Group, User

    ensure_roles()
    users = {"anonymous": None}
    for name in PERSONAS[1:]:
        user = User.objects.create_user(name, is_staff=(name == "agent_admin"))
        if name in PERSONA_GROUPS:
            user.groups.add(Group.objects.get(name=PERSONA_GROUPS[name]))
        users[name] = user
    return users


# --- A local fake of the Anthropic Messages API ----------------------------------------------------

# Recognisable wherever it would leak, and deliberately not shaped like a real key ("sk-ant-..."),
# so that only the redaction of the configured key can hide it.
FAKE_ANTHROPIC_KEY = "glassbox-fake-key-5b7d1e9c3a"


@pytest.fixture
def fake_anthropic(settings):
    """orchestrator.providers.fake_anthropic on a free port, with the provider and the planner pointed at it.

    Script answers with `fake_anthropic.enqueue(Reply...)`; `fake_anthropic.requests` is what it
    received. The API key is FAKE_ANTHROPIC_KEY.
    """
    from orchestrator.providers.fake_anthropic import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        settings.ANTHROPIC_BASE_URL = server.url
        settings.ANTHROPIC_API_KEY = FAKE_ANTHROPIC_KEY
        yield server


def grant_with_approval(agent: str, server: str, tool: str = "") -> None:
    """Grant `agent` SERVER[:TOOL] with approval per call, the server registered as a bare row
    (no process: for what reads grants, not for calls)."""
    from orchestrator.models import Agent, ToolGrant, ToolServer

    registered, _ = ToolServer.objects.get_or_create(name=server, defaults={"transport": "stdio", "command": "x"})
    ToolGrant.objects.create(agent=Agent.objects.get(name=agent), server=registered, tool=tool, requires_approval=True)
