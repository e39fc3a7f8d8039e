"""The run page's agent lanes: per agent, what it runs now, its slots in use, queued work, burn."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count

from orchestrator import wording
from orchestrator.models import Agent, Run, TaskRun

from .tasks import DISPLAY_ORDER, STATE_LABELS, WAITING, State, TaskState, outcome_text, task_states

# A ready task not yet admitted, as the task table calls it (display states), with what each means.
NOT_ADMITTED = {
    State.READY: "ready: admitted at the next scheduling step",
    WAITING: "held back by a concurrency cap or a retry delay",
    State.THROTTLED: "held back by the provider's rate budget or a backoff",
}


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
    slots_used: int  # this agent's queued + running tasks across every run
    cap: int  # the agent's max_concurrency
    tokens: int
    cost_usd: Decimal

    @property
    def slots_free(self) -> int:
        return max(0, self.cap - self.slots_used)

    @property
    def slots_elsewhere(self) -> int:
        """This agent's slots that other runs' tasks (queued or running) hold."""
        return max(0, self.slots_used - self.queued - len(self.running))

    @property
    def idle_text(self) -> str:
        """What the lane says when none of this run's tasks of the agent runs: why, as counted.

        "2 queued, waiting for a worker" when this run's own tasks hold the slots (handed to the
        broker, no worker has claimed them); "its slots are busy in other runs" only when other
        runs hold them all ("1 of 4 slots busy in other runs" when they hold some).
        """
        if self.done == self.total:
            return "finished" if self.succeeded == self.total else "ended"
        parts = []
        if self.queued:
            parts.append(f"{self.queued} queued, waiting for a worker")
        if elsewhere := self.slots_elsewhere:
            if elsewhere >= self.cap:
                parts.append("its slots are busy in other runs")
            else:
                parts.append(f"{elsewhere} of {wording.counted(self.cap, 'slot')} busy in other runs")
        return "; ".join(parts) or "idle"

    @property
    def slot_marks(self) -> list[bool]:
        """One mark per slot (True = in use), at most 16 shown."""
        return [i < self.slots_used for i in range(min(self.cap, 16))]


def lanes(run: Run, tasks: Sequence[TaskState] | None = None) -> list[Lane]:
    """One lane per agent of the plan, in order of first appearance (from the tasks' states, read
    here when not given)."""
    tasks = list(tasks) if tasks is not None else task_states(run)
    by_agent: dict[int, list[TaskState]] = defaultdict(list)
    for task in tasks:
        by_agent[task.agent_id].append(task)
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
                not_admitted=not_admitted(items),
                upcoming=states[State.PENDING] + states[State.WAITING_GATE],
                done=sum(states[s] for s in TaskRun.TERMINAL),
                succeeded=states[State.SUCCEEDED],
                outcome=outcome_text(states, len(items)),
                total=len(items),
                slots_used=busy.get(agent_id, 0),
                cap=agents[agent_id].max_concurrency,
                tokens=sum(v.tokens for v in items),
                cost_usd=sum((v.cost_usd for v in items), Decimal("0")),
            )
        )
    return result


def not_admitted(tasks: Sequence[TaskState]) -> list[LaneCount]:
    """The ready tasks not admitted yet, counted under the task table's words for them."""
    shown = Counter(task.display_state for task in tasks)
    return [
        LaneCount(shown[state], STATE_LABELS[state], NOT_ADMITTED[state])
        for state in DISPLAY_ORDER
        if state in NOT_ADMITTED and shown[state]
    ]
