"""Reference strategies the engine is compared with, implemented here only (never in the engine).

Both run in the benchmark's own process with threads, and each node goes through the very same
simulated provider call a worker makes (``SimulatedProvider.stream`` with the agent's options):
the same per-node durations (bench.hooks gives both the same deterministic duration), the same
server limit answering 429 with Retry-After, the same streamed slices. So a comparison differs
only in *when* each node is started.

* ``waves(dag, cap)``: start up to ``cap`` ready nodes (in key order), wait until all of them
  are done, repeat. What a script with ``asyncio.gather`` over batches does.
* ``naive(dag)``: start every node the moment it is ready, with no cap at all.

On a 429 both do what a client library does: wait the Retry-After it was given, then send the
same request again (until ``MAX_TRIES``). Any other provider error is a failure of the
benchmark, raised as such.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from .dags import Dag

MAX_TRIES = 50


@dataclass
class NodeRecord:
    key: str
    ready: float  # seconds since the strategy started
    start: float  # first request sent
    end: float  # final answer received
    tries: int = 1
    # (request sent, Retry-After) of each request answered 429, seconds since the strategy started
    rate_limited: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class StrategyResult:
    strategy: str
    cap: int | None
    started_at: float  # Unix time
    makespan_s: float
    records: list[NodeRecord]

    @property
    def rate_limited(self) -> int:
        return sum(len(r.rate_limited) for r in self.records)

    @property
    def retries(self) -> int:
        return sum(r.tries - 1 for r in self.records)

    def rate_limited_after_first_backoff(self) -> int:
        """429s to requests sent once the first 429's Retry-After had passed (the herd that follows)."""
        answers = sorted(item for r in self.records for item in r.rate_limited)
        if not answers:
            return 0
        first_sent, first_wait = answers[0]
        resume = first_sent + first_wait - 0.01
        return sum(1 for sent, _ in answers if sent >= resume)

    def peak_concurrency(self) -> int:
        points = sorted([(r.start, 1) for r in self.records] + [(r.end, -1) for r in self.records])
        peak = current = 0
        for _, step in points:
            current += step
            peak = max(peak, current)
        return peak

    def to_json(self) -> dict:
        return {
            "strategy": self.strategy,
            "cap": self.cap,
            "makespan_s": round(self.makespan_s, 4),
            "rate_limited": self.rate_limited,
            "retries": self.retries,
            "peak_concurrency": self.peak_concurrency(),
        }


class ProviderCall:
    """Runs one node through the simulated provider as a worker would, retrying after a 429."""

    def __init__(self, agent, *, prompt_prefix: str = ""):
        self.agent_name = agent.name
        self.model = agent.model
        self.system_prompt = agent.system_prompt
        self.max_tokens = agent.max_output_tokens
        self.timeout_s = float(agent.timeout_s)
        self.options = dict(agent.provider_options or {})
        self.prompt_prefix = prompt_prefix

    def request(self, key: str, attempt: int):
        from orchestrator.providers.base import AgentRequest

        return AgentRequest(
            agent_name=self.agent_name,
            provider="simulated",
            model=self.model,
            system_prompt=self.system_prompt,
            prompt=f"{key}\n\n{self.prompt_prefix}Benchmark node {key}.",
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s,
            seed=f"bench:{key}",
            attempt=attempt,
            options=self.options,
        )

    def __call__(self, key: str, record: NodeRecord, clock) -> None:
        from orchestrator import db_threads
        from orchestrator.providers.base import Completed, RateLimited
        from orchestrator.providers.simulated import SimulatedProvider

        provider = SimulatedProvider()

        async def answer(attempt: int) -> bool:
            async for item in provider.stream(self.request(key, attempt)):
                if isinstance(item, Completed):
                    return True
            return False

        for attempt in range(1, MAX_TRIES + 1):
            record.tries = attempt
            sent = clock()
            try:
                # The provider is asyncio code: one loop per call, on this thread (its own database
                # thread for the simulated server limit, closed with it).
                if db_threads.run_sync(lambda attempt=attempt: answer(attempt), threads=1):
                    record.end = clock()
                    return
            except RateLimited as exc:
                wait_s = exc.retry_after_s or 1.0
                record.rate_limited.append((sent, wait_s))
                time.sleep(wait_s)
        raise RuntimeError(f"node {key} was still refused after {MAX_TRIES} tries")


def _start(dag: Dag):
    t0 = time.perf_counter()
    started_at = time.time()

    def clock() -> float:
        return time.perf_counter() - t0

    records = {key: NodeRecord(key, ready=0.0, start=0.0, end=0.0) for key in dag.keys}
    return started_at, clock, records


def _run_node(call: ProviderCall, key: str, record: NodeRecord, clock) -> str:
    record.start = clock()
    call(key, record, clock)
    return key


def waves(dag: Dag, cap: int, call: ProviderCall) -> StrategyResult:
    """Batches of at most ``cap`` ready nodes; the next batch starts when the whole batch is done."""
    started_at, clock, records = _start(dag)
    ups = dag.upstreams
    done: set[str] = set()
    ready_since = {key: 0.0 for key in dag.keys if not ups[key]}
    with ThreadPoolExecutor(max_workers=cap, thread_name_prefix="waves") as pool:
        while len(done) < len(dag.keys):
            ready = [k for k in dag.keys if k not in done and all(u in done for u in ups[k])]
            batch = ready[:cap]
            if not batch:
                raise RuntimeError("waves: nothing is ready but nodes remain (not a DAG?)")
            futures = []
            for key in batch:
                records[key].ready = ready_since.setdefault(key, clock())
                futures.append(pool.submit(_run_node, call, key, records[key], clock))
            for future in futures:
                future.result()
            now = clock()
            done.update(batch)
            for key in dag.keys:
                if key not in done and key not in ready_since and all(u in done for u in ups[key]):
                    ready_since[key] = now
    makespan = max(r.end for r in records.values())
    return StrategyResult("waves", cap, started_at, makespan, list(records.values()))


def naive(dag: Dag, call: ProviderCall) -> StrategyResult:
    """Every node starts the moment its upstreams are done; no cap."""
    started_at, clock, records = _start(dag)
    ups, downs = dag.upstreams, dag.downstreams
    waiting = {key: len(ups[key]) for key in dag.keys}
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=max(1, len(dag.keys)), thread_name_prefix="naive") as pool:
        pending: set[Future] = {
            pool.submit(_run_node, call, key, records[key], clock) for key in dag.keys if waiting[key] == 0
        }
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                key = future.result()
                now = clock()
                with lock:
                    for down in downs[key]:
                        waiting[down] -= 1
                        if waiting[down] == 0:
                            records[down].ready = now
                            pending.add(pool.submit(_run_node, call, down, records[down], clock))
    makespan = max(r.end for r in records.values())
    return StrategyResult("naive", None, started_at, makespan, list(records.values()))


# --- The storm's bound --------------------------------------------------------------------------------


def sliding_window_accept_times(
    start: float, count: int, per_minute: int, first_window_end: float, window_s: float = 60.0, step_s: float = 0.005
) -> list[float]:
    """The earliest times at which ``count`` requests can be accepted from ``start`` on.

    Models the sliding-window counter of `limits` that the simulated server limit uses (both
    storages): windows of ``window_s`` seconds, the current one ending at ``first_window_end``;
    a request fits when floor(previous × overlap) + current + 1 <= per_minute, where overlap is
    the part of the previous window still inside the last ``window_s`` seconds. A refused
    request takes nothing, so accepting each request as early as possible is optimal.
    """
    import math

    times: list[float] = []
    counts: dict[int, int] = {}
    t = start
    while len(times) < count:
        index = math.floor((t - first_window_end) / window_s) + 1  # 0 = the window open at start
        window_end = first_window_end + index * window_s
        previous = counts.get(index - 1, 0)
        overlap = (window_end - t) / window_s if previous else 0.0
        if math.floor(previous * overlap) + counts.get(index, 0) + 1 <= per_minute:
            counts[index] = counts.get(index, 0) + 1
            times.append(t)
        else:
            t += step_s
    return times


def rate_limit_bound_s(durations: list[float], accept_times: list[float], start: float) -> float:
    """The shortest makespan any client can reach: the longest nodes take the earliest slots."""
    pairs = zip(sorted(accept_times), sorted(durations, reverse=True), strict=True)
    return max(t + d for t, d in pairs) - start
