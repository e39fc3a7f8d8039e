"""Fault and load claims, proved with real processes: nothing is lost, nothing runs twice.

- two qclusters, 200 tasks: every cap holds, no task runs twice at once, each succeeds once;
- eight workers under load: no "database is locked" (or deadlock) reaches a person;
- a heartbeat that races the reaper for an expired lease: refused, without a deadlock;
- daphne killed and restarted mid-run: a viewer reconnects, is replayed what it missed, and
  its view equals the database event by event;
- a viewer that stops reading: daphne drops it (its queued frames are freed) and it catches up
  by replay when it reads again; the other viewers are not held up.

These run on whichever profile the session uses: SQLite, the ORM broker and the in-process
channel layer under `make test`; PostgreSQL, the Redis broker and channels_redis under
`make test-services`. (SIGKILL of a worker and of a whole qcluster are in test_processes.py;
the Redis restart is in tests/services/.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django_q.models import Failure

from orchestrator.engine import runs
from orchestrator.models import Attempt, Event, Run, TaskRun
from tests.conftest import ROOT, child_env, fast_latency, wait_for_run, wait_until
from tests.orchestrator.engine.test_processes import (
    assert_each_task_succeeded_exactly_once,
    attempt_intervals,
    no_task_ran_twice_at_once,
    peak_overlap,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# What a database under contention says when it gives up (SQLite) or aborts a transaction
# (PostgreSQL). None of it may reach a person: not an attempt's error, a task's, an event, a
# failed q2 task or a worker's log.
LOCK_ERRORS = re.compile(
    r"database is locked|database table is locked|deadlock detected|could not serialize access|"
    r"could not obtain lock|lock timeout",
    re.IGNORECASE,
)


def full_logs(cluster) -> str:
    """Every line every cluster wrote (QCluster.logs() keeps only the tail, for failure messages)."""
    return "\n".join(path.read_text(errors="replace") for path in sorted(cluster.log_dir.glob("qcluster-*.log")))


def uniform_latency(low_s: float, high_s: float) -> dict:
    return {"latency": {"dist": "uniform", "low_s": low_s, "high_s": high_s}}


def test_two_qclusters_run_200_tasks_each_exactly_once_and_never_exceed_a_cap(qcluster, make_agent, make_plan):
    make_agent("researcher", max_concurrency=3, provider_options=uniform_latency(0.02, 0.12))
    make_agent("writer", max_concurrency=2, provider_options=uniform_latency(0.02, 0.12))
    plan = make_plan({f"t{i:03}": ("researcher" if i % 2 else "writer", []) for i in range(200)})
    qcluster.workers = 3
    # One attempt per worker process at a time: a host of 50 slots would take every attempt of so
    # small a cap by itself (and keep each success's successor), leaving nothing to share.
    qcluster.env["GLASSBOX_SLOTS_PER_WORKER"] = 1
    qcluster.start()
    qcluster.start()

    run = wait_for_run(runs.launch(plan, cap=4), 240, qcluster)

    assert run.status == "succeeded", run.summary
    assert run.tasks.count() == 200
    assert_each_task_succeeded_exactly_once(run)
    assert no_task_ran_twice_at_once(run)
    assert peak_overlap(attempt_intervals(run)) <= 4
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="researcher")) <= 3
    assert peak_overlap(attempt_intervals(run, task_run__agent__name="writer")) <= 2
    # Each cap is reported by the scheduler too, and several worker processes did work.
    assert run.peak_running <= 4
    workers = set(Attempt.objects.filter(task_run__run=run).values_list("worker", flat=True))
    assert len(workers) >= 2
    # The event log is complete: numbered 1..n with no gap, one success per task.
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert Event.objects.filter(run=run, type="task.succeeded").count() == 200


def test_eight_workers_under_load_never_show_a_person_a_database_lock_error(qcluster, make_agent, make_plan):
    # Short tasks make the most transactions per second (claim, result, advance, reaper tick);
    # the longer ones also stream progress (a write every 0.3 s) while the others commit.
    make_agent("researcher", max_concurrency=8, provider_options=uniform_latency(0.01, 0.8))
    tasks = {f"probe_{i:02}": ("researcher", []) for i in range(80)}
    tasks["synthesis"] = ("researcher", list(tasks))
    plan = make_plan(tasks)
    qcluster.workers = 8
    qcluster.start()

    run = wait_for_run(runs.launch(plan, cap=8), 240, qcluster)

    assert run.status == "succeeded", run.summary
    assert_each_task_succeeded_exactly_once(run)
    seen_by_people = [
        *Attempt.objects.filter(task_run__run=run).values_list("error", flat=True),
        *TaskRun.objects.filter(run=run).values_list("error", flat=True),
        *Event.objects.filter(run=run).values_list("message", flat=True),
        run.summary,
    ]
    assert [text for text in seen_by_people if LOCK_ERRORS.search(text or "")] == []
    failed_q2_tasks = list(Failure.objects.values_list("name", "result"))
    assert failed_q2_tasks == []
    logs = full_logs(qcluster)
    assert LOCK_ERRORS.findall(logs) == [], qcluster.logs()
    assert "Traceback" not in logs, qcluster.logs()


def test_a_late_heartbeat_racing_the_reaper_is_refused_without_a_deadlock(make_agent, make_plan, monkeypatch):
    """A host too slow to renew a lease in time saves progress while the reaper declares it lost.

    Both touch the task and the attempt. Every engine transaction that changes both changes the
    attempt first; were one to lock the task first, PostgreSQL would find a deadlock and abort one
    of them with an error. Here the reaper lingers on purpose after it marked the attempt lost and
    before it retries the task: the host's save and lease renewal run meanwhile, wait for it, then
    learn that the attempt is no longer theirs and change nothing.
    """
    from datetime import timedelta

    from django.db import connections
    from django.utils import timezone

    from orchestrator.engine import dispatch, execution, reaper
    from orchestrator.providers.base import Usage

    monkeypatch.setattr(dispatch, "enqueue_attempt", lambda attempt_id: None)
    make_agent("researcher")
    run = runs.launch(make_plan({"a": ("researcher", [])}))
    attempt = Attempt.objects.get(task_run__run=run)
    claim = execution.claim_attempt(attempt.pk, "slow-host:1")
    TaskRun.objects.filter(pk=claim.task.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    real_retry = reaper.retry_lost_or_fail
    reaper_holds_the_attempt = threading.Event()

    def linger_then_retry(*args, **kwargs):
        if threading.current_thread().name == "reaper":
            reaper_holds_the_attempt.set()
            time.sleep(1.5)  # the host's heartbeat starts meanwhile
        return real_retry(*args, **kwargs)

    monkeypatch.setattr(reaper, "retry_lost_or_fail", linger_then_retry)
    outcomes: dict[str, object] = {}

    def in_thread(name, work):
        def target():
            try:
                outcomes[name] = work()
            except Exception as exc:  # what the thread raised is the claim under test
                outcomes[name] = exc
            finally:
                connections.close_all()

        return threading.Thread(target=target, name=name)

    def beat():
        execution.save_progress([(claim, execution.Progress("partial output", 10, Usage(5, 10)))])
        execution.renew_leases(claim.worker, [claim.task.pk])
        return execution.still_ours([claim])

    reaping = in_thread("reaper", reaper.reap_expired)
    reaping.start()
    assert reaper_holds_the_attempt.wait(30)
    beating = in_thread("heartbeat", beat)
    beating.start()
    reaping.join(60)
    beating.join(60)

    assert outcomes["reaper"] == 1
    assert outcomes["heartbeat"] == {claim.task.pk: "lost"}, outcomes["heartbeat"]
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.LOST
    task = TaskRun.objects.get(pk=claim.task.pk)
    assert task.state == TaskRun.State.READY  # retried as a new attempt
    assert task.output != "partial output" and task.lease_expires_at is None


# --- The live view through real daphne processes ---------------------------------------------------

LIVE_SEQ = re.compile(r'<div id="live-seq"[^>]*data-from="(\d+)"[^>]*data-to="(\d+)"[^>]*data-full="(\d)"')
EVENT_ROW = re.compile(r'<div id="event-(\d+)"[^>]*data-seq="(\d+)"[^>]*data-type="([^"]*)"')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Daphne:
    """`python -m daphne` serving glassbox.asgi against the test database, on a fixed port."""

    def __init__(self, log_dir: Path, *args: str):
        self.port = free_port()
        self.log_dir = log_dir
        self.args = args
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"daphne-{self.starts}.log", "wb")
        env = child_env()
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                *self.args,
                "glassbox.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"daphne exited on start:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health/", timeout=5):
                    return
            except urllib.error.HTTPError:
                return  # it answers (a 503 is still an answer)
            except OSError:
                time.sleep(0.1)
        pytest.fail(f"daphne did not answer within 60 s:\n{self.logs()}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def rss_kb(self) -> int:
        """Resident memory of the daphne process (Linux)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.log_dir.glob("daphne-*.log")))


@pytest.fixture
def daphne(tmp_path):
    servers: list[Daphne] = []

    def make(*args: str) -> Daphne:
        server = Daphne(tmp_path, *args)
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.kill()


class LiveViewer:
    """A websocket client of /ws/runs/<id>/ speaking the live protocol, in a thread of its own.

    It sends `resume` with the last sequence number it applied on every (re)connect, applies the
    frames' event rows to its view ({seq: type}), notes any frame that does not start right
    after the last one (a gap) and reconnects whenever the connection ends. `pause()` stops
    reading from the socket altogether (the kernel's buffers fill, then the server's).
    """

    def __init__(self, port: int, run_id: int, session_cookie: str):
        self.url = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/"
        self.headers = {"Cookie": session_cookie, "Origin": f"http://127.0.0.1:{port}"}
        self.view: dict[int, str] = {}
        self.last_seq = 0
        self.frames: list[tuple[int, int, bool, int]] = []  # (from, to, full, connection number)
        self.gaps: list[tuple[int, int]] = []
        self.connections = 0
        self.local_ports: list[int] = []  # one per connection, as the server's access log shows it
        self.errors: list[str] = []
        self.paused = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self.main()), daemon=True)

    def start(self) -> LiveViewer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)

    def pause(self) -> None:
        self.paused.set()

    def resume_reading(self) -> None:
        self.paused.clear()

    def apply(self, frame: str) -> None:
        match = LIVE_SEQ.search(frame)
        if match is None:
            return
        start, end, full = int(match.group(1)), int(match.group(2)), match.group(3) == "1"
        if start != self.last_seq + 1:
            self.gaps.append((self.last_seq, start))
        for _, seq, kind in EVENT_ROW.findall(frame):
            self.view[int(seq)] = kind
        self.frames.append((start, end, full, self.connections))
        self.last_seq = max(self.last_seq, end)

    async def main(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        while not self.stopping.is_set():
            try:
                async with connect(
                    self.url,
                    additional_headers=self.headers,
                    open_timeout=10,
                    ping_interval=None,
                    max_size=None,
                    max_queue=4,
                    proxy=None,
                ) as ws:
                    self.connections += 1
                    self.local_ports.append(ws.local_address[1])
                    await ws.send(json.dumps({"type": "resume", "last_seq": self.last_seq}))
                    reading = True
                    while not self.stopping.is_set():
                        if self.paused.is_set() == reading:
                            reading = not reading
                            (ws.transport.resume_reading if reading else ws.transport.pause_reading)()
                        try:
                            frame = await asyncio.wait_for(ws.recv(), timeout=0.1)
                        except TimeoutError:
                            continue
                        self.apply(frame if isinstance(frame, str) else frame.decode())
            except (ConnectionClosed, OSError, TimeoutError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.2)  # the server is gone or restarting: try again


def session_cookie_with_view_permission() -> str:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    user = User.objects.create_user("watcher", password="unused-password-4b1c")
    user.user_permissions.add(Permission.objects.get(content_type__app_label="orchestrator", codename="view_run"))
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def database_view(run) -> dict[int, str]:
    return dict(Event.objects.filter(run=run).values_list("seq", "type"))


def assert_shows_what_its_frames_brought(viewer: LiveViewer, run) -> None:
    """Every event row the viewer shows is the database's, and each frame brought the rows of its
    newest events: at most a page of them (PAGE_LOG_ROWS), the older ones are behind the log's
    "Show older events", as on a reload. Together with no gaps, nothing was lost."""
    from orchestrator.readmodels.log import PAGE_LOG_ROWS

    database = database_view(run)
    assert viewer.view == {seq: database[seq] for seq in viewer.view}
    for start, end, _, _ in viewer.frames:
        newest = range(max(start, end - PAGE_LOG_ROWS + 1), end + 1)
        assert all(seq in viewer.view for seq in newest), (start, end, sorted(set(newest) - set(viewer.view)))
    assert max(viewer.view) == run.last_event_seq


def caught_up(viewer: LiveViewer, run) -> bool:
    run.refresh_from_db()
    return run.is_finished and viewer.last_seq == run.last_event_seq


def test_after_daphne_is_killed_and_restarted_a_viewer_reconnects_and_its_view_equals_the_database(
    qcluster, daphne, make_agent, make_plan
):
    make_agent("researcher", max_concurrency=3, provider_options=fast_latency(1.0))
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(9)})
    server = daphne()
    qcluster.start()
    run = runs.launch(plan, cap=3)
    viewer = LiveViewer(server.port, run.pk, session_cookie_with_view_permission()).start()
    try:
        wait_until(lambda: viewer.last_seq >= 10, 60, "the viewer to receive the first events")
        server.kill()
        wait_until(lambda: viewer.errors, 30, "the viewer to notice that daphne is gone")
        seen_before = viewer.last_seq
        wait_until(
            lambda: Run.objects.get(pk=run.pk).last_event_seq > seen_before + 3, 60, "events while daphne is down"
        )
        missed_while_down = Run.objects.get(pk=run.pk).last_event_seq
        server.start()
        wait_for_run(run, 120, qcluster)
        wait_until(lambda: caught_up(viewer, run), 60, "the viewer to catch up")
    finally:
        viewer.stop()

    assert viewer.connections == 2, viewer.errors
    assert viewer.gaps == []
    replay = next(frame for frame in viewer.frames if frame[3] == 2)
    assert replay[0] == seen_before + 1 and replay[1] >= missed_while_down  # everything missed while down
    assert not any(full for _, _, full, _ in viewer.frames)
    assert_shows_what_its_frames_brought(viewer, run)


def test_a_viewer_that_stops_reading_is_dropped_and_catches_up_by_replay_when_it_reads_again(
    qcluster, daphne, make_agent, make_plan
):
    # daphne pings every client; one that cannot answer (it reads nothing) is dropped after the
    # ping timeout, and what was queued for it is freed. Production keeps daphne's defaults
    # (20 s + 30 s); the test shortens them.
    make_agent("researcher", max_concurrency=4, provider_options=fast_latency(2.0))
    plan = make_plan({f"t{i}": ("researcher", []) for i in range(16)})
    server = daphne("--ping-interval", "1", "--ping-timeout", "3")
    qcluster.workers = 4
    qcluster.start()
    run = runs.launch(plan, cap=4)
    cookie = session_cookie_with_view_permission()
    reader = LiveViewer(server.port, run.pk, cookie).start()
    stalled = LiveViewer(server.port, run.pk, cookie).start()
    try:
        wait_until(lambda: stalled.last_seq >= 5 and reader.last_seq >= 5, 60, "both viewers to receive events")
        stalled.pause()
        stopped_at = stalled.last_seq
        baseline_kb = server.rss_kb()
        dropped = f"127.0.0.1:{stalled.local_ports[0]} - - "
        peak_kb = baseline_kb

        def dropped_by_the_server() -> bool:
            nonlocal peak_kb
            peak_kb = max(peak_kb, server.rss_kb())
            return any(dropped in line and "WSDISCONNECT" in line for line in server.logs().splitlines())

        wait_until(dropped_by_the_server, 60, "daphne to drop the viewer that reads nothing")
        reader_during_stall = reader.last_seq
        wait_until(lambda: reader.last_seq > reader_during_stall, 60, "the other viewer to go on receiving")
        at_resume = Run.objects.get(pk=run.pk).last_event_seq
        stalled.resume_reading()
        wait_for_run(run, 120, qcluster)
        wait_until(lambda: caught_up(stalled, run) and caught_up(reader, run), 60, "both viewers to catch up")
    finally:
        reader.stop()
        stalled.stop()

    assert stalled.connections == 2, stalled.errors
    assert stalled.gaps == [] and reader.gaps == []
    # The first frame of the new connection replays everything from where the old one stopped.
    replay = next(frame for frame in stalled.frames if frame[3] == 2)
    assert stopped_at < replay[0] and replay[1] >= at_resume
    assert_shows_what_its_frames_brought(stalled, run)
    assert_shows_what_its_frames_brought(reader, run)
    assert (peak_kb - baseline_kb) < 20_000, f"daphne grew by {peak_kb - baseline_kb} kB while a viewer stalled"
