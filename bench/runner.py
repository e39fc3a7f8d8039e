"""The profile runner: ``python -m bench.runner --config FILE --out FILE --profile NAME --workdir DIR``.

A Django process on the benchmark's own database (its environment comes from
bench.harness.make_profile). It migrates, starts the benchmark qcluster, runs every scenario of
the configuration and writes one JSON document. Started by bench.harness.run_benchmark only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from . import dags, strategies
from .harness import (
    DAG_ENGINE_RPM,
    DAG_MODEL,
    BenchError,
    Cluster,
    Config,
    DagSpec,
    StormSpec,
    WidthSpec,
    log,
    percentile,
    rnd,
)


def live_view_missing() -> str:
    """Why the live-view latency cannot be measured here ("" when it can)."""
    try:
        import websockets  # noqa: F401
    except ImportError:
        return "the websockets package is not installed (pip install -e '.[bench]')"
    try:
        from dashboard.routing import websocket_urlpatterns
    except Exception as exc:  # a consumer that does not import is as good as none
        return f"dashboard.routing does not import: {type(exc).__name__}: {exc}"
    if not any("ws/runs/" in str(p.pattern) for p in websocket_urlpatterns):
        return "no websocket route /ws/runs/<id>/ (dashboard/consumers.py) in dashboard/routing.py"
    return ""


# --- Setting up agents and plans -------------------------------------------------------------------


def bench_agent(name: str, dag: dags.Dag, model: str, server_rpm: int | None):
    """An active simulated agent whose durations are the DAG's (see bench.hooks) and no cap of its own."""
    from orchestrator.models import Agent

    options = {
        "latency": {"dist": "lognormal", "median_s": dag.median_s, "sigma": dag.sigma},
        "bench": {"seed": dag.seed, "median_s": dag.median_s, "sigma": dag.sigma},
    }
    if server_rpm:
        options["server_limit"] = {"requests_per_minute": server_rpm}
    agent, _ = Agent.objects.update_or_create(
        name=name,
        defaults={
            "role": "Benchmark agent",
            "provider": "simulated",
            "model": model,
            "provider_options": options,
            "max_concurrency": 1000,
            "timeout_s": 300,
            "max_retries": 3,
            "max_output_tokens": 512,
            "status": Agent.Status.ACTIVE,
        },
    )
    return agent


def provider_limit(model: str, requests_per_minute: int | None):
    from orchestrator.models import ProviderLimit

    limit, _ = ProviderLimit.objects.update_or_create(
        provider="simulated", model=model, defaults={"requests_per_minute": requests_per_minute}
    )
    return limit


def save_plan(dag: dags.Dag, agent):
    from orchestrator import plans
    from orchestrator.models import Plan

    ups = dag.upstreams
    data = {
        "goal": f"Benchmark DAG {dag.name} (seed {dag.seed})",
        "subtasks": [
            {
                "key": key,
                "agent": agent.name,
                "title": key,
                "instructions": f"Benchmark node {key}.",
                "depends_on": ups[key],
            }
            for key in dag.keys
        ],
    }
    return plans.save_plan(plans.validate(data), source=Plan.Source.MANUAL)


# --- Running the engine -----------------------------------------------------------------------------


def wait_for_run(run_id: int, timeout_s: float, cluster: Cluster):
    from orchestrator.models import Run, TaskRun

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = Run.objects.filter(pk=run_id).values_list("status", flat=True).get()
        if status in Run.FINISHED:
            return Run.objects.get(pk=run_id)
        if cluster.proc.poll() is not None:
            raise BenchError(f"the qcluster died during run {run_id}:\n{cluster.log_tail()}")
        time.sleep(0.2)
    states = defaultdict(int)
    for state in TaskRun.objects.filter(run_id=run_id).values_list("state", flat=True):
        states[state] += 1
    raise BenchError(
        f"run {run_id} did not finish in {timeout_s:.0f} s; task states {dict(states)}\n{cluster.log_tail()}"
    )


def launch_run(plan, cap: int):
    from orchestrator.engine import runs

    return runs.launch(plan, cap=cap, budget_usd=Decimal("1000"))


def run_metrics(run, dag: dags.Dag, cap: int, *, timeline: bool = False) -> dict:
    """Makespan, lower bound, efficiency and dispatch latencies of a finished run, from its rows."""
    from orchestrator.models import Attempt, TaskRun

    keys = dict(TaskRun.objects.filter(run=run).values_list("pk", "subtask__key"))
    done = {}
    attempts = 0
    for row in Attempt.objects.filter(task_run__run=run).values(
        "task_run_id", "state", "worker", "started_at", "finished_at"
    ):
        attempts += 1
        if row["state"] == Attempt.State.SUCCEEDED:
            done[keys[row["task_run_id"]]] = row
    if run.status != "succeeded" or len(done) != len(dag.keys):
        raise BenchError(f"run {run.pk} ({dag.name}, cap {cap}) ended {run.status}: {run.summary}")
    t0 = run.started_at
    start = {k: (r["started_at"] - t0).total_seconds() for k, r in done.items()}
    end = {k: (r["finished_at"] - t0).total_seconds() for k, r in done.items()}
    ups = dag.upstreams
    # Dispatch latency: from the moment a node could run (every upstream finished AND a slot
    # under the cap was free) to its attempt's claim. Slots are tokens: `cap` free at launch,
    # one more at each finish, handed to the starts in start order.
    data_ready = {k: max((end[u] for u in ups[k]), default=0.0) for k in dag.keys}
    tokens = sorted([0.0] * cap + sorted(end.values()))
    dispatch_ms = []
    for index, key in enumerate(sorted(dag.keys, key=start.__getitem__)):
        eligible = max(data_ready[key], tokens[index])
        dispatch_ms.append(max(0.0, start[key] - eligible) * 1000)
    makespan = (run.finished_at - run.started_at).total_seconds()
    bound = dag.lower_bound_s(cap)
    result = {
        "run": run.pk,
        "makespan_s": rnd(makespan, 4),
        "lower_bound_s": rnd(bound, 4),
        "policy_s": rnd(dags.policy_schedule_s(dag, cap), 4),
        "efficiency": rnd(bound / makespan, 4),
        "dispatch_p50_ms": rnd(percentile(dispatch_ms, 50), 2),
        "dispatch_p95_ms": rnd(percentile(dispatch_ms, 95), 2),
        "dispatch_max_ms": rnd(max(dispatch_ms), 2),
        "peak_running": run.peak_running,
        "attempts": attempts,
        # from the last node's end to the run's end (the final advance)
        "finish_overhead_ms": rnd((makespan - max(end.values())) * 1000, 1),
    }
    if timeline:
        result["timeline"] = [
            {
                "key": k,
                "start": round(start[k], 4),
                "end": round(end[k], 4),
                "worker": done[k]["worker"],
                "ready": round(data_ready[k], 4),
            }
            for k in sorted(dag.keys, key=start.__getitem__)
        ]
    return result


# --- Traces (bench.hooks) ------------------------------------------------------------------------------


def read_traces(trace_dir: Path) -> list[dict]:
    records = []
    for path in sorted(trace_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by a killed process
    return records


def trace_costs(records: list[dict]) -> dict[int, dict]:
    """Per run: CPU and wall seconds spent in advance / claim_attempt / complete, call counts and
    SQL statements."""
    per_run: dict[int, dict] = defaultdict(lambda: defaultdict(float))
    for r in records:
        if r.get("f") in ("advance", "claim_attempt", "complete") and r.get("run") is not None:
            costs = per_run[r["run"]]
            costs[f"{r['f']}_cpu_s"] += r["cpu"]
            costs[f"{r['f']}_wall_s"] += r["wall"]
            costs[f"{r['f']}_calls"] += 1
            costs[f"{r['f']}_statements"] += r.get("q") or 0
    return per_run


def check_durations(records: list[dict], plans_by_id: dict[int, dags.Dag]) -> int:
    """Every simulated request of a benchmark plan slept the DAG's duration for its node."""
    checked = 0
    for r in records:
        if r.get("f") != "provider":
            continue
        prefix, key = r["seed"].split(":", 1)
        dag = plans_by_id.get(int(prefix)) if prefix.isdigit() else None
        if dag is None:
            continue
        if abs(dag.durations[key] - r["d"]) > 1e-9:
            raise BenchError(f"node {key} of {dag.name} slept {r['d']} s instead of {dag.durations[key]} s")
        checked += 1
    return checked


# --- The profile run ---------------------------------------------------------------------------------


class ProfileRunner:
    def __init__(self, name: str, config: Config, workdir: Path):
        self.name = name
        self.config = config
        self.workdir = workdir
        self.trace_dir = Path(os.environ["GLASSBOX_BENCH_TRACE_DIR"])
        self.cluster = Cluster(dict(os.environ), config.workers, workdir / "qcluster.log")
        self.plans_by_id: dict[int, dags.Dag] = {}

    def run(self) -> dict:
        started = time.monotonic()
        peer = None
        if self.config.peer:
            from .peer import PrefectPeer

            peer = PrefectPeer(self.workdir)
            peer.start()
            log(f"{self.name}: Prefect peer is up")
        self.cluster.start()
        try:
            self.cluster.wait_ready()
            log(f"{self.name}: qcluster with {self.config.workers} workers is up")
            self.warm_up()
            ours, waves, naive, prefect = self.dag_sweep(peer)
            if peer is not None:
                peer.stop()
                peer = None
            storm = self.storm() if self.config.storm else []
            live = self.live_view() if self.config.live_view else None
        finally:
            if peer is not None:
                peer.stop()
            self.cluster.stop()
        width = self.width(self.config.width) if self.config.width else None
        records = read_traces(self.trace_dir)
        checked = check_durations(records, self.plans_by_id)
        costs = trace_costs(records)
        for row in ours:
            c = costs.get(row["run"], {})
            nodes = row["nodes"]
            row["advance_calls"] = int(c.get("advance_calls", 0))
            row["advance_cpu_ms_per_task"] = rnd(1000 * c.get("advance_cpu_s", 0.0) / nodes, 3)
            row["advance_wall_ms_per_task"] = rnd(1000 * c.get("advance_wall_s", 0.0) / nodes, 3)
            row["claim_cpu_ms_per_task"] = rnd(1000 * c.get("claim_attempt_cpu_s", 0.0) / nodes, 3)
            row["complete_cpu_ms_per_task"] = rnd(1000 * c.get("complete_cpu_s", 0.0) / nodes, 3)
            calls = c.get("advance_calls") or 0
            row["advance_statements_per_call"] = rnd(c.get("advance_statements", 0) / calls, 1) if calls else None
            row["claim_statements"] = rnd(c.get("claim_attempt_statements", 0) / nodes, 1)
            row["complete_statements"] = rnd(c.get("complete_statements", 0) / nodes, 1)
        return {
            "profile": self.name,
            "elapsed_s": round(time.monotonic() - started, 1),
            "durations_checked": checked,
            "ours": ours,
            "waves": waves,
            "naive": naive,
            "storm": storm,
            "live_view": live,
            "prefect": prefect,
            "width": width,
        }

    def live_view(self) -> dict:
        from . import liveview

        spec = self.config.live_view
        missing = live_view_missing()
        if missing:
            log(f"{self.name}: live-view latency left out: {missing}")
            return {"skipped": missing}
        daphne = liveview.Daphne(dict(os.environ), self.workdir / "daphne.log")
        try:
            daphne.wait_ready()
            session = liveview.viewer_session()
            run = liveview.watched_run()
            rows = []
            for viewers in spec["viewers"]:
                for rate in spec["rates"]:
                    row = liveview.measure(
                        dict(os.environ), self.workdir, viewers, rate, spec["seconds"], daphne, session, run
                    )
                    log(
                        f"{self.name} live view: {viewers:>2} viewers, {rate:>4} events/s: p50 {row['p50_ms']} ms, "
                        f"p95 {row['p95_ms']} ms ({row['samples']} samples, {row['missing']} missing)"
                    )
                    rows.append(row)
            return {"rows": rows}
        finally:
            daphne.stop()

    def warm_up(self) -> None:
        """One small run first: worker imports, connections and caches are then warm for every strategy."""
        dag = dags.chain(6, seed=99, median_s=0.1, sigma=0.1)
        agent = bench_agent("bench-warmup", dag, DAG_MODEL, None)
        plan = save_plan(dag, agent)
        self.plans_by_id[plan.pk] = dag
        run = launch_run(plan, cap=2)
        wait_for_run(run.pk, 60, self.cluster)
        strategies.waves(dag, 2, strategies.ProviderCall(agent))

    def dag_sweep(self, peer=None) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
        """The engine on every DAG and cap; waves (same cap) and naive run at the same time, in threads;
        the Prefect peer (when there is one) right after, on the same DAG and cap.

        The reference strategies sleep in threads of this process and touch no database (the
        simulated server has no limit in this section), so running them alongside the engine
        costs it almost nothing and puts both on exactly the same machine state; they start right
        after the engine's launch (which runs in this process), not before it. Prefect runs
        tasks in a thread pool of its own process with a local server: it is run after the
        engine, not beside it, so neither takes the other's CPU.
        """
        from concurrent.futures import ThreadPoolExecutor

        provider_limit(DAG_MODEL, DAG_ENGINE_RPM)
        prepared: list[tuple[dags.Dag, DagSpec, object, object]] = []
        for spec in self.config.scaled_specs():
            dag = spec.build()
            agent = bench_agent(f"bench-{dag.kind}", dag, DAG_MODEL, None)
            plan = save_plan(dag, agent)
            self.plans_by_id[plan.pk] = dag
            prepared.append((dag, spec, agent, plan))
        ours, waves, naive, prefect = [], [], [], []
        gantt_kind, gantt_cap = self.config.gantt
        for repeat in range(self.config.repeats):
            caps = self.config.caps if repeat == 0 or not self.config.repeat_caps else self.config.repeat_caps
            for dag, spec, agent, plan in prepared:
                call = strategies.ProviderCall(agent)
                for index, cap in enumerate(caps):
                    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="reference") as pool:
                        cpu0 = self.cluster.cpu_seconds()
                        # The engine's run is launched first: its launch runs in this process, and
                        # the strategies' first burst of threads would hold the GIL against it.
                        run = launch_run(plan, cap)
                        waves_future = pool.submit(strategies.waves, dag, cap, call)
                        naive_future = pool.submit(strategies.naive, dag, call) if index == 0 else None
                        run = wait_for_run(run.pk, 120 + 5 * dag.lower_bound_s(cap), self.cluster)
                        cluster_cpu = self.cluster.cpu_seconds() - cpu0
                        theirs = waves_future.result()
                        their_naive = naive_future.result() if naive_future else None
                    row = run_metrics(
                        run, dag, cap, timeline=(repeat == 0 and dag.kind == gantt_kind and cap == gantt_cap)
                    )
                    row.update(
                        {
                            "dag": dag.kind,
                            "dag_name": dag.name,
                            "nodes": len(dag.keys),
                            "cap": cap,
                            "repeat": repeat,
                            "cluster_cpu_ms_per_task": rnd(1000 * cluster_cpu / len(dag.keys), 2),
                        }
                    )
                    ours.append(row)
                    waves.append(
                        {
                            **theirs.to_json(),
                            "dag": dag.kind,
                            "repeat": repeat,
                            "lower_bound_s": rnd(dag.lower_bound_s(cap), 4),
                        }
                    )
                    line = (
                        f"{self.name} r{repeat} {dag.name:>14} cap {cap:>2}: ours {row['makespan_s']:.2f} s "
                        f"(bound {row['lower_bound_s']:.2f}, eff {row['efficiency']:.3f}, dispatch p95 "
                        f"{row['dispatch_p95_ms']:.0f} ms) "
                        f"waves {theirs.makespan_s:.2f} s"
                    )
                    if their_naive is not None:
                        naive.append(
                            {
                                **their_naive.to_json(),
                                "dag": dag.kind,
                                "repeat": repeat,
                                "lower_bound_s": rnd(dag.lower_bound_s(None), 4),
                            }
                        )
                        line += f" naive {their_naive.makespan_s:.2f} s"
                    if peer is not None:
                        peer_row = peer.run(spec, cap)
                        prefect.append({**peer_row, "dag": dag.kind, "cap": cap, "repeat": repeat})
                        line += f" prefect {peer_row['makespan_s']:.2f} s"
                    log(line)
        return ours, waves, naive, prefect

    # --- The width test -------------------------------------------------------------------------

    def width(self, spec: WidthSpec) -> dict:
        """`tasks` independent calls of `seconds` each at cap `cap` on one qcluster of `workers`
        processes (agent hosts of `slots_per_worker` slots): makespan, peak in flight, the
        cluster's memory and CPU per task."""
        import threading

        from orchestrator.models import Attempt

        dag = dags.independent(spec.tasks, seed=7, median_s=spec.seconds, sigma=0.0)
        agent = bench_agent("bench-width", dag, DAG_MODEL, None)
        plan = save_plan(dag, agent)
        self.plans_by_id[plan.pk] = dag
        cluster = Cluster(
            dict(os.environ),
            spec.workers,
            self.workdir / "qcluster-width.log",
            GLASSBOX_SLOTS_PER_WORKER=str(spec.slots_per_worker),
        )
        cluster.start()
        peak_rss = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                peak_rss[0] = max(peak_rss[0], cluster.rss_bytes())

        try:
            cluster.wait_ready()
            idle_rss = cluster.rss_bytes()
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            cpu0 = cluster.cpu_seconds()
            run = launch_run(plan, spec.cap)
            run = wait_for_run(run.pk, 120 + 5 * spec.seconds, cluster)
            cpu = cluster.cpu_seconds() - cpu0
            done.set()
            sampler.join()
        finally:
            done.set()
            cluster.stop()
        if run.status != "succeeded":
            raise BenchError(f"width run {run.pk} ended {run.status}: {run.summary}")
        rows = Attempt.objects.filter(task_run__run=run, state=Attempt.State.SUCCEEDED)
        intervals = [(a.started_at.timestamp(), a.finished_at.timestamp()) for a in rows]
        points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
        peak = current = 0
        for _, step in points:
            current += step
            peak = max(peak, current)
        makespan = (run.finished_at - run.started_at).total_seconds()
        t0 = run.started_at.timestamp()
        starts = sorted(start - t0 for start, _ in intervals)
        ends = sorted(end - t0 for _, end in intervals)
        row = {
            **{k: getattr(spec, k) for k in ("tasks", "seconds", "cap", "workers", "slots_per_worker")},
            # Where the time beyond one call goes: the spread of the starts and of the ends.
            "first_start_s": rnd(starts[0], 3),
            "last_start_s": rnd(starts[-1], 3),
            "first_end_s": rnd(ends[0], 3),
            "last_end_s": rnd(ends[-1], 3),
            "median_call_s": rnd(percentile([end - start for start, end in intervals], 50), 3),
            "run": run.pk,
            "makespan_s": rnd(makespan, 3),
            "lower_bound_s": spec.seconds,
            "peak_in_flight": peak,
            "cluster_rss_mib_idle": rnd(idle_rss / 2**20, 1),
            "cluster_rss_mib_peak": rnd(peak_rss[0] / 2**20, 1),
            "cluster_cpu_ms_per_task": rnd(1000 * cpu / spec.tasks, 2),
        }
        log(
            f"{self.name} width: {spec.tasks} x {spec.seconds:.0f} s at cap {spec.cap} on {spec.workers} workers: "
            f"{makespan:.1f} s, peak {peak} in flight, {row['cluster_rss_mib_peak']} MiB, "
            f"{row['cluster_cpu_ms_per_task']} ms CPU per task"
        )
        return row

    # --- The rate-limit storm ---------------------------------------------------------------------

    def storm(self) -> list[dict]:
        spec: StormSpec = self.config.storm
        rows = []
        for repeat in range(spec.repeats):
            rows += self.storm_once(spec, repeat)
        return rows

    def storm_once(self, spec: StormSpec, repeat: int) -> list[dict]:
        """Every strategy at once, each against its own model (its own server budget), same phase."""
        import threading

        dag = dags.independent(spec.tasks, seed=spec.seed, median_s=spec.median_s, sigma=spec.sigma)
        tag = f"{repeat}-{int(time.time())}"
        setups = {}
        for strategy in ("naive", "waves", "ours_adaptive", "ours_configured"):
            model = f"storm-{strategy}-{tag}"
            agent = bench_agent(f"storm-{strategy}", dag, model, spec.requests_per_minute)
            configured = spec.requests_per_minute if strategy == "ours_configured" else None
            provider_limit(model, configured)
            plan = save_plan(dag, agent) if strategy.startswith("ours") else None
            if plan is not None:
                self.plans_by_id[plan.pk] = dag
            setups[strategy] = (agent, model, plan)
        first_window_end = self.align_window(spec, [m for _, m, _ in setups.values()])
        results: dict[str, dict] = {}
        errors: list[BaseException] = []

        def reference(name: str, func):
            try:
                results[name] = {"result": func(), "t0": None}
            except BaseException as exc:  # reported below, with the strategy's name
                errors.append(BenchError(f"storm strategy {name} failed: {exc}"))

        agent_n = setups["naive"][0]
        agent_w = setups["waves"][0]
        threads = [
            threading.Thread(
                target=reference, args=("naive", lambda: strategies.naive(dag, strategies.ProviderCall(agent_n)))
            ),
            threading.Thread(
                target=reference,
                args=("waves", lambda: strategies.waves(dag, spec.waves_cap, strategies.ProviderCall(agent_w))),
            ),
        ]
        launched = {}
        for thread in threads:
            thread.start()
        for name in ("ours_adaptive", "ours_configured"):
            launched[name] = launch_run(setups[name][2], spec.ours_cap)
        for name, run in launched.items():
            launched[name] = wait_for_run(run.pk, 600, self.cluster)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        rows = []
        for name in ("naive", "waves", "ours_adaptive", "ours_configured"):
            if name in results:
                rows.append(
                    self.storm_row_reference(name, results[name]["result"], dag, spec, first_window_end, repeat)
                )
            else:
                rows.append(self.storm_row_ours(name, launched[name], dag, spec, first_window_end, repeat))
        for row in rows:
            log(
                f"{self.name} storm r{repeat} {row['strategy']:>15}: {row['makespan_s']:.1f} s (bound {row['bound_s']:.1f}), "
                f"{row['rate_limited']} x 429, {row['rate_limited_after_first_backoff']} after the first back-off"
            )
        return rows

    def align_window(self, spec: StormSpec, models: list[str]) -> float:
        """Start the storm at ``spec.phase_s`` into the server limit's current minute window.

        Both limiters' windows are aligned on the wall clock, each minute (the database's and
        ratelimit.AlignedRedisStorage): wait for the phase. Returns the Unix time at which the
        current window ends. `models`: the storm's models, whose budgets start empty.
        """
        from orchestrator import ratelimit

        for model in models:
            for key in (f"sim-server:{model}:rpm", f"admit:simulated:{model}:rpm"):
                ratelimit.reset(key)
        now = time.time()
        wait = (spec.phase_s - now % 60) % 60
        log(f"{self.name} storm: waiting {wait:.0f} s for second {spec.phase_s:.0f} of the minute window")
        time.sleep(wait)
        return math.floor(time.time() / 60) * 60 + 60

    def storm_bound(self, dag, spec, start_unix: float, first_window_end: float) -> float:
        accept = strategies.sliding_window_accept_times(
            start_unix, len(dag.keys), spec.requests_per_minute, first_window_end
        )
        return strategies.rate_limit_bound_s(list(dag.durations.values()), accept, start_unix)

    def storm_row_reference(self, name, result: strategies.StrategyResult, dag, spec, first_window_end, repeat) -> dict:
        bound = self.storm_bound(dag, spec, result.started_at, first_window_end)
        return {
            "strategy": name,
            "repeat": repeat,
            "cap": result.cap,
            "makespan_s": rnd(result.makespan_s, 3),
            "bound_s": rnd(bound, 3),
            "vs_bound": rnd(result.makespan_s / bound, 3),
            "rate_limited": result.rate_limited,
            "retries": result.retries,
            "rate_limited_after_first_backoff": result.rate_limited_after_first_backoff(),
            "timeline": [
                {
                    "key": r.key,
                    "start": round(r.start, 3),
                    "end": round(r.end, 3),
                    "rate_limited": [round(sent, 3) for sent, _ in r.rate_limited],
                }
                for r in result.records
            ],
        }

    def storm_row_ours(self, name, run, dag, spec, first_window_end, repeat) -> dict:
        from orchestrator.models import Attempt, Event

        if run.status != "succeeded":
            raise BenchError(f"storm run {run.pk} ({name}) ended {run.status}: {run.summary}")
        t0 = run.started_at
        attempts = list(
            Attempt.objects.filter(task_run__run=run).select_related("task_run__subtask").order_by("started_at")
        )
        limited = [a for a in attempts if a.error.startswith("429")]
        # 429s to requests sent after the first back-off had ended (provider.backoff event + its wait)
        first = Event.objects.filter(run=run, type="provider.backoff").order_by("id").first()
        after = 0
        if first is not None:
            resume = first.created_at.timestamp() + float(first.payload.get("retry_after_s") or 0) - 0.01
            after = sum(1 for a in limited if a.started_at.timestamp() >= resume)
        makespan = (run.finished_at - run.started_at).total_seconds()
        bound = self.storm_bound(dag, spec, t0.timestamp(), first_window_end)
        by_key = defaultdict(list)
        for a in attempts:
            by_key[a.task_run.subtask.key].append(a)
        timeline = []
        for key, rows in by_key.items():
            ok = [a for a in rows if a.state == Attempt.State.SUCCEEDED]
            timeline.append(
                {
                    "key": key,
                    "start": round((ok[0].started_at - t0).total_seconds(), 3) if ok else None,
                    "end": round((ok[0].finished_at - t0).total_seconds(), 3) if ok else None,
                    "rate_limited": [
                        round((a.started_at - t0).total_seconds(), 3) for a in rows if a.error.startswith("429")
                    ],
                }
            )
        return {
            "strategy": name,
            "repeat": repeat,
            "cap": spec.ours_cap,
            "run": run.pk,
            "makespan_s": rnd(makespan, 3),
            "bound_s": rnd(bound, 3),
            "vs_bound": rnd(makespan / bound, 3),
            "rate_limited": len(limited),
            "retries": len(attempts) - len(dag.keys),
            "rate_limited_after_first_backoff": after,
            "timeline": timeline,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runner")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "glassbox.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from . import hooks

    hooks.install()
    from .harness import raise_on_sigterm

    raise_on_sigterm()
    config = Config.from_json(json.loads(Path(args.config).read_text()))
    log(f"{args.profile}: migrating the benchmark database")
    call_command("migrate", verbosity=0, interactive=False)
    call_command("createcachetable", verbosity=0)
    try:
        result = ProfileRunner(args.profile, config, Path(args.workdir)).run()
    except BenchError as exc:
        log(f"{args.profile}: {exc}")
        return 1
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
