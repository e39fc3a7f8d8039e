"""The run page's totals: elapsed time, ETA, tasks by state, cost against budget, effective cap.

The ETA is what is left of the run scheduled under its effective cap and each agent's own limit
(`plans.makespan`, as the pre-flight forecasts the whole plan): running tasks hold their slots for
their estimate less what they ran, then the rest start as their upstreams end. An agent's limit is
shared with other runs: the slots they hold now stay busy until their tasks are expected to end
(`other_runs`), and the effective cap counts only the slots they leave free. There is none
while the run is paused (nothing starts until Resume) and none for a run that ended or never
started. While everything left waits for a person's decision (nothing runs or can start, or what
runs waits for a tool call's approval) it does not count down: it is the time after the decision
("40 s after the decision"). Once decided, the time a tool call waited for a person is not counted
as its task's work either (`waited_for_people`). What the browser's countdown says once it runs out comes from here
too (`eta_overdue`), so a reload and a ticking page say the same. `pace` takes plain data and is tested without a database.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import NamedTuple

from django.utils import timezone

from orchestrator import plans, sql, wording
from orchestrator.models import Agent, Attempt, Checkpoint, ProviderLimit, Run, TaskRun
from orchestrator.plans import dag, makespan

from . import costs, other_runs
from .approved_plan import fixed_once_approved
from .tasks import (
    DISPLAY_ORDER,
    STATE_LABELS,
    RunTokens,
    State,
    StripSegment,
    TaskState,
    agents_of,
    outcome_text,
    rejected_at_gate,
    run_tokens,
    state_strip,
    task_states,
)

# A countdown with this little left (seconds) has run out: the ETA card then says `eta_overdue`,
# on a reload as on the ticking page (static/dashboard/run/clocks.js reads it from the card's
# data-run-out-s).
ETA_RUN_OUT_S = 0.5


@dataclass(frozen=True)
class EtaPlan:
    """What the ETA needs of a run's plan: its DAG, ready for path lengths, and each subtask's
    estimated seconds (as the scheduler ranked them at launch: engine/runs.py)."""

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
    """A checkpoint as the totals read it (`checkpoint_rows`)."""

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


@dataclass
class EffectiveCap:
    value: int
    limited_by: str  # "run cap", "agent limits …" or "provider in-flight limit …"
    # The tightest cap but the agents' limits, which the ETA's schedule keeps per agent (with the
    # slots other runs hold) rather than summed; and whether that is the providers' in-flight
    # limit, which other runs share (their requests in flight hold it too).
    for_forecast: int = 0
    forecast_cap_shared: bool = False


def effective_cap(run: Run, agent_ids: Iterable[int] | None = None) -> EffectiveCap:
    """How many of this run's tasks can run at once now: the tightest of the run's cap, the
    agents' slots that other runs leave free (of the agents that still have work), and the
    providers' in-flight caps in force (which adaptive concurrency lowers after 429 answers) less
    what other runs have in flight on them."""
    if agent_ids is None:
        agent_ids = run.tasks.exclude(state__in=TaskRun.TERMINAL).values_list("agent_id", flat=True).distinct()
    agents = list(Agent.objects.filter(pk__in=list(agent_ids)))
    return _effective_cap(run, agents, other_runs.other_runs(run, [a.pk for a in agents]))


def _effective_cap(
    run: Run,
    agents: Sequence[Agent],
    elsewhere: other_runs.OtherRuns,
    price_list: Mapping[tuple[str, str], ProviderLimit] | None = None,
) -> EffectiveCap:
    """`effective_cap` of these agents; `price_list`: every ProviderLimit (`costs.price_list`),
    read here when not given."""
    candidates = [(run.cap, "run cap")]
    provider_cap = None
    if agents:
        pairs = {(a.provider, a.model) for a in agents}
        every_limit = costs.price_list() if price_list is None else price_list
        limits = [pl for pair, pl in every_limit.items() if pair in pairs]
        # The in-flight cap in force of each limit that has one (every pair must have one to count).
        limited = [cap for cap in (pl.effective_in_flight or pl.max_in_flight for pl in limits) if cap]
        if limits and len(limited) == len(limits) == len(pairs):
            provider_cap = sum(limited)
            in_flight = elsewhere.in_flight()
            busy = sum(in_flight.get(pair, 0) for pair in pairs)
            why = "provider in-flight limit"
            candidates.append(
                (provider_cap - busy, f"{why} (other runs hold {busy} of {provider_cap})" if busy else why)
            )
        held = elsewhere.counts()
        slots = sum(a.max_concurrency for a in agents)
        taken = sum(held.get(a.pk, 0) for a in agents)
        free = sum(max(0, a.max_concurrency - held.get(a.pk, 0)) for a in agents)
        why = f"agent limits (other runs hold {taken} of their {slots} slots)" if taken else "agent limits"
        candidates.append((free, why))
    value, why = min(candidates, key=lambda c: c[0])
    if provider_cap is not None and provider_cap < run.cap:
        return EffectiveCap(max(0, value), why, max(1, provider_cap), forecast_cap_shared=True)
    return EffectiveCap(max(0, value), why, max(1, run.cap))


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


def stopping_text(attempts_stopping: int) -> str:
    """ "2 attempts still stopping: not counted yet" ("" for none): what an ended run's totals do
    not hold yet (the run page's Cost and Tokens cards, the command line's last line)."""
    if not attempts_stopping:
        return ""
    return f"{wording.counted(attempts_stopping, 'attempt')} still stopping: not counted yet"


def attempts_stopping(run: Run) -> int:
    """The run's attempts that have not ended yet: of an ended run, those a cancel or a skip
    reaches at their next beat (their tokens and cost are settled then)."""
    return Attempt.objects.filter(task_run__run=run, state__in=(Attempt.State.QUEUED, Attempt.State.RUNNING)).count()


# The shortest time the elapsed note names (durations show tenths of a second: less reads "0.0 s").
SHOWN_S = 0.05


def idle_parts(paused_since: datetime | None, paused_s: float, ended_s: float) -> list[str]:
    """How much of a run's elapsed (wall-clock) time nothing could start, in words: the pause
    under way, the pauses before, the time it lay ended before a person reopened it. The run
    page's Elapsed card and the runs lists say it alike."""
    parts = []
    if paused_since is not None:
        parts.append(f"paused since {paused_since:%H:%M:%S} UTC")
    if paused_s >= SHOWN_S:
        parts.append(f"{wording.duration(paused_s)} {'paused before that' if paused_since else 'of it paused'}")
    if ended_s >= SHOWN_S:
        parts.append(f"{wording.duration(ended_s)} of it ended, until it was reopened")
    return parts


def run_idle_text(run: Run) -> str:
    """`idle_parts` of a run, joined: "" for a run that was never paused nor reopened."""
    paused_since = run.paused_at if run.status == Run.Status.PAUSED else None
    return " · ".join(idle_parts(paused_since, run.paused_s, run.ended_s))


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
    # Its tokens, the running attempts' so far included (`run_tokens`, as `run_status` counts them).
    tokens_so_far: RunTokens
    cap: int
    effective_cap: EffectiveCap
    peak_running: int
    pending_checkpoints: int
    estimate_usd: Decimal | None = None  # the pre-flight estimate the run was launched with
    finished: bool = False
    started: bool = True
    finished_at: datetime | None = None
    # A running run whose every task left waits for a pending decision (at a gate, in review, or
    # running but waiting for a tool call's approval): nothing moves until it is taken.
    waits_for_decision: bool = False
    tool_calls_waiting: int = 0  # running tasks waiting for a person to approve a tool call
    # Attempts of an ended run still stopping (a cancel or a skip reaches them at their next
    # beat): what they used is added to the run's tokens and cost when they end.
    attempts_stopping: int = 0
    started_at: datetime | None = None
    # The pause under way began at `paused_since`; `paused_s` is what the pauses that ended
    # lasted, `ended_s` the time it lay ended before it was reopened. Elapsed is wall-clock time,
    # so its note says how much of it nothing could start.
    paused_since: datetime | None = None
    paused_s: float = 0.0
    ended_s: float = 0.0
    # Slots that other runs hold now of the agents with work left (and of their providers' in-flight
    # limit when that caps the run): the ETA waits for them to free.
    slots_elsewhere: int = 0
    # Keys of the tasks a person rejected at their gate: the skipped count names them (`outcome`).
    rejected_at_gate: tuple[str, ...] = ()
    # The tokens used on models without a price ("provider:model" -> tokens): not in `cost_usd`,
    # and beyond the budget's reach (`costs.unpriced_tokens`).
    unpriced_tokens: Mapping[str, int] = field(default_factory=dict)

    @property
    def unpriced_note(self) -> str:
        """The Cost card's word on the tokens no price counts ("" when every model used has one):
        without it, a run on an unpriced model read "$0.00 of $10.00 · 0% used", as if free."""
        return costs.unpriced_text(self.unpriced_tokens)

    @property
    def input_tokens(self) -> int:
        """The input tokens settled on the run: its ended attempts'."""
        return self.tokens_so_far.input

    @property
    def input_tokens_so_far(self) -> int:
        """The input tokens of the run, the running attempts' included (the Tokens card's "in")."""
        return self.tokens_so_far.input_so_far

    @property
    def output_tokens(self) -> int:
        """The output tokens settled on the run: its ended attempts' (the Tokens card's "out")."""
        return self.tokens_so_far.output

    @property
    def streaming_tokens(self) -> int:
        """The output the running attempts have streamed so far, not settled yet."""
        return self.tokens_so_far.streaming

    @property
    def tokens(self) -> int:
        """Every token the run has used, the running attempts' so far included (the Tokens card)."""
        return self.tokens_so_far.total

    @property
    def never_started(self) -> bool:
        """Ended before it started: its plan was rejected, or it was cancelled awaiting approval."""
        return self.finished and not self.started

    @property
    def paused(self) -> bool:
        return self.status == Run.Status.PAUSED

    @property
    def admits_nothing(self) -> tuple[str, str] | None:
        """Why the run admits no work now, as the Concurrency card's short word and its note's
        sentence; None while it admits work (up to its cap)."""
        if self.finished:
            return "ended", "the run has ended: it holds no slot"
        if self.paused:
            return "paused", "paused: nothing new starts until it is resumed"
        if self.status == Run.Status.AWAITING_APPROVAL:
            return "not started", "nothing starts until the plan is approved"
        return None

    @property
    def concurrency_of(self) -> str:
        """What follows the Concurrency card's running count: "running of 2" while the run admits
        work; a run that admits none (paused, ended, awaiting its plan's approval) is not measured
        against a cap: "running · paused"."""
        if reason := self.admits_nothing:
            return f"running · {reason[0]}"
        return f"running of {self.effective_cap.value}"

    @property
    def concurrency_note(self) -> str:
        """The sentence under the running count: the cap in force and which limit sets it, the
        peak; a run that admits nothing says first why."""
        cap = self.effective_cap
        # A run that admits nothing is measured against no cap: what would limit it is beside the point.
        if cap.value == self.cap or self.admits_nothing:
            parts = [f"run cap {self.cap}"]
        else:
            parts = [f"effective cap {cap.value}, limited by {cap.limited_by}", f"run cap {self.cap}"]
        if self.peak_running:
            parts.append(self.peak_text)
        if reason := self.admits_nothing:
            parts.insert(0, reason[1])
        return " · ".join(parts)

    @property
    def peak_text(self) -> str:
        """The most tasks this run has held queued or running at once, named a peak: beside "run
        cap 4", "at most 1 queued or running at once" read as a second, lower limit."""
        when = "peak" if self.finished else "peak so far"
        return f"{when}: {self.peak_running} queued or running at once"

    @property
    def elapsed_note(self) -> str:
        """The sentence under the elapsed time: since when, and how much of it nothing could start
        ("since 10:02:07 UTC · 4 min 10 s of it paused"; while paused, "paused since 10:09:30
        UTC"; "2 h 10 min of it ended, until it was reopened" by a retry, skip or re-run), or why
        it has none."""
        if self.started_at is None:
            return "waits for the plan's approval" if self.status == Run.Status.AWAITING_APPROVAL else "never started"
        idle = idle_parts(self.paused_since, self.paused_s, self.ended_s)
        return " · ".join([f"since {self.started_at:%H:%M:%S} UTC", *idle])

    @property
    def not_counted_yet(self) -> str:
        """The Cost and Tokens cards' word on what is still to come once the run has ended ("2
        attempts still stopping: not counted yet"; "" when none is), so that the totals of a
        just-cancelled run do not read as final."""
        return stopping_text(self.attempts_stopping)

    @property
    def eta_placeholder(self) -> str:
        """What the ETA card shows when it counts nothing down ("" when `eta_s` is shown)."""
        if self.eta_s is not None:
            return ""
        if self.finished and self.started:
            return "ended"
        if self.paused:
            return "paused"
        return wording.EM_DASH

    @property
    def eta_run_out(self) -> bool:
        """Has the countdown run out already? The card then says `eta_overdue` from the start, as
        the ticking page says it once its countdown ends (static/dashboard/run/clocks.js)."""
        return self.counts_down and self.eta_s is not None and self.eta_s <= ETA_RUN_OUT_S

    @property
    def eta_run_out_s(self) -> float:
        """`ETA_RUN_OUT_S`, for the card's data-run-out-s, which the ticking page counts down to."""
        return ETA_RUN_OUT_S

    @property
    def counts_down(self) -> bool:
        """Does the ETA tick down in the browser? Only while the run's work moves on its own: not
        paused, not waiting for its plan's approval or for a decision that everything left awaits."""
        return self.eta_s is not None and self.status == Run.Status.RUNNING and not self.waits_for_decision

    @property
    def _after_decisions(self) -> str:
        return "after the decision" if self.pending_checkpoints == 1 else "after the decisions"

    @property
    def eta_after(self) -> str:
        """What follows the ETA's duration when the run waits for a person ("" otherwise): the time
        left is counted from the decision, "40 s after the decision"."""
        return self._after_decisions if self.waits_for_decision else ""

    @property
    def eta_overdue(self) -> str:
        """What a countdown says once it has run out: "after the decision" while one is pending
        (the run cannot end before it), else "past the estimate" (its tasks take longer than
        estimated: a task that hangs would have it say "any moment" for as long as it hangs)."""
        return self._after_decisions if self.pending_checkpoints else "past the estimate"

    @property
    def eta_note(self) -> str:
        """The sentence under the ETA: when the run ended, why no time is counted down, or what
        the count leaves out."""
        if self.never_started:
            return "never started"
        if self.finished:
            return f"{self.finished_at:%H:%M:%S} UTC" if self.finished_at else ""
        if self.paused:
            return "nothing new starts: no ETA until it resumes"
        if self.status == Run.Status.AWAITING_APPROVAL:
            return "starts once the plan is approved"
        if self.pending_checkpoints:
            decisions = wording.counted(self.pending_checkpoints, "decision")
            them = "it" if self.pending_checkpoints == 1 else "them"
            if self.waits_for_decision:
                # A task waiting for a tool call's approval is running, in the table's words.
                stopped = "nothing moves" if self.tool_calls_waiting else "nothing runs"
                return f"{decisions} pending: {stopped} until a person decides"
            return f"{decisions} pending: the wait for {them} is not counted"
        if self.slots_elsewhere:
            busy = wording.counted(self.slots_elsewhere, "slot")
            return f"at the cap and each agent's limit ({busy} busy in other runs for now), excluding approvals"
        return "at the cap and each agent's limit, excluding approvals"

    @property
    def against_estimate(self) -> str:
        return self.estimate_note(self.finished)

    def estimate_note(self, finished: bool) -> str:
        """The estimate the run was launched with, and at the end the cost set against it:
        "estimated $0.0150: it cost 82% of that", "… 2.4× that", "estimated $0.0906; it never
        started" ("" without an estimate)."""
        if self.estimate_usd is None:
            return ""
        if self.estimate_usd <= 0:
            return "no estimate: no price was known for its models"
        estimated = f"estimated {wording.usd(self.estimate_usd)}"
        if self.never_started:
            return f"{estimated}; it never started"
        if not finished:  # (a run awaiting its plan's approval has not started: the estimate alone)
            return f"{estimated} before it started" if self.started else estimated
        ratio = self.cost_usd / self.estimate_usd
        return f"{estimated}: it cost {f'{ratio:.1f}×' if ratio >= 2 else f'{round(100 * ratio)}% of'} that"

    @property
    def cost_percent(self) -> int:
        """The budget used, rounded to the nearest percent (`wording.percent`), for the meter."""
        return wording.percent(self.cost_usd, self.budget_usd)

    @property
    def cost_percent_text(self) -> str:
        """The budget used in words: "<1%", "3%", "99%", "100%"."""
        return wording.percent_text(self.cost_usd, self.budget_usd)

    @property
    def outcome(self) -> str:
        """The Tasks card's headline: "3 of 10 succeeded", "7 of 22 succeeded · 15 cancelled",
        "1 of 3 succeeded · 2 skipped (a rejected at its gate)"."""
        return outcome_text({c.state: c.count for c in self.counts}, self.total, self.rejected_at_gate)

    @property
    def done_percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    @property
    def strip(self) -> list[StripSegment]:
        return state_strip({c.state: c.count for c in self.counts})

    @property
    def counts_text(self) -> str:
        """The tasks by state in words: "3 succeeded, 2 cancelled"."""
        return ", ".join(f"{c.count} {c.label}" for c in self.counts) or "no tasks"


def totals(
    run: Run,
    tasks: Sequence[TaskState] | None = None,
    *,
    now: datetime | None = None,
    elsewhere: other_runs.OtherRuns | None = None,
    agents: Mapping[int, Agent] | None = None,
) -> Totals:
    """The run's totals from its tasks' states, their agents and the slots other runs hold of them
    (each read here when not given). A caller that gives the tasks' states read them with `run`, in
    one snapshot (the live view's frame, the page); without them the run is read afresh too."""
    now = now or timezone.now()
    if tasks is None:
        run.refresh_from_db()
        tasks = task_states(run)
    tasks = list(tasks)
    counts = Counter(v.display_state for v in tasks)
    end = run.finished_at or now
    elapsed = (end - run.started_at).total_seconds() if run.started_at else 0.0
    eta = None
    unfinished = [v for v in tasks if not v.is_terminal]
    of_unfinished = {v.agent_id for v in unfinished}
    every_agent = agents if agents is not None else agents_of(tasks)
    agents = {pk: agent for pk, agent in every_agent.items() if pk in of_unfinished}
    # The providers' limits and prices, read once: for the in-flight caps of the agents with work
    # left, and for the models without a price that have used tokens (of any task, ended or not).
    limits = costs.price_list() if agents or any(v.spent_tokens for v in tasks) else {}
    elsewhere = (elsewhere if elsewhere is not None else other_runs.other_runs(run, list(agents))).on(
        {(agent.provider, agent.model) for agent in agents.values()}
    )
    held = {agent_id: n for agent_id, n in elsewhere.counts().items() if agent_id in agents}
    cap = _effective_cap(run, list(agents.values()), elsewhere, limits)
    checkpoints = checkpoint_rows(run)
    pending_checkpoints = [c for c in checkpoints if c.status == Checkpoint.Status.PENDING]
    asked_at = tool_calls_waiting(pending_checkpoints)
    if not run.is_finished and run.status != Run.Status.PAUSED and unfinished:
        eta = time_left(
            eta_plan(run),
            tasks,
            agents,
            cap.for_forecast,
            now=now,
            waited=waited_for_people(tasks, tool_call_spans(checkpoints), now),
            elsewhere=elsewhere,
            cap_shared=cap.forecast_cap_shared,
        )
    pending = len(pending_checkpoints)
    nothing_moves = (
        run.status == Run.Status.RUNNING
        and bool(unfinished)
        and not any(v.state in MOVING and v.pk not in asked_at for v in tasks)
    )
    return Totals(
        status=run.status,
        status_label=run.get_status_display(),
        summary=run.summary,
        elapsed_s=max(0.0, elapsed),
        eta_s=eta,
        total=len(tasks),
        done=sum(counts[s] for s in TaskRun.TERMINAL),
        running=counts[State.RUNNING],
        counts=[StateCount(s, STATE_LABELS[s], counts[s]) for s in DISPLAY_ORDER if counts[s]],
        cost_usd=run.cost_usd,
        reserved_usd=run.reserved_usd,
        budget_usd=run.budget_usd,
        tokens_so_far=run_tokens(run, tasks),
        unpriced_tokens=costs.unpriced_tokens(tasks, every_agent, limits),
        cap=run.cap,
        effective_cap=cap,
        peak_running=run.peak_running,
        pending_checkpoints=pending,
        estimate_usd=run.estimate_usd,
        finished=run.is_finished,
        started=run.started_at is not None,
        finished_at=run.finished_at,
        waits_for_decision=nothing_moves and pending > 0,
        tool_calls_waiting=len(asked_at),
        attempts_stopping=attempts_stopping(run) if run.is_finished else 0,
        started_at=run.started_at,
        paused_since=run.paused_at if run.status == Run.Status.PAUSED else None,
        paused_s=run.paused_s,
        ended_s=run.ended_s,
        rejected_at_gate=tuple(rejected_at_gate([run.pk]).get(run.pk, ())) if counts[State.SKIPPED] else (),
        slots_elsewhere=0
        if run.is_finished
        else len(elsewhere.slots)
        if cap.forecast_cap_shared
        else sum(held.values()),
    )
