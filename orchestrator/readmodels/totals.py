"""The run page's totals: elapsed time, ETA, tasks by state, cost against budget, effective cap.

`remaining_seconds` and `pace` take plain data and are tested without a database.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType

from django.utils import timezone

from orchestrator import plans, wording
from orchestrator.models import Agent, Checkpoint, ProviderLimit, Run, TaskRun
from orchestrator.plans import dag

from .approved_plan import fixed_once_approved
from .tasks import (
    DISPLAY_ORDER,
    STATE_LABELS,
    State,
    StripSegment,
    TaskState,
    outcome_text,
    state_strip,
    task_states,
)


def remaining_seconds(graph: dag.SinksFirst, remaining: Mapping[str, float], cap: int) -> float:
    """Lower bound on the time left: max(remaining critical path, remaining work / cap).

    `remaining` gives each task's seconds of work left (0 for finished tasks). The makespan of
    a DAG under a concurrency cap can be no shorter than its longest chain, nor than its total
    work spread over every slot; a good scheduler stays close to the larger of the two.
    """
    if not graph.keys:
        return 0.0
    lengths = graph.remaining_path_lengths(remaining)
    critical = max(lengths.values(), default=0.0)
    work = sum(remaining.get(k, 0.0) for k in graph.keys)
    return max(critical, work / max(1, cap))


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


def pace(tasks: Iterable[TaskRun | TaskState], estimates: Mapping[str, float]) -> float:
    """How much longer than estimated this run's tasks take: median of actual / estimated.

    1.0 until a task has finished; kept within 0.2 .. 5 so that one odd task cannot swing it.
    """
    ratios = [
        (t.finished_at - t.started_at).total_seconds() / estimates[t.key]
        for t in tasks
        if t.state == State.SUCCEEDED and t.started_at and t.finished_at and estimates.get(t.key, 0) > 0
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
        agent_ids = run.tasks.exclude(state__in=TaskRun.TERMINAL).values_list("agent_id", flat=True).distinct()
    agents = list(Agent.objects.filter(pk__in=list(agent_ids)))
    candidates = [(run.cap, "run cap")]
    if agents:
        candidates.append((sum(a.max_concurrency for a in agents), "agent limits"))
        pairs = {(a.provider, a.model) for a in agents}
        limits = [pl for pl in ProviderLimit.objects.all() if (pl.provider, pl.model) in pairs]
        # The in-flight cap in force of each limit that has one (every pair must have one to count).
        limited = [cap for cap in (pl.effective_in_flight or pl.max_in_flight for pl in limits) if cap]
        if limits and len(limited) == len(limits) == len(pairs):
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
    estimate_usd: Decimal | None = None  # the pre-flight estimate the run was launched with
    finished: bool = False

    @property
    def against_estimate(self) -> str:
        return self.estimate_note(self.finished)

    def estimate_note(self, finished: bool) -> str:
        """The estimate the run was launched with, and at the end the cost set against it:
        "estimated $0.0150: it cost 82% of that", "… 2.4× that" ("" without an estimate)."""
        if self.estimate_usd is None:
            return ""
        if self.estimate_usd <= 0:
            return "no estimate: no price was known for its models"
        estimated = f"estimated {wording.usd(self.estimate_usd)}"
        if not finished:
            return f"{estimated} before it started"
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
        """The Tasks card's headline: "3 of 10 succeeded", "7 of 22 succeeded · 15 cancelled"."""
        return outcome_text({c.state: c.count for c in self.counts}, self.total)

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


def totals(run: Run, tasks: Sequence[TaskState] | None = None, *, now: datetime | None = None) -> Totals:
    """The run's totals from its tasks' states (read here when not given)."""
    now = now or timezone.now()
    run.refresh_from_db()
    tasks = list(tasks) if tasks is not None else task_states(run)
    counts = Counter(v.display_state for v in tasks)
    end = run.finished_at or now
    elapsed = (end - run.started_at).total_seconds() if run.started_at else 0.0
    eta = None
    unfinished = [v for v in tasks if not v.is_terminal]
    if not run.is_finished and unfinished:
        plan = eta_plan(run)
        estimates = plan.estimates
        speed = pace(tasks, estimates)
        remaining = {}
        for v in tasks:
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
        cap_now = effective_cap(run, {t.agent_id for t in unfinished})
        eta = remaining_seconds(plan.graph, remaining, max(1, cap_now.value))
        cap = cap_now
    else:
        cap = effective_cap(run)
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
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cap=run.cap,
        effective_cap=cap,
        peak_running=run.peak_running,
        pending_checkpoints=run.checkpoints.filter(status=Checkpoint.Status.PENDING).count(),
        estimate_usd=run.estimate_usd,
        finished=run.is_finished,
    )
