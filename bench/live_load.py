"""Live-view load: N websocket viewers watch one real run of M tasks (``make bench-live``).

    python -m bench.live_load [--viewers 50] [--tasks 200] [--profile embedded|production]
                              [--out bench/results-live.json]

A real deployment in miniature, on a database of its own: daphne (the project's ASGI
application and its RunConsumer), one qcluster, and a client process holding N websocket
connections to ``/ws/runs/<id>/``, each logged in with a session cookie and speaking the live
protocol (``resume`` with the last sequence number on every (re)connect). The run is launched
waiting for plan approval, the viewers connect, and once every one of them has its first frame
(its page, as a person who approves has it) the plan is approved: every event of the run after
that happens while they watch.

Reported (a measurement, never a pass/fail threshold):

* whether every viewer ended with every event: its frames cover 1..last_event_seq without a
  gap (and how many also got a log row for each event: a frame bringing more events than a page
  of the log sends that page instead of a row per event);
* the frames: how many, their bytes per viewer, the largest (the fan-out's burst), and how many
  were full refreshes (only a viewer that resumed far behind gets one, never one in step);
* the latency of each (viewer, event): the frame's arrival minus the event's ``created_at``
  (taken inside the event's transaction, so commit time is included), p50 / p95 / p99 / max;
* daphne's resident memory before the viewers connect, at its peak, and at the end.

Profiles: ``embedded`` (a temporary SQLite file, the ORM broker, the in-process channel layer,
consumers polling the Event table) or ``production`` (a fresh PostgreSQL database created on
the server of ``--database-url`` and dropped afterwards, Redis at ``--redis-url`` under a key
prefix and queue of its own, removed afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
LIVE_SEQ = re.compile(r'<div id="live-seq"[^>]*data-from="(\d+)"[^>]*data-to="(\d+)"[^>]*data-full="(\d)"')
EVENT_ROW = re.compile(r'<div id="event-\d+"[^>]*data-seq="(\d+)"')
START_TIMEOUT_S = 60.0


class BenchError(Exception):
    """The benchmark could not be carried out; the message says why."""


# --- The viewers' process ----------------------------------------------------------------------


async def _viewer(
    index: int, url: str, headers: dict, state: dict, until: dict, connected: asyncio.Event, stop: asyncio.Event
) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    record = state[index]
    while not stop.is_set():
        try:
            async with connect(
                url, additional_headers=headers, open_timeout=30, ping_interval=None, max_size=None, proxy=None
            ) as ws:
                record["connections"] += 1
                await ws.send(json.dumps({"type": "resume", "last_seq": record["last_seq"]}))
                while not stop.is_set():
                    if until["seq"] and record["last_seq"] >= until["seq"]:
                        return
                    try:
                        frame = await asyncio.wait_for(ws.recv(), timeout=0.2)
                    except TimeoutError:
                        continue
                    arrived = time.time()
                    text = frame if isinstance(frame, str) else frame.decode()
                    match = LIVE_SEQ.search(text)
                    if match is None:
                        continue
                    start, end, full = int(match.group(1)), int(match.group(2)), match.group(3) == "1"
                    if start != record["last_seq"] + 1:
                        record["gaps"].append([record["last_seq"], start])
                    record["frames"].append([start, end, full, arrived])
                    record["rows"].update(int(seq) for seq in EVENT_ROW.findall(text))
                    record["bytes"] += len(text)
                    record["largest"] = max(record["largest"], len(text))
                    record["last_seq"] = max(record["last_seq"], end)
                    connected.set()  # the viewer has its page: it watches from here
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            record["errors"].append(f"{type(exc).__name__}: {exc}")
            connected.set()
            await asyncio.sleep(0.5)


async def _viewers(args) -> dict:
    headers = {"Cookie": args.cookie, "Origin": args.origin}
    state = {
        i: {
            "connections": 0,
            "last_seq": 0,
            "frames": [],
            "rows": set(),
            "gaps": [],
            "errors": [],
            "bytes": 0,
            "largest": 0,
        }
        for i in range(args.viewers)
    }
    until = {"seq": 0}
    stop = asyncio.Event()
    connected = [asyncio.Event() for _ in range(args.viewers)]
    tasks = [
        asyncio.create_task(_viewer(i, args.url, headers, state, until, connected[i], stop))
        for i in range(args.viewers)
    ]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in connected)), START_TIMEOUT_S)
    print("connected", flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)  # "until N": the run's last sequence number
    until["seq"] = int(line.split()[1])
    done, pending = await asyncio.wait(tasks, timeout=args.drain_timeout)
    stop.set()
    await asyncio.gather(*pending, return_exceptions=True)
    for record in state.values():
        record["rows"] = sorted(record["rows"])
    return state


def client_main(args) -> None:
    state = asyncio.run(_viewers(args))
    Path(args.out).write_text(json.dumps(state))


# --- The benchmark ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Profile:
    """The environment of every process of the benchmark, and what to remove afterwards."""

    def __init__(self, args, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.env: dict[str, str] = {
            "DJANGO_SETTINGS_MODULE": "glassbox.settings",
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
            "GLASSBOX_WORKERS": str(args.workers),
            # The profile as deployed, as in the scheduler benchmark (bench/harness.py): DEBUG off,
            # so Django keeps no per-query log and templates are not rendered for debugging.
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(40),
        }
        self.database_name = ""
        self.redis_prefix = ""

    def __enter__(self) -> Profile:
        tag = f"glassbox_bench_live_{os.getpid()}"
        if self.args.profile == "embedded":
            self.env.update(GLASSBOX_SQLITE_PATH=str(self.workdir / "bench.sqlite3"), DATABASE_URL="", REDIS_URL="")
            return self
        import psycopg
        import redis

        parts = urlsplit(self.args.database_url)
        try:
            with psycopg.connect(
                urlunsplit(parts._replace(path="/postgres")), autocommit=True, connect_timeout=10
            ) as db:
                db.execute(f'CREATE DATABASE "{tag}"')
        except psycopg.Error as exc:
            raise BenchError(f"cannot create a database on the PostgreSQL of --database-url: {exc}") from exc
        self.database_name = tag
        try:
            redis.from_url(self.args.redis_url, socket_connect_timeout=10).ping()
        except redis.RedisError as exc:
            raise BenchError(f"Redis at --redis-url is not reachable: {exc}") from exc
        self.redis_prefix = tag.replace("_", "-")
        self.env.update(
            DATABASE_URL=urlunsplit(parts._replace(path=f"/{tag}")),
            REDIS_URL=self.args.redis_url,
            GLASSBOX_REDIS_PREFIX=self.redis_prefix,
            GLASSBOX_Q_NAME=self.redis_prefix,
        )
        return self

    def __exit__(self, *exc_info) -> None:
        from django.db import connections

        connections.close_all()
        if self.database_name:
            import psycopg

            parts = urlsplit(self.args.database_url)
            with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as db:
                db.execute(f'DROP DATABASE IF EXISTS "{self.database_name}" WITH (FORCE)')
        if self.redis_prefix:
            import redis

            client = redis.from_url(self.args.redis_url)
            for pattern in (f"{self.redis_prefix}:*", f"django_q:{self.redis_prefix}:*"):
                for key in client.scan_iter(match=pattern, count=1000):
                    client.delete(key)


def start(name: str, argv: list[str], env: dict, workdir: Path) -> subprocess.Popen:
    log = open(workdir / f"{name}.log", "wb")
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return process


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def wait_for_port(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"daphne exited on start: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise BenchError(f"daphne did not listen on port {port} within {START_TIMEOUT_S} s")


def build_plan(tasks: int):
    """One scoping task, tasks-2 probes that depend on it, one synthesis over all probes."""
    from orchestrator import plans
    from orchestrator.models import Agent, Plan

    latency = {"latency": {"dist": "uniform", "low_s": 0.2, "high_s": 0.6}}
    Agent.objects.create(name="researcher", role="Researcher", max_concurrency=8, provider_options=latency)
    probes = [f"probe_{i:03}" for i in range(tasks - 2)]
    subtasks = [{"key": "scope", "agent": "researcher", "title": "Scope", "depends_on": []}]
    subtasks += [{"key": key, "agent": "researcher", "title": key, "depends_on": ["scope"]} for key in probes]
    subtasks.append({"key": "synthesis", "agent": "researcher", "title": "Synthesis", "depends_on": probes})
    spec = plans.validate({"goal": "Live-view load benchmark", "subtasks": subtasks})
    return plans.save_plan(spec, source=Plan.Source.MANUAL)


def viewer_cookie() -> str:
    from django.conf import settings
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    user = User.objects.create_user("bench-viewer", password=os.urandom(12).hex())
    user.user_permissions.add(Permission.objects.get(content_type__app_label="orchestrator", codename="view_run"))
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def measure(args, profile: Profile) -> dict:
    import django

    os.environ.update(profile.env)
    for name in ("DATABASE_URL", "REDIS_URL"):
        if not os.environ.get(name):
            os.environ.pop(name, None)
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from orchestrator.engine import runs
    from orchestrator.models import Checkpoint, Event, Run

    call_command("migrate", verbosity=0)
    if connection.vendor == "sqlite":
        call_command("createcachetable", verbosity=0)
    env = {**os.environ}
    port = free_port()
    daphne = start(
        "daphne",
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "glassbox.asgi:application"],
        env,
        profile.workdir,
    )
    cluster = start("qcluster", [sys.executable, str(ROOT / "manage.py"), "qcluster"], env, profile.workdir)
    client = None
    samples: list[int] = []
    sampling = threading.Event()
    try:
        wait_for_port(port, daphne, profile.workdir / "daphne.log")
        plan = build_plan(args.tasks)
        run = runs.launch(plan, cap=args.cap, budget_usd="100", require_plan_approval=True)
        baseline_kb = rss_kb(daphne.pid)

        def sample() -> None:
            while not sampling.wait(0.25):
                samples.append(rss_kb(daphne.pid))

        threading.Thread(target=sample, daemon=True).start()
        receipts = profile.workdir / "receipts.json"
        client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.live_load",
                "client",
                "--url",
                f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/",
                "--cookie",
                viewer_cookie(),
                "--origin",
                f"http://127.0.0.1:{port}",
                "--viewers",
                str(args.viewers),
                "--out",
                str(receipts),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if client.stdout.readline().strip() != "connected":
            raise BenchError("the viewers' process did not connect its viewers")
        watched_from = Run.objects.get(pk=run.pk).last_event_seq
        started = time.monotonic()
        runs.decide(Checkpoint.objects.get(run=run, kind=Checkpoint.Kind.PLAN), approve=True)
        deadline = started + args.timeout
        while not Run.objects.get(pk=run.pk).is_finished:
            if time.monotonic() > deadline:
                raise BenchError(f"the run did not finish within {args.timeout} s")
            time.sleep(0.2)
        run_s = time.monotonic() - started
        run.refresh_from_db()
        client.stdin.write(f"until {run.last_event_seq}\n")
        client.stdin.flush()
        client.wait(timeout=args.drain_timeout + 30)
        sampling.set()
        state = json.loads(receipts.read_text())
        rows = list(Event.objects.filter(run=run).values_list("seq", "created_at", "type"))
        created = {seq: at.timestamp() for seq, at, _ in rows}
        types = {seq: type_ for seq, _, type_ in rows}
        result = summarise(args, run, run_s, state, created, watched_from, baseline_kb, samples, connection.vendor)
        result["event_latency_by_type_ms"] = latency_by_type(state, created, types, watched_from)
        return result
    finally:
        sampling.set()
        if client is not None and client.poll() is None:
            client.kill()
        stop(cluster)
        stop(daphne)


def event_latencies(record: dict, created: dict[int, float], watched_from: int):
    """(event, ms) for every event a viewer's frames brought after `watched_from`: the frame's
    arrival minus the event's created_at."""
    for start, end, _, arrived in record["frames"]:
        for seq in range(max(start, watched_from + 1), end + 1):
            yield seq, (arrived - created[seq]) * 1000


def summarise(args, run, run_s, state, created, watched_from, baseline_kb, samples, vendor) -> dict:
    every_seq = list(range(1, run.last_event_seq + 1))
    latencies_ms: list[float] = []
    complete = rows_complete = 0
    for record in state.values():
        covered = sorted({seq for start, end, _, _ in record["frames"] for seq in range(start, end + 1)})
        complete += covered == every_seq and not record["gaps"]
        rows_complete += record["rows"] == every_seq
        latencies_ms += [ms for _, ms in event_latencies(record, created, watched_from)]
    frames = [len(record["frames"]) for record in state.values()]
    return {
        "benchmark": "live-view load",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": args.profile,
        "database": vendor,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average_1m": os.getloadavg()[0]},
        "run": {
            "tasks": args.tasks,
            "cap": args.cap,
            "workers": args.workers,
            "status": run.status,
            "events": run.last_event_seq,
            "seconds": round(run_s, 1),
        },
        "viewers": args.viewers,
        "viewers_with_every_event": complete,
        # A frame that brings more events than a page of the log (30) sends that page instead of
        # one row per event, by design: a fan-out of 198 tasks becoming ready at once is such a
        # frame. So not every event has a row.
        "viewers_with_a_log_row_for_every_event": rows_complete,
        "full_frames_per_viewer_median": statistics.median(
            sum(1 for frame in record["frames"] if frame[2]) for record in state.values()
        ),
        "viewers_reconnected": sum(1 for record in state.values() if record["connections"] > 1),
        "gaps_seen": sum(len(record["gaps"]) for record in state.values()),
        "frames_per_viewer": {"median": statistics.median(frames), "max": max(frames)},
        "bytes_per_viewer_median": statistics.median(record["bytes"] for record in state.values()),
        "largest_frame_bytes_median": statistics.median(record["largest"] for record in state.values()),
        "event_latency_ms": {
            "samples": len(latencies_ms),
            "p50": round(percentile(latencies_ms, 50), 1),
            "p95": round(percentile(latencies_ms, 95), 1),
            "p99": round(percentile(latencies_ms, 99), 1),
            "max": round(max(latencies_ms), 1) if latencies_ms else None,
        },
        "daphne_rss_mb": {
            "before_viewers": round(baseline_kb / 1024, 1),
            "peak": round(max(samples or [baseline_kb]) / 1024, 1),
            "end": round((samples[-1] if samples else baseline_kb) / 1024, 1),
        },
        "latency_is": "frame arrival at the viewer minus the event's created_at (inside its transaction)",
    }


def latency_by_type(state: dict, created: dict[int, float], types: dict[int, str], watched_from: int) -> dict:
    """p50 / p95 of the latency per event type, slowest p95 first: which events the tail is made of."""
    by_type: dict[str, list[float]] = {}
    for record in state.values():
        for seq, ms in event_latencies(record, created, watched_from):
            by_type.setdefault(types[seq], []).append(ms)
    rows = {
        type_: {
            "samples": len(values),
            "p50": round(percentile(values, 50), 1),
            "p95": round(percentile(values, 95), 1),
        }
        for type_, values in by_type.items()
    }
    return dict(sorted(rows.items(), key=lambda item: -item[1]["p95"]))


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    client = sub.add_parser("client", help="(internal) the viewers' process")
    client.add_argument("--url", required=True)
    client.add_argument("--cookie", required=True)
    client.add_argument("--origin", required=True)
    client.add_argument("--viewers", type=int, required=True)
    client.add_argument("--out", required=True)
    client.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--profile", choices=["embedded", "production"], default="embedded")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("GLASSBOX_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--redis-url", default=os.environ.get("GLASSBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--timeout", type=float, default=600.0, help="longest the run may take (seconds)")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results-live.json"))
    args = parser.parse_args(argv)
    if args.command != "client" and (args.tasks < 3 or args.viewers < 1):
        parser.error("--tasks must be at least 3 and --viewers at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command == "client":
        client_main(args)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-bench-live-"))
    try:
        with Profile(args, workdir) as profile:
            result = measure(args, profile)
    except BenchError as exc:
        print(f"bench-live: {exc} (logs in {workdir})", file=sys.stderr)
        return 1
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results[args.profile] = result
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
