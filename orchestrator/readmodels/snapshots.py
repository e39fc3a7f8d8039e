"""The read model of the glass-box page: what a person watching one run sees, computed here.

The dashboard renders these structures (the page and its live fragments alike); it decides
nothing itself. Everything is derived from rows that the engine keeps up to date:

* `task_views` — every task with its display state, progress and token burn;
* `graph` — the DAG's nodes and edges, with wide fan-outs detected as collapsible groups;
* `lanes` — per agent: what it runs now, slots used of its cap, queued work, tokens and cost;
* `totals` — elapsed time, ETA, tasks by state, cost against budget, the effective cap;
* `gantt` — every attempt on a timeline, by agent lane, overlapping attempts on separate tracks;
* `event_log` — the newest events first, filtered by task and type;
* `pending_checkpoints`, `final_tasks`.

Pure helpers (`fanout_groups`, `remaining_seconds`, `assign_tracks`) take plain data and are
tested without a database.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import Count
from django.utils import timezone

from orchestrator import plans
from orchestrator.models import Agent, Attempt, Checkpoint, Dependency, Event, ProviderLimit, Run, TaskRun
from orchestrator.plans import dag

State = TaskRun.State

# A ready task held back by a cap or a retry delay (the engine's `throttled` state is the
# other kind of holding back: by the provider's rate budget or backoff).
WAITING = "waiting"

# Display states in the order a legend or a count lists them (active work first).
DISPLAY_ORDER = (
    State.RUNNING,
    State.QUEUED,
    State.THROTTLED,
    WAITING,
    State.READY,
    State.WAITING_GATE,
    State.AWAITING_REVIEW,
    State.PENDING,
    State.SUCCEEDED,
    State.FAILED,
    State.SKIPPED,
    State.CANCELLED,
)
STATE_LABELS = {
    State.PENDING: "pending",
    State.WAITING_GATE: "needs approval",
    State.READY: "ready",
    WAITING: "held back",
    State.THROTTLED: "throttled",
    State.QUEUED: "queued",
    State.RUNNING: "running",
    State.AWAITING_REVIEW: "in review",
    State.SUCCEEDED: "succeeded",
    State.FAILED: "failed",
    State.SKIPPED: "skipped",
    State.CANCELLED: "cancelled",
}

# Siblings with the same upstream tasks and agent form a group from this many on ...
GROUP_MIN_SIZE = 3
# ... and the page first shows groups collapsed, largest first, until no layer of the DAG is
# wider than this many nodes (a person can expand them again).
MAX_LAYER_NODES = 10
# Rows the event log shows at once.
LOG_LIMIT = 200
# Event families the log can be filtered by (the part of the type before the dot).
EVENT_FAMILIES = ("run", "task", "checkpoint", "plan", "provider", "attempt", "access")
# The log hides the streamed-progress heartbeat unless asked ("all") or filtered to it.
NOISY_TYPES = ("task.progress",)


def display_state(state: str, wait_reason: str = "") -> str:
    """`waiting` for a ready task that a cap or a retry delay holds back, else the task's state."""
    return WAITING if state == State.READY and wait_reason else state


# --- Tasks ------------------------------------------------------------------------------------------


@dataclass
class TaskView:
    pk: int
    key: str
    title: str
    agent: str
    agent_id: int
    state: str
    display_state: str
    wait_reason: str
    progress: int
    input_tokens: int
    output_tokens: int
    live_output_tokens: int  # streamed so far by the attempt running now (not yet settled)
    cost_usd: Decimal
    attempt_count: int
    error: str
    gate: str
    ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def state_label(self) -> str:
        return STATE_LABELS.get(self.display_state, self.display_state)

    @property
    def tokens(self) -> int:
        """The task's token burn: settled input + output tokens plus what is streaming now."""
        return self.input_tokens + self.output_tokens + self.live_output_tokens

    @property
    def is_terminal(self) -> bool:
        return self.state in TaskRun.TERMINAL


def tasks_query(run_id: int):
    return TaskRun.objects.filter(run_id=run_id).select_related("subtask", "agent").order_by("subtask__position", "pk")


def live_output_tokens(tasks: Iterable[TaskRun]) -> dict[int, int]:
    """Output tokens streamed so far by each running task's current attempt (from its progress events)."""
    live: dict[int, int] = {}
    for task in tasks:
        if task.state != State.RUNNING:
            continue
        events = Event.objects.filter(task_run_id=task.pk, type="task.progress")
        if task.started_at:
            events = events.filter(created_at__gte=task.started_at)
        payload = events.order_by("-id").values_list("payload", flat=True).first()
        if payload:
            live[task.pk] = int(payload.get("output_tokens") or 0)
    return live


def _view(task: TaskRun, live: Mapping[int, int]) -> TaskView:
    return TaskView(
        pk=task.pk,
        key=task.subtask.key,
        title=task.subtask.title,
        agent=task.agent.name,
        agent_id=task.agent_id,
        state=task.state,
        display_state=display_state(task.state, task.wait_reason),
        wait_reason=task.wait_reason,
        progress=100 if task.state == State.SUCCEEDED else task.progress,
        input_tokens=task.input_tokens,
        output_tokens=task.output_tokens,
        live_output_tokens=live.get(task.pk, 0),
        cost_usd=task.cost_usd,
        attempt_count=task.attempt_count,
        error=task.error,
        gate=task.subtask.gate,
        ready_at=task.ready_at,
        started_at=task.started_at,
        finished_at=task.finished_at,
    )


def task_views(run: Run | int, task_ids: Iterable[int] | None = None) -> list[TaskView]:
    """Every task of the run in plan order (or only `task_ids`), with live token burn."""
    run_id = run.pk if isinstance(run, Run) else run
    query = tasks_query(run_id)
    if task_ids is not None:
        query = query.filter(pk__in=list(task_ids))
    tasks = list(query)
    live = live_output_tokens(tasks)
    return [_view(t, live) for t in tasks]


def task_view(task: TaskRun) -> TaskView:
    task = tasks_query(task.run_id).get(pk=task.pk)
    return _view(task, live_output_tokens([task]))


# --- The DAG ------------------------------------------------------------------------------------------


def fanout_groups(
    agent_of: Mapping[Hashable, str],
    edges: Iterable[tuple[Hashable, Hashable]],
    *,
    min_size: int = GROUP_MIN_SIZE,
) -> list[list[Hashable]]:
    """Siblings that share the same upstream set and the same agent, `min_size` or more of them.

    Nodes are taken in the order of `agent_of`; each group lists its members in that order, and
    groups come in the order of their first member. A node belongs to at most one group.
    """
    ups: dict[Hashable, set] = {node: set() for node in agent_of}
    for upstream, downstream in edges:
        if downstream in ups:
            ups[downstream].add(upstream)
    buckets: dict[tuple, list] = {}
    for node, agent in agent_of.items():
        buckets.setdefault((agent, frozenset(ups[node])), []).append(node)
    return [members for members in buckets.values() if len(members) >= min_size]


def collapsed_by_default(
    nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]], groups: Sequence[Sequence[Hashable]],
    *, max_layer: int = MAX_LAYER_NODES,
) -> set[int]:
    """Indexes of the groups to show collapsed: the largest group of the widest layer, then the
    next, until every layer shows at most `max_layer` nodes (or nothing is left to collapse).

    Members of a group share their upstreams, so a group lies within one layer of the DAG.
    """
    layer_of = {node: depth for depth, layer in enumerate(dag.layers(list(nodes), list(edges))) for node in layer}
    width = Counter(layer_of.values())
    collapsed: set[int] = set()
    while width:
        depth, widest = max(width.items(), key=lambda item: (item[1], -item[0]))
        if widest <= max_layer:
            break
        candidates = [i for i, g in enumerate(groups) if i not in collapsed and layer_of[g[0]] == depth]
        if not candidates:
            width.pop(depth)  # nothing (more) to collapse in this layer: look at the others
            continue
        biggest = max(candidates, key=lambda i: (len(groups[i]), -i))
        collapsed.add(biggest)
        width[depth] -= len(groups[biggest]) - 1
    return collapsed


@dataclass
class Graph:
    nodes: list[dict]
    edges: list[dict]
    groups: list[dict]

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "edges": self.edges, "groups": self.groups}


def graph(run: Run | int) -> Graph:
    """Nodes (one per task, id `t<task pk>`), dependency edges and fan-out groups, for the DAG view.

    Node states are not here: the page reads them from the task rows it keeps up to date, so the
    structure is sent once and the states as they change.
    """
    run = run if isinstance(run, Run) else Run.objects.get(pk=run)
    tasks = list(tasks_query(run.pk))
    task_of_subtask = {t.subtask_id: t for t in tasks}
    pairs = [
        (task_of_subtask[up].pk, task_of_subtask[down].pk)
        for up, down in Dependency.objects.filter(plan_id=run.plan_id).order_by("pk").values_list("upstream_id", "downstream_id")
        if up in task_of_subtask and down in task_of_subtask
    ]
    groups = fanout_groups({t.pk: t.agent.name for t in tasks}, pairs)
    collapsed = collapsed_by_default([t.pk for t in tasks], pairs, groups)
    by_pk = {t.pk: t for t in tasks}
    group_of = {}
    group_dicts = []
    for index, members in enumerate(groups, start=1):
        gid = f"g{index}"
        first = by_pk[members[0]]
        group_dicts.append(
            {
                "id": gid,
                "agent": first.agent.name,
                "members": [f"t{pk}" for pk in members],
                "size": len(members),
                "label": f"{len(members)} × {first.agent.name}",
                "collapsed": index - 1 in collapsed,
            }
        )
        for pk in members:
            group_of[pk] = gid
    nodes = [
        {
            "id": f"t{t.pk}",
            "task": t.pk,
            "key": t.subtask.key,
            "title": t.subtask.title,
            "agent": t.agent.name,
            "group": group_of.get(t.pk),
        }
        for t in tasks
    ]
    edges = [{"id": f"e{up}-{down}", "source": f"t{up}", "target": f"t{down}"} for up, down in pairs]
    return Graph(nodes=nodes, edges=edges, groups=group_dicts)


def upstream_tasks(task: TaskRun) -> list[TaskRun]:
    """The tasks `task` depends on directly, in plan order (what it receives summaries from)."""
    ids = Dependency.objects.filter(downstream_id=task.subtask_id).values_list("upstream_id", flat=True)
    return list(
        TaskRun.objects.filter(run_id=task.run_id, subtask_id__in=list(ids))
        .select_related("subtask", "agent")
        .order_by("subtask__position")
    )


def final_tasks(run: Run) -> list[TaskRun]:
    """The plan's sinks (tasks nothing depends on): the run's result."""
    with_downstream = Dependency.objects.filter(plan_id=run.plan_id).values("upstream_id")
    return list(tasks_query(run.pk).exclude(subtask_id__in=with_downstream))


def final_task_ids(run: Run) -> set[int]:
    with_downstream = Dependency.objects.filter(plan_id=run.plan_id).values("upstream_id")
    return set(TaskRun.objects.filter(run_id=run.pk).exclude(subtask_id__in=with_downstream).values_list("pk", flat=True))


# --- Agent lanes ----------------------------------------------------------------------------------


@dataclass
class Lane:
    agent: Agent
    running: list[TaskView]
    queued: int
    waiting: int  # ready, held back or throttled
    upcoming: int  # pending or at a gate
    done: int
    total: int
    slots_used: int  # this agent's queued + running tasks across every run
    cap: int  # the agent's max_concurrency
    tokens: int
    cost_usd: Decimal

    @property
    def slots_free(self) -> int:
        return max(0, self.cap - self.slots_used)

    @property
    def slot_marks(self) -> list[bool]:
        """One mark per slot (True = in use), at most 16 shown."""
        return [i < self.slots_used for i in range(min(self.cap, 16))]


def lanes(run: Run, views: Sequence[TaskView] | None = None) -> list[Lane]:
    """One lane per agent of the plan, in order of first appearance."""
    views = list(views) if views is not None else task_views(run)
    by_agent: dict[int, list[TaskView]] = defaultdict(list)
    for view in views:
        by_agent[view.agent_id].append(view)
    agents = Agent.objects.in_bulk(list(by_agent))
    busy = dict(
        TaskRun.objects.filter(agent_id__in=list(by_agent), state__in=TaskRun.ACTIVE)
        .order_by()
        .values_list("agent_id")
        .annotate(n=Count("pk"))
    )
    result = []
    for agent_id, items in by_agent.items():
        states = Counter(v.state for v in items)
        result.append(
            Lane(
                agent=agents[agent_id],
                running=[v for v in items if v.state == State.RUNNING],
                queued=states[State.QUEUED],
                waiting=states[State.READY] + states[State.THROTTLED],
                upcoming=states[State.PENDING] + states[State.WAITING_GATE],
                done=sum(states[s] for s in TaskRun.TERMINAL),
                total=len(items),
                slots_used=busy.get(agent_id, 0),
                cap=agents[agent_id].max_concurrency,
                tokens=sum(v.tokens for v in items),
                cost_usd=sum((v.cost_usd for v in items), Decimal("0")),
            )
        )
    return result


# --- Totals and ETA ---------------------------------------------------------------------------------


def remaining_seconds(
    keys: Sequence[str], edges: Iterable[tuple[str, str]], remaining: Mapping[str, float], cap: int
) -> float:
    """Lower bound on the time left: max(remaining critical path, remaining work / cap).

    `remaining` gives each task's seconds of work left (0 for finished tasks). The makespan of
    a DAG under a concurrency cap can be no shorter than its longest chain, nor than its total
    work spread over every slot; a good scheduler stays close to the larger of the two.
    """
    if not keys:
        return 0.0
    lengths = dag.remaining_path_lengths(keys, edges, remaining)
    critical = max(lengths.values(), default=0.0)
    work = sum(remaining.get(k, 0.0) for k in keys)
    return max(critical, work / max(1, cap))


def pace(tasks: Iterable[TaskRun | TaskView], estimates: Mapping[str, float]) -> float:
    """How much longer than estimated this run's tasks take: median of actual / estimated.

    1.0 until a task has finished; kept within 0.2 .. 5 so that one odd task cannot swing it.
    """
    ratios = [
        (t.finished_at - t.started_at).total_seconds() / estimates[t.key]
        for t in tasks
        if t.state == State.SUCCEEDED
        and t.started_at
        and t.finished_at
        and estimates.get(t.key, 0) > 0
    ]
    if not ratios:
        return 1.0
    return min(5.0, max(0.2, statistics.median(ratios)))


@dataclass
class EffectiveCap:
    value: int
    limited_by: str  # "run cap", "agent limits" or "provider in-flight limit"


def effective_cap(run: Run, agent_ids: Iterable[int] | None = None) -> EffectiveCap:
    """How many of this run's tasks can run at once now: the tightest of the run's cap, the
    summed limits of the agents that still have work, and the providers' in-flight caps in force
    (which adaptive concurrency lowers after 429 answers)."""
    if agent_ids is None:
        agent_ids = (
            run.tasks.exclude(state__in=TaskRun.TERMINAL).values_list("agent_id", flat=True).distinct()
        )
    agents = list(Agent.objects.filter(pk__in=list(agent_ids)))
    candidates = [(run.cap, "run cap")]
    if agents:
        candidates.append((sum(a.max_concurrency for a in agents), "agent limits"))
        pairs = {(a.provider, a.model) for a in agents}
        limits = [
            pl for pl in ProviderLimit.objects.all() if (pl.provider, pl.model) in pairs
        ]
        limited = [pl.effective_in_flight or pl.max_in_flight for pl in limits]
        if limits and len(limits) == len(pairs) and all(limited):
            candidates.append((sum(limited), "provider in-flight limit"))
    value, why = min(candidates, key=lambda c: c[0])
    return EffectiveCap(max(0, value), why)


@dataclass
class StateCount:
    state: str
    label: str
    count: int


@dataclass
class Totals:
    status: str
    status_label: str
    summary: str
    elapsed_s: float
    eta_s: float | None
    total: int
    done: int
    running: int
    counts: list[StateCount]
    cost_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal
    input_tokens: int
    output_tokens: int
    cap: int
    effective_cap: EffectiveCap
    peak_running: int
    pending_checkpoints: int

    @property
    def cost_percent(self) -> int:
        if self.budget_usd <= 0:
            return 100
        return min(100, int(100 * self.cost_usd / self.budget_usd))

    @property
    def done_percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0


def totals(run: Run, views: Sequence[TaskView] | None = None, *, now: datetime | None = None) -> Totals:
    now = now or timezone.now()
    run.refresh_from_db()
    views = list(views) if views is not None else task_views(run)
    counts = Counter(v.display_state for v in views)
    end = run.finished_at or now
    elapsed = (end - run.started_at).total_seconds() if run.started_at else 0.0
    eta = None
    unfinished = [v for v in views if not v.is_terminal]
    if not run.is_finished and unfinished:
        estimates = plans.plan_weights(run.plan)
        speed = pace(views, estimates)
        remaining = {}
        for v in views:
            guess = estimates.get(v.key, plans.MIN_ESTIMATED_DURATION_S) * speed
            if v.is_terminal:
                remaining[v.key] = 0.0
            elif v.state == State.RUNNING and v.started_at:
                # A running task needs its estimate less what it already ran, at least a tenth
                # of it (streamed progress is no guide: answers rarely reach max_tokens).
                ran = (now - v.started_at).total_seconds()
                remaining[v.key] = max(guess - ran, 0.1 * guess)
            else:
                remaining[v.key] = guess
        keys, edges = plans.plan_graph(run.plan)
        cap_now = effective_cap(run, {t.agent_id for t in unfinished})
        eta = remaining_seconds(keys, edges, remaining, max(1, cap_now.value))
        cap = cap_now
    else:
        cap = effective_cap(run)
    return Totals(
        status=run.status,
        status_label=run.get_status_display(),
        summary=run.summary,
        elapsed_s=max(0.0, elapsed),
        eta_s=eta,
        total=len(views),
        done=sum(counts[s] for s in TaskRun.TERMINAL),
        running=counts[State.RUNNING],
        counts=[StateCount(s, STATE_LABELS[s], counts[s]) for s in DISPLAY_ORDER if counts[s]],
        cost_usd=run.cost_usd,
        reserved_usd=run.reserved_usd,
        budget_usd=run.budget_usd,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cap=run.cap,
        effective_cap=cap,
        peak_running=run.peak_running,
        pending_checkpoints=run.checkpoints.filter(status=Checkpoint.Status.PENDING).count(),
    )


# --- Gantt timeline ---------------------------------------------------------------------------------


def assign_tracks(intervals: Sequence[tuple[float, float | None]]) -> list[int]:
    """A track number per interval so that intervals on one track never overlap.

    Greedy interval partitioning by start time: the fewest tracks possible. An interval whose
    end is None is still open (runs until now) and keeps its track.
    """
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], i))
    track_end: list[float] = []
    result = [0] * len(intervals)
    for i in order:
        start, end = intervals[i]
        end = math.inf if end is None else end
        for track, busy_until in enumerate(track_end):
            if busy_until <= start:
                track_end[track] = end
                result[i] = track
                break
        else:
            track_end.append(end)
            result[i] = len(track_end) - 1
    return result


def _ms(value: datetime | None) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


@dataclass
class GanttBar:
    attempt: int  # Attempt pk
    task: int  # TaskRun pk
    agent_id: int
    key: str
    title: str
    number: int
    state: str
    worker: str
    error: str
    start_ms: int
    end_ms: int | None  # None while the attempt runs
    input_tokens: int
    output_tokens: int


@dataclass
class GanttLane:
    agent: str
    agent_id: int
    tracks: list[list[GanttBar]]

    @property
    def bars(self) -> list[tuple[int, GanttBar]]:
        """(track, bar) for every bar of the lane."""
        return [(number, bar) for number, track in enumerate(self.tracks) for bar in track]


@dataclass
class Gantt:
    start_ms: int | None
    end_ms: int | None  # None while the run goes on: the timeline ends "now"
    lanes: list[GanttLane] = field(default_factory=list)

    @property
    def bars(self) -> int:
        return sum(len(track) for lane in self.lanes for track in lane.tracks)


def gantt_bar(attempt: Attempt) -> GanttBar:
    """One attempt as a bar (the Attempt with task_run, its subtask and agent selected)."""
    return GanttBar(
        attempt=attempt.pk,
        task=attempt.task_run_id,
        agent_id=attempt.task_run.agent_id,
        key=attempt.task_run.subtask.key,
        title=attempt.task_run.subtask.title,
        number=attempt.number,
        state=attempt.state,
        worker=attempt.worker,
        error=attempt.error,
        start_ms=_ms(attempt.started_at),
        end_ms=_ms(attempt.finished_at),
        input_tokens=attempt.input_tokens,
        output_tokens=attempt.output_tokens,
    )


def started_attempts(run_id: int, task_ids: Iterable[int] | None = None):
    attempts = Attempt.objects.filter(task_run__run_id=run_id, started_at__isnull=False)
    if task_ids is not None:
        attempts = attempts.filter(task_run_id__in=list(task_ids))
    return attempts.select_related("task_run__subtask", "task_run__agent").order_by("started_at", "pk")


def gantt(run: Run) -> Gantt:
    """Every attempt that started, as a bar on its agent's lane; overlapping ones on separate tracks.

    Every agent of the plan has a lane, in plan order, even before its first attempt.
    """
    attempts = list(started_attempts(run.pk))
    lane_agents = dict(tasks_query(run.pk).values_list("agent__name", "agent_id"))
    per_agent: dict[str, list[GanttBar]] = {name: [] for name in lane_agents}
    for attempt in attempts:
        name = attempt.task_run.agent.name
        lane_agents.setdefault(name, attempt.task_run.agent_id)
        per_agent.setdefault(name, []).append(gantt_bar(attempt))
    result_lanes = []
    for agent, bars in per_agent.items():
        tracks_of = assign_tracks([(b.start_ms, b.end_ms) for b in bars])
        tracks: list[list[GanttBar]] = [[] for _ in range(max(tracks_of, default=0) + 1)]
        for bar, track in zip(bars, tracks_of):
            tracks[track].append(bar)
        result_lanes.append(GanttLane(agent=agent, agent_id=lane_agents[agent], tracks=tracks))
    start = run.started_at or (attempts[0].started_at if attempts else None)
    return Gantt(start_ms=_ms(start), end_ms=_ms(run.finished_at), lanes=result_lanes)


# --- Event log ------------------------------------------------------------------------------------


def event_log(
    run: Run | int,
    *,
    task_id: int | None = None,
    type_filter: str = "",
    after_seq: int | None = None,
    limit: int = LOG_LIMIT,
) -> list[Event]:
    """Events of the run, newest first.

    `type_filter`: "" (everything but the streamed-progress heartbeat), "all", a family such as
    "task" or "checkpoint" (every type that starts with it), or one exact type like "task.failed".
    `after_seq` keeps only events newer than that sequence number.
    """
    run_id = run.pk if isinstance(run, Run) else run
    events = Event.objects.filter(run_id=run_id).select_related("task_run__subtask", "agent")
    if task_id:
        events = events.filter(task_run_id=task_id)
    events = filter_types(events, type_filter)
    if after_seq is not None:
        events = events.filter(seq__gt=after_seq)
    return list(events.order_by("-seq")[:limit])


def filter_types(events, type_filter: str):
    if type_filter == "all":
        return events
    if not type_filter:
        return events.exclude(type__in=NOISY_TYPES)
    if "." in type_filter:
        return events.filter(type=type_filter)
    return events.filter(type__startswith=f"{type_filter}.")


def matches_type_filter(event_type: str, type_filter: str) -> bool:
    """The same rule as `filter_types`, for one event type (the live view filters as it appends)."""
    if type_filter == "all":
        return True
    if not type_filter:
        return event_type not in NOISY_TYPES
    if "." in type_filter:
        return event_type == type_filter
    return event_type.startswith(f"{type_filter}.")


def describe_event(event: Event) -> str:
    """The event's message, or a short account of its payload when it has none."""
    if event.message:
        return event.message
    payload = event.payload or {}
    parts = []
    for name in ("attempt", "worker", "progress", "output_tokens", "input_tokens", "cost_usd", "latency_ms", "reason"):
        value = payload.get(name)
        if value in (None, ""):
            continue
        if name == "progress":
            parts.append(f"{value}%")
        elif name == "latency_ms":
            parts.append(f"waited {value} ms")
        elif name == "cost_usd":
            parts.append(f"${value}")
        else:
            parts.append(f"{name.replace('_', ' ')} {value}")
    return " · ".join(parts)


def event_types(run: Run) -> list[str]:
    """The distinct event types this run has written, sorted."""
    return sorted(set(Event.objects.filter(run_id=run.pk).values_list("type", flat=True).distinct()))


# --- Checkpoints --------------------------------------------------------------------------------------


def pending_checkpoints(run: Run) -> list[Checkpoint]:
    return list(
        run.checkpoints.filter(status=Checkpoint.Status.PENDING)
        .select_related("task_run__subtask", "task_run__agent")
        .order_by("created_at", "pk")
    )


def recent_decisions(run: Run, limit: int = 10) -> list[Checkpoint]:
    return list(
        run.checkpoints.exclude(status=Checkpoint.Status.PENDING)
        .select_related("task_run__subtask", "decided_by")
        .order_by("-decided_at", "-pk")[:limit]
    )

