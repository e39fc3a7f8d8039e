"""The peer of the side-by-side benchmark: Prefect 3 on the project's own DAGs and durations.

Runs in a virtualenv of its own (bench/peer.py makes it; Prefect is not a dependency of the
project) with only the standard library, Prefect and bench/dags.py, which it loads by path: the
same shapes and the same per-node durations as the engine is given. Prefect's tasks sleep in its
in-process thread pool (ThreadPoolTaskRunner with `cap` workers), with its ephemeral local server.

Protocol (one line each): stdin ``{"dag": {kind, params, seed, median_s, sigma}, "cap": N}``,
stdout ``{"makespan_s": ..., "flow_return_s": ..., "last_task_end_s": ..., "lower_bound_s": ...,
"nodes": ...}``; ``{"ready": true}`` once warm. Adapted from the team's
shared/peers/prefect_bench_dags.py.

**Which makespan.** ``makespan_s`` is the flow run's duration as Prefect records it (its
``end_time - start_time``: Running to Completed), the same measure as the engine's
``Run.finished_at - Run.started_at``. The call of the flow returns later, at the next whole
second after its start plus ~10 ms on every shape (Prefect's teardown waits on a one-second
tick; measured 2026-11-25: a fan at cap 64 recorded 3.11 s, its last task ended at 3.04 s and the
call returned at 4.01 s). shared/peers/prefect_bench_dags.py times the call's return; that
number is kept as ``flow_return_s`` but would credit Prefect with up to a second it did not
spend on the DAG. ``last_task_end_s`` is the last ``time.sleep``'s end, from the flow's start.
"""

import importlib.util
import json
import os
import sys
import time

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_API_ENABLE_HTTP2", "false")
# Its ephemeral server migrates a new database on its first start: on a slow 2-core machine that
# took longer than Prefect's default 20 s, and the peer failed before measuring anything.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("dags", os.path.join(HERE, "dags.py"))
dags = importlib.util.module_from_spec(spec)
sys.modules["dags"] = dags
spec.loader.exec_module(dags)

from prefect import flow, task  # noqa: E402 - after the environment is set
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

BUILD = {"layered": dags.layered, "fan": dags.fan, "chain": dags.chain, "random": dags.random_dag}


ENDS: list[float] = []  # each task's end (time.time), appended from Prefect's threads


@task
def work(seconds):
    time.sleep(seconds)
    ENDS.append(time.time())


def measure(dag, cap) -> dict:
    """Run `dag` at `cap` once; its makespan as Prefect records it, and the two other clocks."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    ups = dag.upstreams
    box = {}

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=cap))
    def run_dag():
        box["t0"] = time.time()
        box["id"] = flow_run.id
        futures = {}
        for key in dag.keys:  # keys are in a topological order
            futures[key] = work.submit(dag.durations[key], wait_for=[futures[u] for u in ups[key]])
        for future in futures.values():
            future.result()

    ENDS.clear()
    run_dag()
    returned = time.time()
    with get_client(sync_client=True) as client:
        recorded = client.read_flow_run(box["id"])
    return {
        "makespan_s": round((recorded.end_time - recorded.start_time).total_seconds(), 4),
        "flow_return_s": round(returned - box["t0"], 4),
        "last_task_end_s": round(max(ENDS) - box["t0"], 4),
    }


def main():
    measure(dags.chain(length=3, seed=9, median_s=0.01, sigma=0.1), 2)  # starts the ephemeral server
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        d = request["dag"]
        dag = BUILD[d["kind"]](**d["params"], seed=d["seed"], median_s=d["median_s"], sigma=d["sigma"])
        print(
            json.dumps(
                {
                    **measure(dag, request["cap"]),
                    "lower_bound_s": round(dag.lower_bound_s(request["cap"]), 4),
                    "nodes": len(dag.keys),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
