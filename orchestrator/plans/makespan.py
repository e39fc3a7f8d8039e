"""How long a DAG of tasks takes under the run's cap and each agent's own limit, and what sets it.

The estimate is a list-scheduling simulation with each task's expected seconds, as admission
runs a plan (engine/admission.py): whenever a slot frees, the ready tasks start longest
remaining path first while the run's cap and their agent's `max_concurrency` allow. A valid
schedule, so it is never shorter than any lower bound: the critical path, the total work over
the cap, nor an agent's work over its limit (`lower_bound_s`). It also tells what sets the time
(`binding`): the limit whose lifting would shorten the run most, else the critical path.

The pre-flight forecasts a whole plan; the live ETA forecasts what is left of a run: finished
tasks `done`, running ones holding their slots for their `running` seconds left, then the rest.
An agent's limit is shared by every run: the slots other runs hold now (`Limits.held`) are busy
until their tasks are expected to end; they do not count against this run's cap.
Pure functions on keys, agents and seconds; no database.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from orchestrator.plans.dag import SinksFirst

# Lifting a limit that shortens the forecast by less than this (relative) did not set it.
TOLERANCE = 1e-6
# A forecast within this share of the critical path is set by the critical path.
NEAR_THE_CRITICAL_PATH = 0.05


@dataclass(frozen=True)
class Work:
    """What is scheduled: the DAG, each task's agent and each task's expected seconds."""

    graph: SinksFirst
    agent_of: Mapping[str, str]
    seconds: Mapping[str, float]


@dataclass(frozen=True)
class Limits:
    """How many tasks may run at once: the run's cap, and each named agent's own limit, of which
    other runs hold some slots now: `held` gives, per agent, the seconds until each frees."""

    cap: int
    per_agent: Mapping[str, int]
    held: Mapping[str, Sequence[float]] = field(default_factory=dict)
    # Slots of the cap itself that other runs hold, when the cap is a shared one (a provider's
    # in-flight limit): the seconds until each frees.
    cap_held: Sequence[float] = ()

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError(f"cap must be at least 1, got {self.cap}")

    def of(self, agent: str) -> int:
        """How many of `agent`'s tasks may run at once: its limit, never above the cap."""
        return max(1, min(self.cap, self.per_agent.get(agent, self.cap)))

    def slots(self, agent: str) -> int:
        """`agent`'s slots, this run's and the ones other runs hold (`held`) together: its own limit
        (the cap when it has none). This run's share of them is kept under the cap apart."""
        return max(1, self.per_agent.get(agent, self.cap))


@dataclass(frozen=True)
class Binding:
    """What sets a forecast: "critical path", the run's "cap", or an "agent"'s limit."""

    kind: str
    limit: int = 0
    agent: str = ""

    @property
    def text(self) -> str:
        """What sets it, in words: "the critical path", "the run's cap of 2", "the researcher's
        limit of 4 at once"."""
        if self.kind == "cap":
            return f"the run's cap of {self.limit}"
        if self.kind == "agent":
            return f"the {self.agent}'s limit of {self.limit} at once"
        return "the critical path"


CRITICAL_PATH = Binding("critical path")


@dataclass(frozen=True)
class Forecast:
    seconds: float  # until the last task ends
    peak_parallel: int  # the most tasks running at once


def forecast(
    work: Work, limits: Limits, *, done: Collection[str] = (), running: Mapping[str, float] | None = None
) -> Forecast:
    """The simulated schedule of `work` under `limits`: tasks in `done` are over, tasks in
    `running` hold their slots for the seconds given, every other task waits for its upstreams
    (and for a slot of its agent that another run holds to free, when the others are taken)."""
    running = running or {}
    graph = work.graph
    rank = graph.remaining_path_lengths(
        {key: 0.0 if key in done else _seconds(work, running, key) for key in graph.keys}
    )
    position = {key: index for index, key in enumerate(graph.keys)}
    upstreams_left: Counter[str] = Counter()
    for key in graph.keys:
        if key not in done:
            for successor in graph.successors[key]:
                upstreams_left[successor] += 1
    ready: dict[str, list[tuple[float, int, str]]] = {}  # per agent: (-rank, position, key)
    ends: list[tuple[float, int, str]] = []  # (end, position, key) of what runs
    busy: Counter[str] = Counter()
    frees: list[tuple[float, str]] = []  # (when, agent; "" for the cap) of each slot another run holds
    for holder, seconds in limits.held.items():
        for when in seconds:
            heapq.heappush(frees, (when, holder))
            busy[holder] += 1
    for when in limits.cap_held:
        heapq.heappush(frees, (when, ""))
    cap_busy = len(limits.cap_held)
    for key in graph.keys:
        if key in done:
            continue
        if key in running:
            heapq.heappush(ends, (running[key], position[key], key))
            busy[work.agent_of[key]] += 1
        elif not upstreams_left[key]:
            heapq.heappush(ready.setdefault(work.agent_of[key], []), (-rank[key], position[key], key))
    now, peak = 0.0, len(ends)
    while True:
        while len(ends) + cap_busy < limits.cap and (agent := _next_agent(ready, busy, limits)) is not None:
            _, _, key = heapq.heappop(ready[agent])
            heapq.heappush(ends, (now + work.seconds.get(key, 0.0), position[key], key))
            busy[agent] += 1
        peak = max(peak, len(ends))
        if not ends and not (frees and any(ready.values())):
            return Forecast(seconds=now, peak_parallel=peak)
        now = min([end for end, _, _ in ends[:1]] + [when for when, _ in frees[:1]])
        while frees and frees[0][0] <= now:
            _, holder = heapq.heappop(frees)
            if holder:
                busy[holder] -= 1
            else:
                cap_busy -= 1
        while ends and ends[0][0] <= now:
            _, _, key = heapq.heappop(ends)
            busy[work.agent_of[key]] -= 1
            for successor in graph.successors[key]:
                upstreams_left[successor] -= 1
                if not upstreams_left[successor] and successor not in running and successor not in done:
                    heapq.heappush(
                        ready.setdefault(work.agent_of[successor], []),
                        (-rank[successor], position[successor], successor),
                    )


def lower_bound_s(work: Work, limits: Limits) -> float:
    """No schedule beats it: the critical path, the total work over the cap, each agent's work
    over its own limit."""
    keys = work.graph.keys
    critical = max(work.graph.remaining_path_lengths(work.seconds).values(), default=0.0)
    per_agent: dict[str, float] = {}
    for key in keys:
        agent = work.agent_of[key]
        per_agent[agent] = per_agent.get(agent, 0.0) + work.seconds.get(key, 0.0)
    spread = [sum(per_agent.values()) / limits.cap]
    spread += [seconds / limits.of(agent) for agent, seconds in per_agent.items()]
    return max([critical, *spread])


def binding(work: Work, limits: Limits, seconds: float) -> Binding:
    """What sets a forecast of `seconds` for the whole of `work`: the critical path when the
    forecast is within NEAR_THE_CRITICAL_PATH of it; else the limit whose lifting shortens it most
    (the run's cap, or an agent's limit under the cap); else, when only lifting several at once
    would (an agent's limit equal to the cap), the one whose own lower bound is the largest."""
    critical = max(work.graph.remaining_path_lengths(work.seconds).values(), default=0.0)
    if seconds <= critical * (1 + NEAR_THE_CRITICAL_PATH):
        return CRITICAL_PATH
    unlimited = len(work.graph.keys) or 1
    candidates = {Binding("cap", limits.cap): Limits(unlimited, {**limits.per_agent})}
    for agent in sorted(set(work.agent_of.values())):
        if limits.of(agent) < limits.cap:
            lifted = {name: limit for name, limit in limits.per_agent.items() if name != agent}
            candidates[Binding("agent", limits.of(agent), agent)] = replace(limits, per_agent=lifted)
    gains = {which: seconds - forecast(work, lifted).seconds for which, lifted in candidates.items()}
    best = max(gains, key=lambda which: gains[which])
    if gains[best] > TOLERANCE * max(1.0, seconds):
        return best
    return max(candidates, key=lambda which: lower_bound_s(work, _only(which, limits, unlimited)))


def _only(which: Binding, limits: Limits, unlimited: int) -> Limits:
    """`limits` with only the one limit `which` in force."""
    if which.kind == "cap":
        return Limits(limits.cap, {})
    return Limits(unlimited, {which.agent: which.limit})


def _seconds(work: Work, running: Mapping[str, float], key: str) -> float:
    return running[key] if key in running else work.seconds.get(key, 0.0)


def _next_agent(ready: Mapping[str, list[tuple[float, int, str]]], busy: Counter[str], limits: Limits) -> str | None:
    """The agent whose best ready task comes first among the agents with a free slot."""
    heads = [(queue[0], agent) for agent, queue in ready.items() if queue and busy[agent] < limits.slots(agent)]
    return min(heads)[1] if heads else None
