"""The run page's totals: elapsed time, ETA, tasks by state, cost against budget, effective cap.

The ETA itself is forecast in `eta` (under the effective cap computed here); the totals carry it
with what its card says around it: none while the run is paused (nothing starts until Resume) and
none for a run that ended or never started; "after the decision" while everything left waits for
a person; what the countdown says once it runs out (`eta_overdue`). The effective cap counts only
the slots other runs leave free of an agent's limit and of the providers' in-flight limits
(`other_runs`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from orchestrator import wording
from orchestrator.models import Agent, Attempt, Checkpoint, ProviderLimit, Run, TaskRun

from . import costs, eta, other_runs, prices, run_labels
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
    """`effective_cap` of these agents; `price_list`: every ProviderLimit (`prices.price_list`),
    read here when not given."""
    candidates = [(run.cap, "run cap")]
    provider_cap = None
    if agents:
        pairs = {(a.provider, a.model) for a in agents}
        every_limit = prices.price_list() if price_list is None else price_list
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
        parts.append(f"paused since {wording.clock(paused_since)}")
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
    # and beyond the budget's reach (`costs.unpriced_tokens`: each attempt's on the model it ran with).
    unpriced_tokens: Mapping[str, int] = field(default_factory=dict)
    # Before a start, its agents' models without a price ("provider:model"), which the estimate
    # counted at $0: a plan priced in part read "estimated $0.0150" as if that were all of it.
    unpriced_in_estimate: tuple[str, ...] = ()

    @property
    def unpriced_note(self) -> str:
        """The Cost card's word on the tokens no price counts ("" when every model used has one):
        without it, a run on an unpriced model read "$0.00 of $10.00 · 0% used", as if free."""
        return prices.unpriced_text(self.unpriced_tokens)

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
        return " · ".join([f"since {wording.clock(self.started_at)}", *idle])

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
        return self.counts_down and self.eta_s is not None and self.eta_s <= eta.ETA_RUN_OUT_S

    @property
    def eta_run_out_s(self) -> float:
        """`eta.ETA_RUN_OUT_S`, for the card's data-run-out-s, which the ticking page counts down to."""
        return eta.ETA_RUN_OUT_S

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
            return wording.clock(self.finished_at) if self.finished_at else ""
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
        started" ("" without an estimate). Tokens with no price are in neither (the estimate
        counts their models at $0 too): then "its priced tokens cost 82% of that"."""
        if self.estimate_usd is None:
            return ""
        if self.estimate_usd <= 0:
            return "no estimate: no price was known for its models"
        estimated = f"estimated {wording.usd(self.estimate_usd)}"
        if self.unpriced_in_estimate:
            models = self.unpriced_in_estimate
            estimated += f" ({', '.join(models)} {'has' if len(models) == 1 else 'have'} no price: counted as $0)"
        if self.never_started:
            return f"{estimated}; it never started"
        if not finished:  # (a run awaiting its plan's approval has not started: the estimate alone)
            return f"{estimated} before it started" if self.started else estimated
        ratio = self.cost_usd / self.estimate_usd
        what = "its priced tokens" if self.unpriced_tokens else "it"
        return f"{estimated}: {what} cost {f'{ratio:.1f}×' if ratio >= 2 else f'{round(100 * ratio)}% of'} that"

    @property
    def cost_percent(self) -> int:
        """The budget used, rounded to the nearest percent (`wording.percent`), for the meter."""
        return wording.percent(self.cost_usd, self.budget_usd)

    @property
    def cost_percent_text(self) -> str:
        """The budget used in words: "<1%", "3%", "99%", "100%"."""
        return wording.percent_text(self.cost_usd, self.budget_usd)

    @property
    def budget_stop(self) -> str:
        """Why a run stopped over budget, on its Cost card: the next task's worst case would have
        taken it past the budget, so it stopped short of it. The header's "Over budget" sat beside
        "83% used" as if the budget had been spent and more ("" for any other run)."""
        return run_labels.OVER_BUDGET_STOP if self.status == Run.Status.OVER_BUDGET else ""

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


def unpriced_in_estimate(run: Run, agents: Iterable[Agent], limits: prices.Prices) -> tuple[str, ...]:
    """Of a run not started yet (its estimate is all there is to read), its agents' models without a
    price, which the estimate counted at $0; () once it started (the Cost card counts its unpriced
    tokens instead: `costs.unpriced_tokens`) or without a positive estimate (it says so itself)."""
    if run.started_at is not None or not run.estimate_usd or run.estimate_usd <= 0:
        return ()
    return tuple(prices.unpriced_models({(a.provider, a.model) for a in agents}, limits or prices.price_list()))


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
    eta_s = None
    unfinished = [v for v in tasks if not v.is_terminal]
    of_unfinished = {v.agent_id for v in unfinished}
    every_agent = agents if agents is not None else agents_of(tasks)
    agents = {pk: agent for pk, agent in every_agent.items() if pk in of_unfinished}
    # The providers' limits and prices, read once: for the in-flight caps of the agents with work
    # left, and for the models without a price that have used tokens (of any task, ended or not).
    limits = prices.price_list() if agents or any(v.spent_tokens for v in tasks) else {}
    elsewhere = (elsewhere if elsewhere is not None else other_runs.other_runs(run, list(agents))).on(
        {(agent.provider, agent.model) for agent in agents.values()}
    )
    held = {agent_id: n for agent_id, n in elsewhere.counts().items() if agent_id in agents}
    cap = _effective_cap(run, list(agents.values()), elsewhere, limits)
    checkpoints = eta.checkpoint_rows(run)
    pending_checkpoints = [c for c in checkpoints if c.status == Checkpoint.Status.PENDING]
    asked_at = eta.tool_calls_waiting(pending_checkpoints)
    if not run.is_finished and run.status != Run.Status.PAUSED and unfinished:
        eta_s = eta.time_left(
            eta.eta_plan(run),
            tasks,
            agents,
            cap.for_forecast,
            now=now,
            waited=eta.waited_for_people(tasks, eta.tool_call_spans(checkpoints), now),
            elsewhere=elsewhere,
            cap_shared=cap.forecast_cap_shared,
        )
    pending = len(pending_checkpoints)
    nothing_moves = run.status == Run.Status.RUNNING and bool(unfinished) and eta.nothing_moves(tasks, asked_at)
    return Totals(
        status=run.status,
        status_label=run.get_status_display(),
        summary=run.summary,
        elapsed_s=max(0.0, elapsed),
        eta_s=eta_s,
        total=len(tasks),
        done=sum(counts[s] for s in TaskRun.TERMINAL),
        # The slots its attempts hold: a task whose agent waits for a call's approval keeps its
        # slot (its state is running; its count on the Tasks card is "needs approval").
        running=sum(1 for v in tasks if v.state == State.RUNNING),
        counts=[StateCount(s, STATE_LABELS[s], counts[s]) for s in DISPLAY_ORDER if counts[s]],
        cost_usd=run.cost_usd,
        reserved_usd=run.reserved_usd,
        budget_usd=run.budget_usd,
        tokens_so_far=run_tokens(run, tasks),
        unpriced_tokens=costs.unpriced_tokens(run, tasks, every_agent, limits),
        unpriced_in_estimate=unpriced_in_estimate(run, every_agent.values(), limits),
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
