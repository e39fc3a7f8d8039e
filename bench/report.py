"""Summaries of benchmark results, the goals they are held against, and docs/benchmarks.md.

Every number in the report is a median over the repeats; a ratio (ours / waves, ours / naive)
is taken within each repeat, where both ran back to back on the same machine state, and the
median of those ratios is shown.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .harness import DAG_ENGINE_RPM, median, rnd

DAG_ORDER = ["layered", "fan", "chain", "random"]
GOALS = {
    "efficiency_production": 0.95,
    "efficiency_embedded": 0.90,
    "vs_waves": 0.75,
    "storm_vs_bound": 1.10,
    "live_p95_redis_ms": 100,
    "live_p95_embedded_ms": 250,
    "dispatch_p95_redis_ms": 50,
}


def _by(rows, *keys):
    groups = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in keys)].append(row)
    return groups


def dag_table(profile: dict) -> list[dict]:
    """One row per (DAG, cap): medians over repeats of the engine's numbers and of the same-run ratios."""
    waves = {(r["dag"], r["cap"], r["repeat"]): r for r in profile.get("waves", [])}
    naive = {(r["dag"], r["repeat"]): r for r in profile.get("naive", [])}
    table = []
    for (dag, cap), rows in _by(profile["ours"], "dag", "cap").items():
        vs_waves = [
            r["makespan_s"] / waves[(dag, cap, r["repeat"])]["makespan_s"]
            for r in rows
            if (dag, cap, r["repeat"]) in waves
        ]
        vs_naive = [
            r["makespan_s"] / naive[(dag, r["repeat"])]["makespan_s"] for r in rows if (dag, r["repeat"]) in naive
        ]
        waves_ms = [waves[(dag, cap, r["repeat"])]["makespan_s"] for r in rows if (dag, cap, r["repeat"]) in waves]
        naive_ms = [naive[(dag, r["repeat"])]["makespan_s"] for r in rows if (dag, r["repeat"]) in naive]
        first = rows[0]
        table.append(
            {
                "dag": dag,
                "dag_name": first["dag_name"],
                "nodes": first["nodes"],
                "cap": cap,
                "repeats": len(rows),
                "makespan_s": rnd(median([r["makespan_s"] for r in rows]), 3),
                "lower_bound_s": first["lower_bound_s"],
                "policy_s": first["policy_s"],
                "efficiency": rnd(median([r["efficiency"] for r in rows]), 3),
                "policy_efficiency": rnd(first["lower_bound_s"] / first["policy_s"], 3),
                "dispatch_p50_ms": rnd(median([r["dispatch_p50_ms"] for r in rows]), 1),
                "dispatch_p95_ms": rnd(median([r["dispatch_p95_ms"] for r in rows]), 1),
                "advance_cpu_ms_per_task": rnd(median([r.get("advance_cpu_ms_per_task") for r in rows]), 2),
                "advance_wall_ms_per_task": rnd(median([r.get("advance_wall_ms_per_task") for r in rows]), 2),
                "claim_complete_cpu_ms_per_task": rnd(
                    median(
                        [(r.get("claim_cpu_ms_per_task") or 0) + (r.get("complete_cpu_ms_per_task") or 0) for r in rows]
                    ),
                    2,
                ),
                "cluster_cpu_ms_per_task": rnd(median([r.get("cluster_cpu_ms_per_task") for r in rows]), 1),
                "tasks_per_s": rnd(first["nodes"] / median([r["makespan_s"] for r in rows]), 1),
                "waves_s": rnd(median(waves_ms), 3),
                "naive_s": rnd(median(naive_ms), 3),
                "vs_waves": rnd(median(vs_waves), 3),
                "vs_naive": rnd(median(vs_naive), 3),
            }
        )
    table.sort(key=lambda r: (DAG_ORDER.index(r["dag"]) if r["dag"] in DAG_ORDER else 99, r["cap"]))
    return table


def storm_table(profile: dict) -> list[dict]:
    table = []
    order = ["naive", "waves", "ours_adaptive", "ours_configured"]
    for (strategy,), rows in _by(profile.get("storm", []), "strategy").items():
        table.append(
            {
                "strategy": strategy,
                "repeats": len(rows),
                "cap": rows[0]["cap"],
                "makespan_s": rnd(median([r["makespan_s"] for r in rows]), 2),
                "bound_s": rnd(median([r["bound_s"] for r in rows]), 2),
                "vs_bound": rnd(median([r["vs_bound"] for r in rows]), 3),
                "rate_limited": median([r["rate_limited"] for r in rows]),
                "retries": median([r["retries"] for r in rows]),
                "rate_limited_after_first_backoff": median([r["rate_limited_after_first_backoff"] for r in rows]),
            }
        )
    table.sort(key=lambda r: order.index(r["strategy"]) if r["strategy"] in order else 99)
    return table


def goal_checks(results: dict, tables: dict[str, list[dict]], storms: dict[str, list[dict]]) -> list[dict]:
    checks = []
    for name, table in tables.items():
        limit = GOALS["efficiency_production"] if name == "production" else GOALS["efficiency_embedded"]
        for row in table:
            if row["cap"] == 8:
                checks.append(
                    {
                        "goal": f"efficiency >= {limit} at cap 8 ({name}, {row['dag_name']})",
                        "measured": row["efficiency"],
                        "met": row["efficiency"] is not None and row["efficiency"] >= limit,
                    }
                )
        for row in table:
            if row["cap"] == 8 and row["vs_waves"] is not None:
                checks.append(
                    {
                        "goal": f"ours / waves <= {GOALS['vs_waves']} at cap 8 ({name}, {row['dag_name']})",
                        "measured": row["vs_waves"],
                        "met": row["vs_waves"] <= GOALS["vs_waves"],
                    }
                )
        if name == "production":
            for row in table:
                if row["cap"] == 8:
                    checks.append(
                        {
                            "goal": f"dispatch p95 < {GOALS['dispatch_p95_redis_ms']} ms on Redis at cap 8 ({row['dag_name']})",
                            "measured": row["dispatch_p95_ms"],
                            "met": row["dispatch_p95_ms"] < GOALS["dispatch_p95_redis_ms"],
                        }
                    )
    for name, table in storms.items():
        for row in table:
            if row["strategy"].startswith("ours"):
                checks.append(
                    {
                        "goal": f"storm ({name}, {row['strategy']}): no 429 after the first back-off",
                        "measured": row["rate_limited_after_first_backoff"],
                        "met": row["rate_limited_after_first_backoff"] == 0,
                    }
                )
                checks.append(
                    {
                        "goal": f"storm ({name}, {row['strategy']}): makespan <= {GOALS['storm_vs_bound']} x the limit's bound",
                        "measured": row["vs_bound"],
                        "met": row["vs_bound"] <= GOALS["storm_vs_bound"],
                    }
                )
    for name, profile in results.get("profiles", {}).items():
        live = profile.get("live_view") or {}
        limit = GOALS["live_p95_redis_ms"] if name == "production" else GOALS["live_p95_embedded_ms"]
        for row in live.get("rows", []):
            checks.append(
                {
                    "goal": f"live view p95 < {limit} ms ({name}, {row['viewers']} viewers, {row['events_per_s']} events/s)",
                    "measured": row["p95_ms"],
                    "met": row["p95_ms"] is not None and row["p95_ms"] < limit,
                }
            )
    return checks


def headline(results: dict, tables: dict[str, list[dict]]) -> dict:
    """The numbers `bench_scheduler --json` prints: the configured headline run of the first profile."""
    config = results["config"]
    kind, cap = config["gantt"]
    for name in config["profiles"]:
        for row in tables.get(name, []):
            if row["dag"] == kind and row["cap"] == cap:
                return {
                    "profile": name,
                    "dag": row["dag_name"],
                    "cap": cap,
                    "repeats": row["repeats"],
                    "makespan_s": row["makespan_s"],
                    "lower_bound_s": row["lower_bound_s"],
                    "efficiency": row["efficiency"],
                    "vs_waves": row["vs_waves"],
                    "vs_naive": row["vs_naive"],
                    "dispatch_p50_ms": row["dispatch_p50_ms"],
                    "dispatch_p95_ms": row["dispatch_p95_ms"],
                    "scheduler_cpu_ms_per_task": row["advance_cpu_ms_per_task"],
                }
    return {}


def summarize(results: dict) -> dict:
    tables = {name: dag_table(p) for name, p in results["profiles"].items()}
    storms = {name: storm_table(p) for name, p in results["profiles"].items() if p.get("storm")}
    return {
        "headline": headline(results, tables),
        "dags": tables,
        "storm": storms,
        "goals": goal_checks(results, tables, storms),
    }


# --- Markdown ---------------------------------------------------------------------------------------


def _fmt(value, digits=2, suffix=""):
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def _table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(results: dict, plots: dict[str, str]) -> str:
    s = results["summary"]
    config = results["config"]
    machine = results["machine"]
    profiles = results["profiles"]
    out = ["# Benchmarks", ""]
    out.append(
        "Generated by `make bench` (`python manage.py bench_scheduler`); the raw numbers are in "
        "[`bench/results.json`](../bench/results.json) and the code in [`bench/`](../bench/). "
        f"Run of {results['started_at']}, {results['elapsed_s'] / 60:.1f} minutes, "
        f"{config['repeats']} repeats: every number is the median of the repeats (see *n*), and every ratio is "
        "taken between runs made at the same time in the same repeat, then medianed. The machine is shared: "
        "compare the load average below before reading small differences."
    )
    out += ["", "## Machine and profiles", ""]
    rows = [
        ["CPU", f"{machine.get('cpu', '?')}, {machine.get('cores')} cores"],
        ["memory", f"{machine.get('memory_gib', '?')} GiB"],
        ["load average when the run started", ", ".join(str(x) for x in machine.get("load_average_at_start", []))],
        ["Python / SQLite", f"{machine.get('python')} / {machine.get('sqlite')}"],
        ["platform", machine.get("platform", "?")],
    ]
    for name, p in profiles.items():
        services = ", ".join(f"{k} {v}" for k, v in p.get("services", {}).items())
        rows.append([f"profile `{name}`", p.get("description", "") + (f" ({services})" if services else "")])
    rows.append(
        [
            "qcluster",
            f"{config['workers']} worker processes (the largest cap + 2), engine defaults "
            "(lease 15 s, ticker 1 s, ORM broker poll 0.1 s, DEBUG off)",
        ]
    )
    out.append(_table(["", ""], rows))
    out += ["", "## Method", ""]
    dag_lines = []
    for spec in config["dag_specs"]:
        median_s = spec["median_s"] * config.get("duration_scale", 1.0)
        dag_lines.append(f"{spec['kind']} {spec['params']} (median {median_s:.2f} s)")
    out += [
        "- **Workload.** Synthetic DAGs (`bench/dags.py`): " + "; ".join(dag_lines) + ". Node durations are "
        "lognormal (sigma 0.6, clipped to [median/8, median×8]) and a deterministic function of (DAG seed, node): "
        "the engine's workers, the reference strategies and the lower bound all use the same duration for the "
        "same node (`bench/hooks.py` gives the simulated provider that duration instead of its own draw; "
        "everything else in the provider — the streamed slices, the generated text, the server limit — is "
        "unchanged, and the harness checks every request slept the intended duration).",
        "- **The engine** runs each DAG through `runs.launch(plan, cap=...)` on a real qcluster "
        "(`python -m bench.worker`: `qcluster` with the hooks) against a fresh database per profile. "
        "Makespan = `Run.finished_at − Run.started_at`.",
        "- **Lower bound** = max(critical path, total work / cap) over the true durations; "
        "**efficiency** = lower bound / makespan. **Policy bound** = the makespan of the engine's own admission "
        "order (longest remaining path in hops, then age) executed with zero overhead: the engine does not know "
        "the durations, so on a wide fan-out even a perfect executor of its policy stays above the lower bound. "
        "lower bound / policy bound is the best efficiency that policy can reach.",
        "- **Dispatch latency**: from the moment a node could start — all its upstreams finished "
        "(`Attempt.finished_at`) *and* a slot under the cap was free (slots are handed to the starts in start "
        "order) — to the moment a worker claimed it (`Attempt.started_at`). It includes the completing "
        "transaction, the scheduler step and the claim (or the broker's hand-off).",
        "- **Scheduler CPU per task**: the CPU time (`time.thread_time`, so the ticker thread and the task "
        "thread are told apart) spent inside `scheduler.advance` in every process — workers, ticker threads and "
        "the launching process — summed per run and divided by its nodes. `claim_attempt` and `complete` are "
        "measured the same way. **Cluster CPU per task** is the user+system CPU of the whole qcluster process "
        "group during the run (from /proc) divided by the nodes: everything the engine spends, including the "
        "simulated provider's text generation, heartbeats, the broker and the ticker.",
        "- **Reference strategies** (`bench/strategies.py`), each node going through the same "
        "`SimulatedProvider.stream` call with the same options: **waves** starts up to *cap* ready nodes (key "
        "order), waits for all of them, repeats; **naive** starts every node as soon as it is ready, with no cap. "
        "Both retry a 429 after its Retry-After, like a client library. They run in threads of the runner process "
        "*at the same time* as the engine's run of the same DAG (they sleep and touch no database, so they take "
        "almost nothing from it), so every ratio compares runs made on the same machine state.",
        "- **Repeats**: the first repeat runs every cap; the later ones run cap 8 again (the goals' cap). Caps 4 "
        "and 16 are single runs (the *n* column).",
        f"- **Provider limit in sections 1–2**: none binds anybody: the simulated server has no limit, and the "
        f"engine's ProviderLimit carries {DAG_ENGINE_RPM} requests per minute, which no run reaches, so that "
        'admission does its rate-limit bookkeeping as in a deployment. Naive is then the "unlimited '
        'parallelism" reference. Section 3 makes a limit bind.',
    ]
    # 1. efficiency
    out += ["", "## 1. Scheduler efficiency", ""]
    for name, table in s["dags"].items():
        out += [f"### Profile `{name}`", ""]
        out.append(
            _table(
                [
                    "DAG",
                    "cap",
                    "n",
                    "makespan s",
                    "lower bound s",
                    "efficiency",
                    "policy bound eff.",
                    "tasks/s",
                    "dispatch p50 ms",
                    "dispatch p95 ms",
                    "advance CPU ms/task",
                    "advance wall ms/task",
                    "claim+complete CPU ms/task",
                    "cluster CPU ms/task",
                ],
                [
                    [
                        r["dag_name"],
                        r["cap"],
                        r["repeats"],
                        _fmt(r["makespan_s"]),
                        _fmt(r["lower_bound_s"]),
                        _fmt(r["efficiency"], 3),
                        _fmt(r["policy_efficiency"], 3),
                        _fmt(r["tasks_per_s"], 1),
                        _fmt(r["dispatch_p50_ms"], 0),
                        _fmt(r["dispatch_p95_ms"], 0),
                        _fmt(r["advance_cpu_ms_per_task"], 1),
                        _fmt(r["advance_wall_ms_per_task"], 1),
                        _fmt(r["claim_complete_cpu_ms_per_task"], 1),
                        _fmt(r["cluster_cpu_ms_per_task"], 0),
                    ]
                    for r in table
                ],
            )
        )
        out.append("")
    # 2. strategies
    out += ["## 2. Against the reference strategies", ""]
    for name, table in s["dags"].items():
        out += [f"### Profile `{name}`", ""]
        out.append(
            _table(
                ["DAG", "cap", "ours s", "waves s", "naive s (no cap)", "ours / waves", "ours / naive"],
                [
                    [
                        r["dag_name"],
                        r["cap"],
                        _fmt(r["makespan_s"]),
                        _fmt(r["waves_s"]),
                        _fmt(r["naive_s"]),
                        _fmt(r["vs_waves"], 3),
                        _fmt(r["vs_naive"], 3),
                    ]
                    for r in table
                ],
            )
        )
        out.append("")
    if plots.get("makespan"):
        out += [
            f"![Makespan against cap]({plots['makespan']})",
            "",
            "Makespan against cap for each DAG: the engine on each profile, waves, naive (no cap, so one value), "
            "the lower bound and the policy bound.",
            "",
        ]
    if plots.get("gantt"):
        out += [f"![Gantt chart]({plots['gantt']})", "", plots.get("gantt_caption", ""), ""]
    # 3. storm
    if s["storm"]:
        storm = config["storm"]
        out += ["## 3. Rate-limit storm", ""]
        out.append(
            f"{storm['tasks']} independent tasks (lognormal, median {storm['median_s']} s, sigma {storm['sigma']}) against a "
            f"simulated server limit of {storm['requests_per_minute']} requests per minute (the `limits` sliding-window "
            "counter the simulated provider uses, answering 429 with Retry-After). All four strategies run at the same "
            "time, each against a model of its own (so a budget of its own), starting "
            f"{60 - storm['phase_s']:.0f} s before the limit's minute window ends (the database limiter's windows are "
            "aligned on the clock: the harness waits for that moment; Redis keys are created at that phase). "
            "**Bound**: the earliest moments at which the limit can accept each request (computed from the same "
            "sliding-window rule), with the longest tasks on the earliest slots. "
            f"**ours, adaptive**: the engine at cap {storm['ours_cap']} knowing nothing of the limit (no RPM in its "
            "ProviderLimit): it learns from the 429s (provider back-off + AIMD effective cap). **ours, configured**: "
            'the same with the limit entered in ProviderLimit.requests_per_minute. "429 after the first back-off" '
            "counts 429s to requests sent after the first back-off (its Retry-After) had ended. "
            "*Caveat for the Redis limiter*: the bound follows the database limiter's rule. A probe of `limits`' Redis "
            "script with the same start (16 per minute, 10 s left in the window) accepted requests 17–19 at that rule's "
            "times (10.0, 13.8, 17.5 s) but 20–22 together at 18.6 s, earlier than the rule allows; on the production "
            'profile the "bound" is therefore not one, and makespan / bound can fall below 1 there.'
        )
        out.append("")
        for name, table in s["storm"].items():
            out += [f"### Profile `{name}`", ""]
            out.append(
                _table(
                    [
                        "strategy",
                        "cap",
                        "makespan s",
                        "bound s",
                        "makespan / bound",
                        "429s",
                        "retries",
                        "429s after the first back-off",
                    ],
                    [
                        [
                            r["strategy"].replace("_", ", "),
                            r["cap"] or "none",
                            _fmt(r["makespan_s"]),
                            _fmt(r["bound_s"]),
                            _fmt(r["vs_bound"], 3),
                            _fmt(r["rate_limited"], 0),
                            _fmt(r["retries"], 0),
                            _fmt(r["rate_limited_after_first_backoff"], 0),
                        ]
                        for r in table
                    ],
                )
            )
            out.append("")
        if plots.get("storm"):
            out += [
                f"![Storm timelines]({plots['storm']})",
                "",
                "Each task of the storm (one row each): a bar from the task's first request (for the engine: the "
                "attempt that was accepted) to its end, a cross at each request answered 429.",
                "",
            ]
    # 4. live view
    out += ["## 4. Live-view latency", ""]
    live_any = False
    for name, p in profiles.items():
        live = p.get("live_view")
        if not live:
            continue
        live_any = True
        if live.get("skipped"):
            out += [f"Profile `{name}`: not measured: {live['skipped']}.", ""]
            continue
        out += [f"### Profile `{name}`", ""]
        out.append(
            _table(
                ["viewers", "events/s", "samples", "missing", "p50 ms", "p95 ms", "max ms"],
                [
                    [
                        r["viewers"],
                        r["events_per_s"],
                        r["samples"],
                        r["missing"],
                        _fmt(r["p50_ms"], 0),
                        _fmt(r["p95_ms"], 0),
                        _fmt(r["max_ms"], 0),
                    ]
                    for r in live["rows"]
                ],
            )
        )
        out.append("")
    if live_any:
        out.append(
            "Event commit → websocket receipt: the runner commits `task.progress` events for a run at a fixed rate "
            "through `events.record` (one transaction each, like a worker), daphne serves the real `RunConsumer`, and "
            "a client process holds the viewers' connections (`bench/liveview.py`). Latency is the arrival of the "
            "frame whose `#live-seq` covers the event minus the moment its transaction committed, for every viewer "
            "and event. The consumer sends at most one frame per 0.25 s, so at 20 events/s an event waits for the "
            "next frame by design."
        )
        out.append("")
    else:
        out += ["Not measured in this run.", ""]
    # 5. both profiles
    if len(s["dags"]) > 1:
        names = list(s["dags"])
        out += ["## 5. Both profiles side by side", ""]
        joined = {}
        for name in names:
            for r in s["dags"][name]:
                joined.setdefault((r["dag_name"], r["cap"]), {})[name] = r
        headers = ["DAG", "cap"]
        for name in names:
            headers += [f"efficiency ({name})", f"dispatch p95 ms ({name})", f"advance CPU ms/task ({name})"]
        rows = []
        for (dag_name, cap), per in joined.items():
            row = [dag_name, cap]
            for name in names:
                r = per.get(name, {})
                row += [
                    _fmt(r.get("efficiency"), 3),
                    _fmt(r.get("dispatch_p95_ms"), 0),
                    _fmt(r.get("advance_cpu_ms_per_task"), 1),
                ]
            rows.append(row)
        out.append(_table(headers, rows))
        out.append("")
    # goals
    out += ["## Goals", ""]
    out.append(
        _table(
            ["goal", "measured", "met"],
            [[g["goal"], _fmt(g["measured"], 3), "yes" if g["met"] else "**no**"] for g in s["goals"]],
        )
    )
    out.append("")
    out += [FINDINGS.strip(), ""]
    return "\n".join(out)


# Findings from profiling the engine while building this benchmark (py-spy on the qcluster, and
# cProfile / query counts on `advance` alone). They explain the shortfalls in the goals table.
FINDINGS = """
## Where the time goes, and what would close the gaps

Measured while building the benchmark (py-spy over the whole qcluster during a 300-node run, and
`scheduler.advance` alone under cProfile with its SQL counted):

- **The engine's cost per task is transactions, not the scheduling algorithm.** One task costs a
  claim transaction, a heartbeat transaction every 0.3 s (each with a `task.progress` event), a
  completion transaction and a scheduler step (`advance`): about 30 SQL statements for the step alone,
  3 of them per event written (`UPDATE run … last_event_seq`, `SELECT` it back, `INSERT` the event).
  The cluster spends several tens of milliseconds of CPU per task in total (table above), so on two
  cores it tops out at a few tens of tasks per second; the efficiency falls as soon as a DAG asks for
  tasks faster than that (short tasks at cap 16). Longer tasks (`--duration-scale 2`) show the
  engine's efficiency when it is not saturated.
- **On SQLite every write waits for the one write lock.** Under py-spy a third of the workers'
  busy time was `BEGIN IMMEDIATE` waiting for it. Besides the transactions above, every worker
  process's ticker thread writes once a second (`ticker.claim_tick`'s conditional UPDATE) just to
  decide which process ticks, and the ORM broker's pusher polls every 0.1 s. *Proposed*:
  `claim_tick` should read the row first and write only when its interval has passed (a read does not
  take the lock in WAL mode); heartbeats could write progress events less often than output.
- **On PostgreSQL, everything that changes a run queues on the run's row.** `claim_attempt`, `complete`
  and `advance` take `lock_run` (SELECT … FOR UPDATE), and every event — each heartbeat's
  `task.progress` included — updates `Run.last_event_seq` for its sequence number. At caps 8–16
  `advance`'s wall time is many times its CPU time (tables above: e.g. random 300 at cap 16), which is
  time spent waiting, most likely for that row (not profiled further). *Proposed*: number events from a
  per-run counter outside the run row (or Redis `INCR` in production), and write progress to the task
  row without an event per heartbeat (the consumer already coalesces).
- **The doorbell costs about 2 ms per event in every worker** (`async_to_sync(group_send)` sets up an
  event loop per call), also on the embedded profile, where the in-memory channel layer cannot reach
  the web process anyway. *Proposed*: skip the doorbell when the layer is in-memory outside the ASGI
  process, or send it from a long-lived loop.
- **`advance` loaded every pending and every ready task as model instances on each call**
  (with subtask and agent), which cost tens of milliseconds per call on the 300-node DAG. *Fixed*
  (orchestrator/engine/scheduler.py): the ready rule now decides on (state, skip) pairs and loads only the
  tasks it changes; admission reads ready tasks page by page while run slots are left and, once the cap
  is reached, loads only the held tasks whose shown reason changes.
- **A worker's chained task was also put on the broker**, and a second worker later took that copy,
  opened a transaction and found it claimed: on SQLite that is one more write-locked transaction per
  task, on the ORM broker one more poll hand-off. *Fixed* (scheduler.advance(keep_one=True),
  execution.execute_attempt): the attempt a worker runs itself is never enqueued; if the worker dies
  before claiming it, the reaper hands it to the broker after its queue lease, as for any attempt lost
  between commit and enqueue.
- **The policy does not know durations.** The rank is the remaining path weighted by *estimated*
  durations, which are the same for every node of an agent, so on the 1 → 100 → 1 fan the long
  nodes are not started first and even a zero-overhead executor of the policy stays well above the
  lower bound at caps 8 and 16 (the "policy bound eff." column). Per-subtask estimates (the plan's
  `estimate.output_tokens`) feed the rank for non-simulated agents; learning durations per agent from
  past attempts would help the simulated ones and real ones alike.
- **A throttled task sleeps until the whole minute's budget is free, capped at 10 s, not until one
  request fits.** `scheduler.rate_limit_wait` returns `ratelimit.peek`'s reset time, which is the time
  until *all* of the per-minute budget is free; the task's `not_before` is then set up to
  `THROTTLE_RECHECK_S` (10 s) ahead. In the storm, "ours, configured" sends no 429 but finishes well after
  the limit's bound: its last requests wait for the 10 s recheck although the window had room earlier
  (the storm figure shows the gaps). *Proposed*: compute the wait for the task's own amount
  (`ratelimit.seconds_until_free(window, limit, amount)` on the storage's sliding window) as `acquire`
  already does when it refuses.
- **Adaptive concurrency cannot stop 429s from a per-minute limit on its own.** An in-flight cap does
  not bound a request *rate*: after the first back-off the engine admits the halved cap at once, the
  window still has room for one request, and the rest are refused again. With the limit entered in
  ProviderLimit (or learnt from the Anthropic rate-limit headers, orchestrator/engine/feedback.py),
  admission paces requests itself and no 429 comes back. *Proposed*: after a back-off, admit one
  request and wait for its answer before admitting more (slow start), and take the provider's
  Retry-After as a rate hint for the admission budget.
"""


def write(results: dict, results_path: Path, docs_path: Path, plots_dir: Path) -> dict[str, str]:
    import json

    from . import plots

    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    made = plots.make_all(results, plots_dir)
    shown = {
        key: (
            Path(value).resolve().relative_to(docs_path.parent.resolve()).as_posix() if key in plots.IMAGES else value
        )
        for key, value in made.items()
    }
    docs_path.write_text(markdown(results, shown))
    return made
