"""The benchmark harness: profiles, qcluster processes, runs of the engine, and their metrics.

Two layers:

* the **orchestrator** (``run_benchmark``), a plain process that needs no database: for each
  profile it creates a fresh database (a SQLite file, or a PostgreSQL database plus a Redis key
  prefix and queue name of its own), starts a **profile runner** (``python -m bench.runner``)
  with that profile's environment, collects its JSON and removes everything it created;
* the **profile runner** (``run_profile``), a Django process on the benchmark database: it
  migrates, starts one qcluster (``python -m bench.worker``, i.e. ``qcluster`` with the
  benchmark hooks), and runs every scenario: the engine on each DAG and cap, the reference
  strategies (bench.strategies) on the same DAGs and durations, and the rate-limit storm.

Time stamps come from the rows the engine writes (Run.started_at / finished_at, Attempt
started_at / finished_at), never from polling, so the harness's own polling interval does not
enter any number.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import dags

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# The model every DAG run uses; the storm gives each strategy a model (and so budgets) of its own.
DAG_MODEL = "bench-sim"
# Sections 1-2: the simulated server has no limit (the same for every strategy: none binds); the
# engine's ProviderLimit carries a high requests-per-minute budget that no run reaches, so that
# admission does its rate-limit bookkeeping as in a deployment. Only the storm makes a limit bind.
DAG_ENGINE_RPM = 6000


class BenchError(RuntimeError):
    """The benchmark could not run or a run went wrong; the message says what and where."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- Configuration -------------------------------------------------------------------------------


@dataclass
class DagSpec:
    kind: str  # layered | fan | chain | random
    params: dict[str, Any]
    median_s: float
    sigma: float = 0.6
    seed: int = 1

    def build(self) -> dags.Dag:
        factory = {"layered": dags.layered, "fan": dags.fan, "chain": dags.chain, "random": dags.random_dag}[self.kind]
        return factory(**self.params, seed=self.seed, median_s=self.median_s, sigma=self.sigma)


@dataclass
class StormSpec:
    tasks: int = 22
    requests_per_minute: int = 16
    median_s: float = 1.0
    sigma: float = 0.3
    seed: int = 5
    waves_cap: int = 4
    ours_cap: int = 8
    # Where in its minute window the server limit's window is when the storm starts (seconds).
    phase_s: float = 50.0
    repeats: int = 1


@dataclass
class WidthSpec:
    """Many long independent agent calls at once on one small cluster: the agent host's width."""

    tasks: int = 500
    seconds: float = 20.0
    cap: int = 500
    workers: int = 2
    slots_per_worker: int = 250


@dataclass
class Config:
    mode: str  # "quick" | "full"
    profiles: list[str]
    repeats: int
    caps: list[int]
    dag_specs: list[DagSpec]
    storm: StormSpec | None
    workers: int
    gantt: tuple[str, int] = ("layered", 8)  # (dag kind, cap) of the run drawn as a Gantt chart
    # Live-view latency: {"viewers": [1, 50], "rates": [2, 20], "seconds": 8}, or None
    live_view: dict | None = None
    # Every DAG median is multiplied by this (longer tasks: less load on the engine per second)
    duration_scale: float = 1.0
    # Caps run in the repeats after the first (None: all caps in every repeat)
    repeat_caps: list[int] | None = None
    # Prefect run side by side with the engine, same DAG and cap, right after it (bench/peer.py)
    peer: bool = False
    width: WidthSpec | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Config:
        data = dict(data)
        data["dag_specs"] = [DagSpec(**d) for d in data["dag_specs"]]
        data["storm"] = StormSpec(**data["storm"]) if data.get("storm") else None
        data["width"] = WidthSpec(**data["width"]) if data.get("width") else None
        data["gantt"] = tuple(data["gantt"])
        return cls(**data)

    def scaled_specs(self) -> list[DagSpec]:
        return [
            DagSpec(spec.kind, spec.params, spec.median_s * self.duration_scale, spec.sigma, spec.seed)
            for spec in self.dag_specs
        ]

    def dag_list(self) -> list[dags.Dag]:
        return [spec.build() for spec in self.scaled_specs()]


def full_config(profiles: list[str], repeats: int = 3) -> Config:
    """The full benchmark: the issue's DAGs at caps 8 and 64 with Prefect side by side, the width
    test, the storm, the live view.

    About half an hour on 2 cores. Every repeat runs every cap, so each number is a median of
    ``repeats`` runs. Durations are lognormal (sigma 0.6); medians differ per DAG so that each run
    takes seconds to tens of seconds. The cluster is the default one: 2 worker processes, each an
    agent host of GLASSBOX_SLOTS_PER_WORKER (50) slots.
    """
    return Config(
        mode="full",
        profiles=profiles,
        repeats=repeats,
        caps=[8, 64],
        dag_specs=[
            DagSpec("layered", {"width": 10, "depth": 20}, median_s=0.3, seed=1),
            DagSpec("fan", {"width": 100}, median_s=0.5, seed=2),
            DagSpec("chain", {"length": 50}, median_s=0.25, seed=3),
            DagSpec("random", {"nodes": 300}, median_s=0.25, seed=4),
        ],
        storm=StormSpec(repeats=1),
        workers=2,
        live_view={"viewers": [1, 50], "rates": [2, 20], "seconds": 6},
        peer=True,
        width=WidthSpec(),
    )


def quick_config(profiles: list[str]) -> Config:
    """The smoke run: one small layered DAG at cap 4, one repeat, no storm (well under a minute)."""
    return Config(
        mode="quick",
        profiles=profiles,
        repeats=1,
        caps=[4],
        dag_specs=[DagSpec("layered", {"width": 4, "depth": 5}, median_s=0.3, seed=1)],
        storm=None,
        workers=2,
        gantt=("layered", 4),
    )


# --- The machine -----------------------------------------------------------------------------------


PROBE_STEPS = 10_000_000


def cpu_probe_s(repeats: int = 3) -> float:
    """Seconds a fixed pure-Python loop of `PROBE_STEPS` additions takes, best of `repeats`: the
    machine's speed for one thread on the day (~0.3 s on this project's 2-core EPYC machines on a
    normal day). The same loop at a module's top level (globals, so slower: 0.86 s that day) took
    1.5 s on a slow-CPU day, and every CPU-bound figure of that day's run moved with it (the
    statement counts did not), so two runs compare only beside their probes."""
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        total = 0
        for step in range(PROBE_STEPS):
            total += step
        best = min(best, time.perf_counter() - began)
    return round(best, 3)


def machine_info() -> dict:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def service_versions(env: dict[str, str]) -> dict:
    versions = {}
    if env.get("DATABASE_URL", "").startswith("postgres"):
        import psycopg

        with psycopg.connect(env["DATABASE_URL"], connect_timeout=5) as conn:
            versions["postgresql"] = conn.execute("show server_version").fetchone()[0]
    if env.get("REDIS_URL"):
        import redis

        client = redis.from_url(env["REDIS_URL"])
        versions["redis"] = client.info("server")["redis_version"]
        client.close()
    return versions


# --- Profiles: a database of our own for each ----------------------------------------------------


@dataclass
class Profile:
    name: str
    env: dict[str, str]
    workdir: Path
    description: str
    _cleanups: list = field(default_factory=list)

    def cleanup(self) -> None:
        for step in reversed(self._cleanups):
            try:
                step()
            except Exception as exc:  # keep cleaning the rest; say what was left behind
                log(f"cleanup of profile {self.name} failed: {type(exc).__name__}: {exc}")
        self._cleanups.clear()


def base_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLASSBOX_", "DATABASE_URL", "REDIS_URL"))}
    trace_dir = workdir / "traces"
    trace_dir.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "glassbox.settings",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "PYTHONUNBUFFERED": "1",
            # The profile as deployed: DEBUG off (Django then keeps no per-query log).
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(40),
            "LOG_LEVEL": "WARNING",
            "Q_LOG_LEVEL": "ERROR",
            "GLASSBOX_BENCH_TRACE_DIR": str(trace_dir),
        }
    )
    return env


def make_profile(name: str, workdir: Path, *, keep_database: bool = False) -> Profile:
    """A profile's environment in `workdir`; with `keep_database` its PostgreSQL database outlives
    the run (the embedded one is a file in `workdir`), for a look at the rows afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = base_env(workdir)
    token = f"{os.getpid()}-{secrets.token_hex(3)}"
    if name == "embedded":
        env["GLASSBOX_SQLITE_PATH"] = str(workdir / "bench.sqlite3")
        env["GLASSBOX_Q_NAME"] = f"glassbox-bench-{token}"
        return Profile(name, env, workdir, "SQLite (WAL) + django-q2 ORM broker + database rate limiter")
    if name == "production":
        import psycopg
        import redis

        admin_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_PG_URL)
        redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
        database = f"glassbox_bench_{token.replace('-', '_')}"
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
        except psycopg.Error as exc:
            raise BenchError(
                f"the production profile needs PostgreSQL at {admin_url} (set BENCH_DATABASE_URL): {exc}".strip()
            ) from exc
        client = redis.from_url(redis_url, socket_connect_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise BenchError(f"the production profile needs Redis at {redis_url} (set BENCH_REDIS_URL): {exc}") from exc
        prefix = f"glassbox-bench-{token}"
        env.update(
            {
                "DATABASE_URL": _with_database(admin_url, database),
                "REDIS_URL": redis_url,
                "GLASSBOX_REDIS_PREFIX": prefix,
                "GLASSBOX_Q_NAME": prefix,
            }
        )
        profile = Profile(
            name,
            env,
            workdir,
            "PostgreSQL (agent hosts commit asynchronously: GLASSBOX_HOST_SYNCHRONOUS_COMMIT=off)"
            " + django-q2 Redis broker + Redis rate limiter and channel layer",
        )

        def drop_database():
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

        def delete_redis_keys():
            keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()

        if keep_database:
            log(f"{name}: database {database} kept")
        profile._cleanups += [delete_redis_keys] if keep_database else [drop_database, delete_redis_keys]
        return profile
    raise BenchError(f"unknown profile {name!r}: use embedded or production")


def _with_database(url: str, database: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


# --- The qcluster -----------------------------------------------------------------------------------


class Cluster:
    """One ``python -m bench.worker`` process group (a qcluster with the benchmark hooks)."""

    def __init__(self, env: dict[str, str], workers: int, log_path: Path, **settings: str):
        self.env = {**env, "GLASSBOX_WORKERS": str(workers), **settings}
        self.workers = workers
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 90) -> None:
        """Until every worker process of the cluster is up (counted in the process group)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the qcluster exited with {self.proc.returncode}:\n{self.log_tail()}")
            # sentinel + monitor + pusher + timer + workers, all in the process group
            if len(self.pids()) >= self.workers + 3:
                time.sleep(1.0)  # let the workers connect and the pusher start polling
                return
            time.sleep(0.2)
        raise BenchError(f"the qcluster did not start {self.workers} workers in {timeout} s:\n{self.log_tail()}")

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid:  # field 5 of stat: process group id
                pids.append(int(entry))
        return pids

    def cpu_seconds(self) -> float:
        """User + system CPU of every live process of the cluster, with their reaped children."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # after the ")": state(0) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(11) stime(12) cutime cstime
            total += int(fields[11]) + int(fields[12])
        return total / ticks

    def rss_bytes(self) -> int:
        """Resident memory of every live process of the cluster, summed."""
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as handle:
                    for line in handle:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return total

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever the sentinel left behind
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.log_file.close()
        from orchestrator.orm_broker import sweep  # its pushers' sockets (the embedded profile's broker)

        sweep()


# --- Statistics --------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def rnd(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# --- The orchestrator -----------------------------------------------------------------------------


def raise_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt, so that `finally` blocks stop processes and drop databases."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def run_benchmark(config: Config, *, keep_workdir: bool = False) -> dict:
    """Run every profile of ``config`` in its own runner process; return the merged results."""
    raise_on_sigterm()
    started = time.monotonic()
    results: dict[str, Any] = {
        "mode": config.mode,
        "config": config.to_json(),
        "machine": {**machine_info(), **({"cpu_probe_s_at_start": cpu_probe_s()} if config.mode == "full" else {})},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "profiles": {},
    }
    root = Path(tempfile.mkdtemp(prefix="glassbox-bench-"))
    try:
        for name in config.profiles:
            profile = make_profile(name, root / name, keep_database=keep_workdir)
            try:
                results["profiles"][name] = run_profile_process(profile, config)
            finally:
                profile.cleanup()
    finally:
        if keep_workdir:
            log(f"work directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    if config.mode == "full":
        results["machine"]["cpu_probe_s_at_end"] = cpu_probe_s()
    from . import report

    results["summary"] = report.summarize(results)
    return results


def run_profile_process(profile: Profile, config: Config) -> dict:
    config_path = profile.workdir / "config.json"
    out_path = profile.workdir / "result.json"
    config_path.write_text(json.dumps(config.to_json()))
    log(f"profile {profile.name}: {profile.description}")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.runner",
            "--config",
            str(config_path),
            "--out",
            str(out_path),
            "--profile",
            profile.name,
            "--workdir",
            str(profile.workdir),
        ],
        cwd=ROOT,
        env=profile.env,
        stdout=sys.stderr,  # the runner's progress goes where ours goes; stdout stays for --json
        stderr=sys.stderr,
    )
    try:
        proc.wait()
    except BaseException:  # interrupted: let the runner stop its qcluster before we drop its database
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if proc.returncode != 0 or not out_path.exists():
        raise BenchError(f"the {profile.name} profile runner failed (exit {proc.returncode}); see the messages above")
    result = json.loads(out_path.read_text())
    result["description"] = profile.description
    result["services"] = service_versions(profile.env)
    return result
