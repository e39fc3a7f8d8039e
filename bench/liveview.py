"""Live-view latency: from an event's commit to its arrival at websocket viewers of the run.

The profile runner starts daphne (the project's ASGI application, the real RunConsumer of
dashboard/consumers.py) and a client process (``python -m bench.liveview``) holding N websocket
connections to ``/ws/runs/<id>/``, each logged in with a session cookie and sending the
protocol's ``resume``. The runner then commits events for that run at a fixed rate, one per
transaction through ``orchestrator.events.record`` (the same path the engine uses, so the
doorbell goes out after commit), and notes the time right after each commit. Each client
notes when each frame arrives and which sequence numbers it covers (``#live-seq``'s
``data-from`` / ``data-to``); latency = arrival − commit, for every (viewer, event).

The events come from the runner, a process of its own as the workers are: on the embedded
default the in-memory channel layer cannot reach daphne, and the consumer's poll of the Event
table delivers them; on Redis the channels_redis doorbell does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

SEQ = re.compile(r'id="live-seq"[^>]*data-from="(\d+)"[^>]*data-to="(\d+)"')


# --- The client process ------------------------------------------------------------------------------


async def _client(
    url: str, headers: dict, last_seq: int, stop: asyncio.Event, receipts: list, connected: asyncio.Event, errors: list
):
    from websockets.asyncio.client import connect

    try:
        async with connect(url, additional_headers=headers, open_timeout=30, max_size=None) as ws:
            await ws.send(json.dumps({"type": "resume", "last_seq": last_seq}))
            connected.set()
            while not stop.is_set():
                try:
                    frame = await asyncio.wait_for(ws.recv(), timeout=0.2)
                except TimeoutError:
                    continue
                now = time.time()
                match = SEQ.search(frame if isinstance(frame, str) else frame.decode())
                if match:
                    receipts.append((int(match.group(1)), int(match.group(2)), now))
    except Exception as exc:  # reported to the runner, which fails the measurement with it
        errors.append(f"{type(exc).__name__}: {exc}")
        connected.set()


async def _clients(args) -> dict:
    headers = {"Cookie": f"{args.cookie_name}={args.session}", "Origin": args.origin}
    receipts = [[] for _ in range(args.viewers)]
    connected = [asyncio.Event() for _ in range(args.viewers)]
    stop = asyncio.Event()
    errors: list[str] = []
    tasks = [
        asyncio.create_task(_client(args.url, headers, args.last_seq, stop, receipts[i], connected[i], errors))
        for i in range(args.viewers)
    ]
    await asyncio.gather(*(event.wait() for event in connected))
    Path(args.ready_file).write_text("ready")
    give_up = time.monotonic() + args.seconds
    while not Path(args.stop_file).exists() and time.monotonic() < give_up:
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks)
    return {"receipts": receipts, "errors": errors}


def clients_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.liveview")
    for name in ("url", "session", "cookie-name", "origin", "ready-file", "stop-file", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--viewers", type=int, required=True)
    parser.add_argument("--last-seq", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True, help="give up after this long without a stop file")
    args = parser.parse_args(argv)
    result = asyncio.run(_clients(args))
    Path(args.out).write_text(json.dumps(result))
    return 0


# --- In the profile runner (Django) ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Daphne:
    def __init__(self, env: dict[str, str], log_path: Path):
        self.port = free_port()
        self.log_path = log_path
        daphne = Path(sys.executable).with_name("daphne")
        self.log_file = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [str(daphne), "-b", "127.0.0.1", "-p", str(self.port), "glassbox.asgi:application"],
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        from .harness import BenchError

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"daphne exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise BenchError(f"daphne did not listen on port {self.port} within {timeout} s")

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log_file.close()


def viewer_session() -> str:
    """A logged-in session (a superuser made for the benchmark) for the websocket clients."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    User = get_user_model()
    user = User.objects.filter(username="bench-viewer").first() or User.objects.create_superuser(
        "bench-viewer", "bench@example.invalid", None
    )
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def watched_run():
    """A run with one task that stays ready (its agent is retired), so nothing but us writes events."""
    from orchestrator import plans
    from orchestrator.engine import runs
    from orchestrator.models import Agent, Plan

    agent, _ = Agent.objects.update_or_create(
        name="bench-liveview", defaults={"role": "Live-view benchmark", "status": Agent.Status.ACTIVE}
    )
    spec = plans.validate(
        {"goal": "Live-view benchmark", "subtasks": [{"key": "watched", "agent": agent.name, "title": "Watched task"}]}
    )
    plan = plans.save_plan(spec, source=Plan.Source.MANUAL)
    Agent.objects.filter(pk=agent.pk).update(status=Agent.Status.RETIRED)
    return runs.launch(plan, cap=1)


def commit_events(run, task, count: int, rate: float) -> dict[int, float]:
    """Commit ``count`` task.progress events at ``rate`` per second; {seq: Unix time after commit}."""
    from django.db import transaction

    from orchestrator import events

    committed: dict[int, float] = {}
    start = time.monotonic()
    for i in range(count):
        target = start + i / rate
        pause = target - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        with transaction.atomic():
            event = events.record(
                "task.progress", run=run, task=task, payload={"progress": i % 100, "output_tokens": i, "chars": i}
            )
        committed[event.seq] = time.time()
    return committed


def measure(
    env: dict[str, str], workdir: Path, viewers: int, rate: float, seconds: float, daphne: Daphne, session: str, run
) -> dict:
    from django.conf import settings

    from .harness import BenchError, percentile, rnd

    task = run.tasks.get()
    run.refresh_from_db()
    ready_file = workdir / f"clients-{viewers}-{rate}.ready"
    out_file = workdir / f"clients-{viewers}-{rate}.json"
    stop_file = workdir / f"clients-{viewers}-{rate}.stop"
    for path in (ready_file, out_file, stop_file):
        path.unlink(missing_ok=True)
    count = int(rate * seconds)
    clients = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.liveview",
            "--url",
            f"ws://127.0.0.1:{daphne.port}/ws/runs/{run.pk}/",
            "--session",
            session,
            "--cookie-name",
            settings.SESSION_COOKIE_NAME,
            "--origin",
            f"http://127.0.0.1:{daphne.port}",
            "--ready-file",
            str(ready_file),
            "--stop-file",
            str(stop_file),
            "--out",
            str(out_file),
            "--viewers",
            str(viewers),
            "--last-seq",
            str(run.last_event_seq),
            "--seconds",
            str(seconds + 45),
        ],
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    deadline = time.monotonic() + 60
    while not ready_file.exists():
        if clients.poll() is not None or time.monotonic() > deadline:
            clients.kill()
            raise BenchError(f"the {viewers} websocket clients did not connect (see {daphne.log_path})")
        time.sleep(0.1)
    commit_events(run, task, 2, 2.0)  # warm-up: templates compiled, connections open (not counted)
    time.sleep(1.0)
    committed = commit_events(run, task, count, rate)
    last = max(committed)
    # Give the viewers time to receive the last event, then stop them (they stop by themselves too).
    time.sleep(3.0)
    stop_file.write_text("stop")
    try:
        clients.wait(timeout=60)
    except subprocess.TimeoutExpired:
        clients.kill()
        clients.wait()
    if clients.returncode != 0 or not out_file.exists():
        raise BenchError(f"the websocket clients failed (exit {clients.returncode}); daphne's log: {daphne.log_path}")
    result = json.loads(out_file.read_text())
    if result["errors"]:
        raise BenchError(f"websocket clients failed: {result['errors'][:3]}")
    latencies, missing = [], 0
    for receipts in result["receipts"]:
        seen: dict[int, float] = {}
        for first, to, at in receipts:
            for seq in range(first, to + 1):
                seen.setdefault(seq, at)
        for seq, at in committed.items():
            if seq in seen:
                latencies.append((seen[seq] - at) * 1000)
            else:
                missing += 1
    return {
        "viewers": viewers,
        "events_per_s": rate,
        "events": count,
        "samples": len(latencies),
        "missing": missing,
        "p50_ms": rnd(percentile(latencies, 50), 1),
        "p95_ms": rnd(percentile(latencies, 95), 1),
        "max_ms": rnd(max(latencies), 1) if latencies else None,
        "last_seq": last,
    }


if __name__ == "__main__":
    sys.exit(clients_main())
