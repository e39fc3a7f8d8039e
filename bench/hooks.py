"""Benchmark-only instrumentation, installed into the benchmark's own processes and nowhere else.

`install()` is called by ``bench.worker`` (the benchmark's qcluster entry point, before django-q2
forks its workers, so every worker inherits it) and by the benchmark runner process. It does
two things, both switched on by the environment variable ``GLASSBOX_BENCH_TRACE_DIR``:

* **Per-node durations.** An agent whose ``provider_options`` holds a ``"bench"`` entry
  (``{"seed": S, "median_s": M, "sigma": G}``) gets, for every attempt of subtask ``key``, the
  duration ``bench.dags.duration_s(S, key, M, G)`` instead of the simulated provider's own
  draw, so that the engine and the reference strategies sleep exactly the same time per node.
  Everything else in the simulated provider (server limit, 429 answers, streamed slices,
  generated text) is untouched.
* **CPU accounting.** ``scheduler.advance``, ``execution.claim_attempt``,
  ``attempt_ends.complete`` (and ``complete_all``, both traced as ``complete``) and ``reaper.tick``
  are wrapped to measure the CPU time of the calling thread (``time.thread_time``, so the ticker
  thread and the host's database threads are told apart), the wall time and the SQL statements of each call. Every call appends one JSON line to
  ``<trace dir>/<pid>.jsonl``: ``{"f", "run", "cpu", "wall", "t", "n", "q"}``. The engine looks
  these functions up as module attributes (``scheduler.advance(...)``), so wrapping the module
  attribute catches every caller.

The engine itself never imports this module.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

TRACE_ENV = "GLASSBOX_BENCH_TRACE_DIR"

_installed = False
_lock = threading.Lock()
_files: dict[int, object] = {}


def trace_dir() -> str | None:
    return os.environ.get(TRACE_ENV) or None


def _write(record: dict) -> None:
    directory = trace_dir()
    if directory is None:
        return
    pid = os.getpid()
    with _lock:
        handle = _files.get(pid)
        if handle is None:  # one file per process (a forked child opens its own)
            handle = open(os.path.join(directory, f"{pid}.jsonl"), "a", buffering=1)
            _files[pid] = handle
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def _run_id_of(name: str, args, result) -> int | None:
    if name == "advance":
        return args[0] if args else None
    if name == "claim_attempt":  # execution.claim_attempts: the claims by attempt id
        return next(iter(result.values())).task.run_id if result else None
    if name == "complete":  # attempt_ends.complete(claim, ...), or complete_all(run_id, successes, ...)
        return (args[0] if isinstance(args[0], int) else args[0].task.run_id) if args else None
    return None


def _count_of(name: str, result) -> int | None:
    if name == "advance":
        return len(result.admitted)
    if name == "tick":
        return int(result.get("advanced", 0)) if isinstance(result, dict) else None
    return None


def timed(name: str, func):
    """``func`` wrapped so that each call writes its thread CPU and wall time, and the number of SQL
    statements it ran, to the trace."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from django.db import connection

        statements = [0]

        def count(execute, sql, params, many, context):
            statements[0] += 1
            return execute(sql, params, many, context)

        cpu0, wall0 = time.thread_time(), time.perf_counter()
        with connection.execute_wrapper(count):
            result = func(*args, **kwargs)
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
        _write(
            {
                "f": name,
                "run": _run_id_of(name, args, result),
                "cpu": round(cpu, 6),
                "wall": round(wall, 6),
                "t": round(time.time(), 6),
                "n": _count_of(name, result),
                "q": statements[0],
            }
        )
        return result

    wrapper.__bench_wrapped__ = func
    return wrapper


def bench_duration(options: dict, request_seed: str) -> float | None:
    """The benchmark's duration for a request, or None when the agent is not a benchmark agent."""
    from . import dags

    spec = (options or {}).get("bench")
    if not isinstance(spec, dict):
        return None
    key = request_seed.split(":", 1)[1] if ":" in request_seed else request_seed
    return dags.duration_s(int(spec["seed"]), key, float(spec["median_s"]), float(spec["sigma"]))


def install() -> None:
    """Wrap the engine functions and the simulated provider's draw. Idempotent."""
    global _installed
    if _installed:
        return
    from orchestrator.engine import attempt_ends, execution, reaper, scheduler
    from orchestrator.providers import simulated

    scheduler.advance = timed("advance", scheduler.advance)
    execution.claim_attempts = timed("claim_attempt", execution.claim_attempts)  # claim_attempt's too
    attempt_ends.complete = timed("complete", attempt_ends.complete)
    attempt_ends.complete_all = timed("complete", attempt_ends.complete_all)  # an agent host's successes
    reaper.tick = timed("tick", reaper.tick)

    original_draw = simulated.SimulatedProvider.draw_latency_s

    def draw_latency_s(self, request):
        duration = bench_duration(request.options, request.seed)
        if duration is None:
            return original_draw(self, request)
        _write(
            {
                "f": "provider",
                "seed": request.seed,
                "d": duration,
                "attempt": request.attempt,
                "t": round(time.time(), 6),
            }
        )
        return duration

    simulated.SimulatedProvider.draw_latency_s = draw_latency_s
    _installed = True
