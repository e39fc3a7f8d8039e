"""The run page's agent lanes: per agent, what it runs now, its slots in use, queued work, burn.

An agent's `max_concurrency` is shared by every run, so a lane tells this run's slots (its own
queued and running tasks) from those other runs hold, and says which is which. A run that has
ended holds none and is not told about the others: nothing of it is in flight.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Exists, OuterRef, QuerySet

from orchestrator import wording
from orchestrator.models import Agent, Run, TaskRun

from . import other_runs
from .tasks import (
    DISPLAY_ORDER,
    RETRYING,
    STATE_LABELS,
    WAITING,
    State,
    TaskState,
    agents_of,
    outcome_text,
    task_states,
)

# A ready task not yet admitted, as the task table calls it (display states), with what each means.
NOT_ADMITTED = {
    State.READY: "ready: admitted at the next scheduling step",
    WAITING: "held back by a concurrency cap or an agent's limits",
    RETRYING: "waiting for a retry's backoff to pass",
    State.THROTTLED: "held back by the provider's rate budget or a backoff",
}


# The wait code of a ready task that the run's cap holds back (engine/waits.RunCap.code: codes are
# data, never renamed).
RUN_CAP = "run_cap"

# What a paused run's lane says when none of its tasks of the agent runs.
PAUSED_LANE = "paused: nothing new starts until the run is resumed"


@dataclass(frozen=True)
class LaneCount:
    """One of a lane's counts: "3 held back", with what it means as a tooltip."""

    n: int
    label: str
    meaning: str

    @property
    def text(self) -> str:
        return f"{self.n} {self.label}"


@dataclass
class Lane:
    agent: Agent
    running: list[TaskState]
    queued: int
    not_admitted: list[LaneCount]  # ready tasks by display state (only those with any): "2 held back"
    upcoming: int  # pending or at a gate
    done: int  # ended, whichever way
    succeeded: int
    outcome: str  # "1 of 2 succeeded · 1 cancelled"
    total: int
    slots_elsewhere: int  # this agent's queued + running tasks in other runs (0 once this run ended)
    cap: int  # the agent's max_concurrency
    tokens: int
    cost_usd: Decimal
    run_ended: bool = False  # the run is over: nothing of it is in flight, other runs' use is not its concern
    run_paused: bool = False  # the run admits nothing: its lanes are not idle, they wait for Resume
    held_by_run_cap: int = 0  # its ready tasks that the run's cap holds back
    ran: int = 0  # its tasks that started, in this start or before a re-run

    @property
    def slots_here(self) -> int:
        """This agent's slots that this run's tasks (queued or running) hold."""
        return self.queued + len(self.running)

    @property
    def slots_used(self) -> int:
        """This agent's slots in use, this run's and other runs' together."""
        return self.slots_here + self.slots_elsewhere

    @property
    def slots_free(self) -> int:
        return max(0, self.cap - self.slots_used)

    @property
    def slots_text(self) -> str:
        """The lane's count: this run's slots of the cap ("2/4"), and other runs' apart ("+1 in other runs")."""
        text = f"{self.slots_here}/{self.cap}"
        return f"{text} +{self.slots_elsewhere} in other runs" if self.slots_elsewhere else text

    @property
    def slots_title(self) -> str:
        """The count in a sentence: whose the slots in use are, and how many are free."""
        slots = f"{self.agent.name}'s {wording.counted(self.cap, 'slot')}"
        if self.run_ended:
            return f"This run has ended: it holds none of {slots}"
        elsewhere = f"; other runs hold {self.slots_elsewhere}" if self.slots_elsewhere else ""
        return f"This run holds {self.slots_here} of {slots}{elsewhere}; {self.slots_free} free"

    @property
    def idle_text(self) -> str:
        """What the lane says when none of this run's tasks of the agent runs: why, as counted.

        "2 queued, waiting for a worker" when this run's own tasks hold the slots (handed to the
        broker, no worker has claimed them); "its slots are busy in other runs" only when other
        runs hold them all ("1 of 4 slots busy in other runs" when they hold some). A paused
        run's lane says first that nothing new starts: it is not idle, it waits for Resume. Tasks
        that the run's cap holds back "wait for a slot under the run's cap": beside "18 held back",
        a bare "idle" left a person to guess why an agent with work to do did nothing.
        """
        if self.done == self.total:
            if self.succeeded == self.total:
                return "finished"
            # A rejected plan's run, or one cancelled before the agent's turn: "ended" read as if
            # the agent had worked and stopped.
            return "ended" if self.ran else "ended before any of its tasks ran"
        parts = [PAUSED_LANE] if self.run_paused else []
        if self.queued:
            parts.append(f"{self.queued} queued, waiting for a worker")
        if self.held_by_run_cap and not self.run_paused:
            waits = "waits" if self.held_by_run_cap == 1 else "wait"
            parts.append(f"{self.held_by_run_cap} {waits} for a slot under the run's cap")
        if elsewhere := self.slots_elsewhere:
            if elsewhere >= self.cap:
                parts.append("its slots are busy in other runs")
            else:
                parts.append(f"{elsewhere} of {wording.counted(self.cap, 'slot')} busy in other runs")
        return "; ".join(parts) or "idle"

    @property
    def slot_marks(self) -> list[str]:
        """One mark per slot, at most 16 shown: "here" (this run's), "elsewhere" (another run's), "" (free)."""
        marks = ["here"] * self.slots_here + ["elsewhere"] * self.slots_elsewhere
        return (marks + [""] * self.cap)[: min(self.cap, 16)]


def lanes(
    run: Run,
    tasks: Sequence[TaskState] | None = None,
    elsewhere: other_runs.OtherRuns | None = None,
    agents: Mapping[int, Agent] | None = None,
) -> list[Lane]:
    """One lane per agent of the plan, in order of first appearance (from the tasks' states, their
    agents and the slots other runs hold of them, each read here when not given)."""
    tasks = list(tasks) if tasks is not None else task_states(run)
    by_agent: dict[int, list[TaskState]] = defaultdict(list)
    for task in tasks:
        by_agent[task.agent_id].append(task)
    if agents is None:
        agents = agents_of(tasks)
    if elsewhere is None:
        elsewhere = other_runs.other_runs(run, list(by_agent))
    held = {} if run.is_finished else elsewhere.counts()
    result = []
    for agent_id, items in by_agent.items():
        states = Counter(v.state for v in items)
        result.append(
            Lane(
                agent=agents[agent_id],
                running=[v for v in items if v.state == State.RUNNING],
                queued=states[State.QUEUED],
                not_admitted=not_admitted(items, paused=run.status == Run.Status.PAUSED),
                upcoming=states[State.PENDING] + states[State.WAITING_GATE],
                done=sum(states[s] for s in TaskRun.TERMINAL),
                succeeded=states[State.SUCCEEDED],
                outcome=outcome_text(states, len(items)),
                total=len(items),
                slots_elsewhere=held.get(agent_id, 0),
                run_ended=run.is_finished,
                run_paused=run.status == Run.Status.PAUSED,
                held_by_run_cap=sum(1 for v in items if v.state == State.READY and v.wait_code == RUN_CAP),
                ran=sum(1 for v in items if v.started_at is not None or v.earlier_attempts),
                cap=agents[agent_id].max_concurrency,
                tokens=sum(v.spent_tokens for v in items),
                cost_usd=sum((v.cost_usd for v in items), Decimal("0")),
            )
        )
    return result


def slots_in_other_runs(run: Run, agent_ids: Iterable[int] | QuerySet) -> dict[int, int]:
    """Queued and running tasks in runs other than `run`, per agent, of the given agents and of
    every agent on the same provider and model (whose requests in flight count against the
    provider's in-flight limit, which the run's totals count): one query."""
    same_pair = Agent.objects.filter(
        pk__in=agent_ids, provider=OuterRef("agent__provider"), model=OuterRef("agent__model")
    )
    return dict(
        TaskRun.objects.filter(Exists(same_pair), state__in=TaskRun.ACTIVE)
        .exclude(run_id=run.pk)
        .order_by()
        .values_list("agent_id")
        .annotate(n=Count("pk"))
    )


def slots_elsewhere(run_id: int) -> dict[int, int]:
    """What the run's lanes and totals count as other runs' ("+3 in other runs"), per agent: {}
    once the run ended (they no longer tell). Two small reads, so that the live view can notice a
    change that no event of this run announces (another run of the agent ended)."""
    run = Run.objects.only("status").get(pk=run_id)
    if run.is_finished:
        return {}
    return slots_in_other_runs(run, TaskRun.objects.filter(run_id=run_id).values("agent_id"))


# What a not-admitted count means while the run is paused, whatever held the tasks before.
HELD_BY_PAUSE = "held back: the run is paused, nothing new starts until it is resumed"


def not_admitted(tasks: Sequence[TaskState], *, paused: bool = False) -> list[LaneCount]:
    """The ready tasks not admitted yet, counted under the task table's words for them (a paused
    run's are held by the pause, not by a cap: their tooltip says so)."""
    shown = Counter(task.display_state for task in tasks)
    return [
        LaneCount(shown[state], STATE_LABELS[state], HELD_BY_PAUSE if paused else NOT_ADMITTED[state])
        for state in DISPLAY_ORDER
        if state in NOT_ADMITTED and shown[state]
    ]
