"""The run's ETA: how long until its last task ends, and when its countdown has run out.

Its one job is the forecast the run page's ETA card shows (`totals.Totals` carries it): what is
left of the run scheduled under its effective cap and each agent's own limit (`plans.makespan`,
as the pre-flight forecasts the whole plan): running tasks hold their slots for their estimate
less what they ran, then the rest start as their upstreams end. An agent's limit is shared with
other runs: the slots they hold now stay busy until their tasks are expected to end
(`other_runs`). Every estimate is scaled by the run's `pace`. While everything left waits for a
person's decision (nothing runs or can start, or what runs waits for a tool call's approval:
`nothing_moves`) it does not count down: it is the time after the decision. Once decided, the
time a tool call waited for a person is not counted as its task's work either
(`waited_for_people`). When the browser's countdown has run out is decided here too
(`ETA_RUN_OUT_S`), so a reload and a ticking page agree. `pace`, `work_took` and
`waited_for_people` take plain data and are tested without a database.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import NamedTuple

from orchestrator import plans, sql
from orchestrator.models import Agent, Checkpoint, Run, TaskRun
from orchestrator.plans import dag, makespan

from . import other_runs
from .approved_plan import fixed_once_approved
from .tasks import State, TaskState

# A countdown with this little left (seconds) has run out: the ETA card then says `Totals.eta_overdue`,
# on a reload as on the ticking page (static/dashboard/run/clocks.js reads it from the card's
# data-run-out-s).
ETA_RUN_OUT_S = 0.5


@dataclass(frozen=True)
class EtaPlan:
    """What the ETA needs of a run's plan: its DAG, ready for path lengths, and each subtask's
    estimated seconds (as the scheduler ranked them at launch: engine/run_launch.py)."""

    graph: dag.SinksFirst
    estimates: Mapping[str, float]


@fixed_once_approved
def eta_plan(run: Run) -> EtaPlan:
    keys, edges = plans.plan_graph(run.plan)
    return EtaPlan(dag.SinksFirst.of(keys, edges), MappingProxyType(plans.plan_weights(run.plan)))


# Tasks whose work has ended well: succeeded, or done and awaiting a person's review.
WORKED = (State.SUCCEEDED, State.AWAITING_REVIEW)


def work_took(tasks: Iterable[TaskState], waited: Mapping[int, float] = MappingProxyType({})) -> dict[str, float]:
    """Seconds the work of each task that has done it took (subtask key -> seconds): its last
    attempt, from its start (when it was claimed) to its end, less the time it waited for a person
    to approve its tool calls (`waited`: task id -> seconds, `waited_for_people`). Not the wait
    for a reviewer after it (a reviewed task's `finished_at` is the approval), nor a wait to be
    admitted before it; a pause does not stop a running attempt."""
    return {
        t.key: (t.worked_until - t.started_at).total_seconds() - waited.get(t.pk, 0.0)
        for t in tasks
        if t.state in WORKED and t.started_at and t.worked_until
    }


def waited_for_people(
    tasks: Iterable[TaskState], spans: Iterable[tuple[int, datetime, datetime | None]], now: datetime
) -> dict[int, float]:
    """Seconds each task's last attempt has waited for a person to approve its tool calls (task id
    -> seconds), from the spans its tool checkpoints were open (`spans`: task id, opened, decided
    or closed; one still open lasts until `now`). Spans that overlap (calls of one turn asked
    together) count once, and only within the attempt: from the task's start to the end of its
    work (or now). The attempt's timeout does not run meanwhile either (engine/tool_attempt.py)."""
    open_spans: dict[int, list[tuple[datetime, datetime]]] = {}
    for task_id, opened, closed in spans:
        open_spans.setdefault(task_id, []).append((opened, closed or now))
    waited = {}
    for task in tasks:
        if task.pk not in open_spans or task.started_at is None:
            continue
        end, reached, seconds = task.worked_until or now, task.started_at, 0.0
        for opened, closed in sorted(open_spans[task.pk]):
            opened, closed = max(opened, reached), min(closed, end)
            if closed > opened:
                seconds += (closed - opened).total_seconds()
                reached = closed
        waited[task.pk] = seconds
    return waited


class CheckpointRow(NamedTuple):
    """A checkpoint as the totals and the ETA read it (`checkpoint_rows`)."""

    kind: str
    status: str
    task_id: int | None
    opened: datetime
    decided: datetime | None  # decided or closed; None while pending


# The checkpoints the totals read: every pending one (their count, the tool calls waiting among
# them) and every tool call's, decided or not (how long their tasks waited for people).
PENDING_OR_TOOL_CALL = (
    ("kind", "status"),
    [(kind, Checkpoint.Status.PENDING) for kind in Checkpoint.Kind]
    + [(Checkpoint.Kind.TOOL, status) for status in Checkpoint.Status if status != Checkpoint.Status.PENDING],
)


def checkpoint_rows(run: Run) -> list[CheckpointRow]:
    """The run's pending checkpoints and its tool calls' checkpoints, in one statement: the live
    view builds the totals at nearly every frame of a running run."""
    names = ("kind", "status", "task_run_id", "created_at", "decided_at")
    return [CheckpointRow(*row) for row in sql.select(Checkpoint, names, run_id=run.pk, match=PENDING_OR_TOOL_CALL)]


def tool_call_spans(checkpoints: Iterable[CheckpointRow]) -> list[tuple[int, datetime, datetime | None]]:
    """When each tool call waited for a person: (task id, opened, decided or closed; None while
    pending), for `waited_for_people`. Those of a task's earlier attempts are among them, but
    closed when their attempt ended (engine/tool_approvals.py), before the task was claimed again:
    `waited_for_people` counts from its last claim (its `started_at`), as its run time is counted."""
    return [
        (c.task_id, c.opened, c.decided)
        for c in checkpoints
        if c.kind == Checkpoint.Kind.TOOL and c.task_id is not None
    ]


def pace(took: Mapping[str, float], estimates: Mapping[str, float]) -> float:
    """How much longer than estimated this run's tasks take: the seconds the tasks that have done
    their work took (`took`: key -> seconds) over the seconds they were estimated at, counting the
    plan's estimate as one more task of its mean length that took as long as estimated.

    Totals, not a median of each task's ratio: a task weighs as much as it was estimated to last,
    so a second of overhead that doubles a 1 s task does not double a 25 s task left (as a ratio
    it did: 45 s forecast, 27 s taken); and the one task "as estimated" keeps the first short
    tasks from setting the pace alone, until as much work as a typical task has been measured.
    1.0 until a task has done its work; kept within 0.2 .. 5, as a bound of what one run's
    history can say of its agents.
    """
    done = [(seconds, estimates[key]) for key, seconds in took.items() if estimates.get(key, 0) > 0]
    if not done:
        return 1.0
    prior = statistics.fmean(e for e in estimates.values() if e > 0)
    took_s = sum(seconds for seconds, _ in done) + prior
    estimated_s = sum(estimate for _, estimate in done) + prior
    return min(5.0, max(0.2, took_s / estimated_s))


# Tasks whose agent's work is over: a task awaiting review waits for a person, not for a slot.
WORK_DONE = (*TaskRun.TERMINAL, State.AWAITING_REVIEW)
# Tasks that move on without a person: admitted, or ready to be when a slot or budget frees.
MOVING = (*TaskRun.ACTIVE, *TaskRun.ADMISSIBLE)


def time_left(
    plan: EtaPlan,
    tasks: Sequence[TaskState],
    agents: Mapping[int, Agent],
    cap: int,
    *,
    now: datetime,
    waited: Mapping[int, float] = MappingProxyType({}),
    elsewhere: other_runs.OtherRuns = other_runs.NONE,
    cap_shared: bool = False,
) -> float:
    """Seconds until the last of `tasks` ends: running (and queued) tasks hold their agent's slots
    for their estimate less what they ran (streamed progress is no guide, answers rarely reach
    max_tokens; a task past its estimate counts as ending now: a floor under it, a tenth of its
    estimate, kept the countdown from ever running out while it overran, each progress save
    setting it afresh), then the rest start in rank order under `cap` and each agent's
    `max_concurrency`; every estimate scaled by the run's `pace`. The time a task's attempt
    waited for a person to approve its tool calls (`waited`: task id -> seconds, until now for a
    call still pending) is not work: it neither works its estimate off nor slows the pace. The
    slots other runs hold of the agents (`elsewhere`)
    are busy until their tasks are expected to end (at the same pace), and so are those they hold
    of `cap` when it is shared (`cap_shared`: the providers' in-flight limit)."""
    speed = pace(work_took(tasks, waited), plan.estimates)
    expected = {t.key: plan.estimates.get(t.key, plans.MIN_ESTIMATED_DURATION_S) * speed for t in tasks}
    running = {}
    for task in tasks:
        if task.state in TaskRun.ACTIVE:
            ran = (now - task.started_at).total_seconds() - waited.get(task.pk, 0.0) if task.started_at else 0.0
            running[task.key] = max(expected[task.key] - ran, 0.0)
    work = makespan.Work(plan.graph, {t.key: agents[t.agent_id].name for t in tasks if t.agent_id in agents}, expected)
    held: dict[str, list[float]] = {}
    for slot in elsewhere.slots:
        if slot.agent_id in agents:
            held.setdefault(agents[slot.agent_id].name, []).append(slot.seconds_left(now, speed))
    limits = makespan.Limits(
        max(1, cap),
        {agent.name: agent.max_concurrency for agent in agents.values()},
        MappingProxyType(held),
        tuple(slot.seconds_left(now, speed) for slot in elsewhere.slots) if cap_shared else (),
    )
    done = {t.key for t in tasks if t.state in WORK_DONE}
    return makespan.forecast(work, limits, done=done, running=running).seconds


def tool_calls_waiting(pending: Iterable[CheckpointRow]) -> dict[int, datetime]:
    """The running tasks that wait for a person to approve a tool call: task id -> when the first
    of their pending calls asked, from the run's pending checkpoints. Such a task does not move on
    its own, as a task at its gate does not (engine/tool_approvals.py: it stays running, its run
    goes on)."""
    asked: dict[int, datetime] = {}
    for c in pending:
        if c.kind == Checkpoint.Kind.TOOL and c.task_id is not None:
            asked[c.task_id] = min(c.opened, asked.get(c.task_id, c.opened))
    return asked


def nothing_moves(tasks: Iterable[TaskState], asked_at: Mapping[int, datetime]) -> bool:
    """Does nothing of the run move on without a person? No task is admitted or ready to be, but
    for those waiting for a tool call's approval (`asked_at`: `tool_calls_waiting`)."""
    return not any(v.state in MOVING and v.pk not in asked_at for v in tasks)
