"""What other runs hold now of a run's agents' slots, read once for the lanes and the ETA.

An agent's `max_concurrency` is shared by every run, and so is a provider's in-flight limit
(admission counts both across runs: engine/admission.py). So a run's lanes say how many of an
agent's slots other runs hold ("+3 in other runs"), and its effective cap and ETA wait for them: a
slot another run holds frees when that run's task is expected to end (its estimate less what it
ran, as the ETA counts this run's own running tasks). Work other runs start later is not
foreseen. The read covers every task of another run on the run's agents' providers and models
(its own agents' among them). A live frame builds the totals and the lanes together: one read
serves both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef

from orchestrator.models import Agent, Run, TaskRun
from orchestrator.plans.estimates import duration_s

# A task another run has running is expected to go on for at least this share of its estimate
# (streamed progress is no guide: answers rarely reach max_tokens).
MIN_SHARE_LEFT = 0.1


@dataclass(frozen=True)
class HeldSlot:
    """One slot of an agent that another run's task holds: queued (no start yet) or running."""

    agent_id: int
    started_at: datetime | None
    estimated_s: float
    pair: tuple[str, str] = ("", "")  # the agent's provider and model

    def seconds_left(self, now: datetime, pace: float = 1.0) -> float:
        """How long the slot stays held: the task's estimate (scaled by `pace`) less what it ran,
        at least MIN_SHARE_LEFT of it; a queued task's whole estimate."""
        expected = self.estimated_s * pace
        ran = (now - self.started_at).total_seconds() if self.started_at else 0.0
        return max(expected - ran, MIN_SHARE_LEFT * expected)


@dataclass(frozen=True)
class OtherRuns:
    """The slots other runs hold of some agents now."""

    slots: tuple[HeldSlot, ...] = ()

    def counts(self) -> dict[int, int]:
        """Per agent id, how many of its slots other runs hold."""
        return dict(Counter(slot.agent_id for slot in self.slots))

    def on(self, pairs: Iterable[tuple[str, str]]) -> OtherRuns:
        """Only the slots on these providers and models."""
        wanted = set(pairs)
        return OtherRuns(tuple(slot for slot in self.slots if slot.pair in wanted))

    def in_flight(self) -> dict[tuple[str, str], int]:
        """Per provider and model, how many requests other runs have in flight (or queued)."""
        return dict(Counter(slot.pair for slot in self.slots))


NONE = OtherRuns()


def other_runs(run: Run, agent_ids: Iterable[int]) -> OtherRuns:
    """The slots other runs hold on these agents' providers and models (one query; none once `run`
    has ended: nothing of it is in flight, other runs' use is not its concern)."""
    if run.is_finished:
        return NONE
    same_pair = Agent.objects.filter(
        pk__in=list(agent_ids), provider=OuterRef("agent__provider"), model=OuterRef("agent__model")
    )
    rows = (
        TaskRun.objects.filter(Exists(same_pair), state__in=TaskRun.ACTIVE)
        .exclude(run_id=run.pk)
        .order_by()
        .values_list(
            "agent_id",
            "started_at",
            "subtask__estimated_output_tokens",
            "agent__provider_options",
            "agent__provider",
            "agent__model",
        )
    )
    return OtherRuns(
        tuple(
            HeldSlot(agent_id, started_at, duration_s(tokens, options), (provider, model))
            for agent_id, started_at, tokens, options, provider, model in rows
        )
    )
