"""The peer of the side-by-side benchmark: Prefect 3 on the project's own DAGs and durations.

Runs in a virtualenv of its own (bench/peer.py makes it; Prefect is not a dependency of the
project) with only the standard library, Prefect and bench/dags.py, which it loads by path: the
same shapes and the same per-node durations as the engine is given. Prefect's tasks sleep in its
in-process thread pool (ThreadPoolTaskRunner with `cap` workers), with its ephemeral local server.

Protocol (one line each): stdin ``{"dag": {kind, params, seed, median_s, sigma}, "cap": N}``,
stdout ``{"makespan_s": ..., "lower_bound_s": ..., "nodes": ...}``; ``{"ready": true}`` once warm.
Adapted from the team's shared/peers/prefect_bench_dags.py.
"""

import importlib.util
import json
import os
import sys
import time

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_API_ENABLE_HTTP2", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("dags", os.path.join(HERE, "dags.py"))
dags = importlib.util.module_from_spec(spec)
sys.modules["dags"] = dags
spec.loader.exec_module(dags)

from prefect import flow, task  # noqa: E402 - after the environment is set
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

BUILD = {"layered": dags.layered, "fan": dags.fan, "chain": dags.chain, "random": dags.random_dag}


@task
def work(seconds):
    time.sleep(seconds)


def makespan_s(dag, cap):
    ups = dag.upstreams
    box = {}

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=cap))
    def run_dag():
        box["t0"] = time.time()
        futures = {}
        for key in dag.keys:  # keys are in a topological order
            futures[key] = work.submit(dag.durations[key], wait_for=[futures[u] for u in ups[key]])
        for future in futures.values():
            future.result()

    run_dag()
    return time.time() - box["t0"]


def main():
    makespan_s(dags.chain(length=3, seed=9, median_s=0.01, sigma=0.1), 2)  # starts the ephemeral server
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        d = request["dag"]
        dag = BUILD[d["kind"]](**d["params"], seed=d["seed"], median_s=d["median_s"], sigma=d["sigma"])
        taken = makespan_s(dag, request["cap"])
        print(
            json.dumps(
                {
                    "makespan_s": round(taken, 4),
                    "lower_bound_s": round(dag.lower_bound_s(request["cap"]), 4),
                    "nodes": len(dag.keys),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
