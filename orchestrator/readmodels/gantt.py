"""The run page's timeline: every attempt as a bar on its agent's lane, overlaps on separate tracks,
the spans the run was paused and the spans it lay ended before a person reopened it, so that a
gap in the bars says why nothing started then (the page folds a long ended span: gantt.js).

`assign_tracks`, `paused_spans` and `ended_spans` take plain values and are tested without a
database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator import wording
from orchestrator.models import Attempt, Event, Run

from .tasks import tasks_query


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


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _ms_or_none(value: datetime | None) -> int | None:
    return _ms(value) if value is not None else None


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


@dataclass(frozen=True)
class PausedSpan:
    """A span the run admitted nothing new: from its pause to its resume, or to its end (None while
    it is still paused: the span grows with the clock)."""

    start_ms: int
    end_ms: int | None

    @property
    def seconds(self) -> float | None:
        return None if self.end_ms is None else (self.end_ms - self.start_ms) / 1000


def paused_spans(changes: Iterable[tuple[str, datetime]], finished_at: datetime | None) -> list[PausedSpan]:
    """The paused spans from the run's `run.paused` and `run.resumed` events (type, time) in order; a
    pause the run never resumed from ends when the run did (cancelled while paused, or its last
    running task ended), also when a person reopened the run later: the work after the reopening
    was not paused."""
    spans, paused_at, ended_at = [], None, None
    for kind, at in changes:
        if kind == "run.paused" and paused_at is None:
            paused_at = at
        elif kind == "run.resumed" and paused_at is not None:
            spans.append(PausedSpan(_ms(paused_at), _ms(at)))
            paused_at = None
        elif kind in END_EVENTS:
            ended_at = at
        elif kind == REOPENED and paused_at is not None and ended_at is not None:
            spans.append(PausedSpan(_ms(paused_at), _ms(ended_at)))
            paused_at = None
    if paused_at is not None:
        spans.append(PausedSpan(_ms(paused_at), _ms_or_none(finished_at)))
    return spans


@dataclass(frozen=True)
class EndedSpan:
    """A span the run lay ended (`ended_as`: failed, succeeded, …) until a person reopened it: a
    retry, a skip or a re-run (`reopened_by`: "a retry of scope"). Its Elapsed counts it (`Run.ended_s`)."""

    start_ms: int
    end_ms: int
    ended_as: str
    reopened_by: str

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    @property
    def label(self) -> str:
        """What the band says on the timeline: "ended 10 min 00 s" (folded, the axis jumps over it:
        "ended" alone left its length to the hover)."""
        return f"ended {wording.duration(self.seconds)}"

    @property
    def title(self) -> str:
        """What the band says on hover: "Ended (failed) for 10 min 00 s, then reopened by a retry of scope"."""
        return f"Ended ({self.ended_as}) for {wording.duration(self.seconds)}, then reopened by {self.reopened_by}"


def ended_spans(changes: Iterable[tuple[str, datetime, str]]) -> list[EndedSpan]:
    """The spans the run lay ended, from its end events (`run.failed`, …) and the `run.reopened`
    event after each (type, time, message), in order. Its last end, not reopened, is the end of the
    timeline, not a span."""
    spans, ended = [], None
    for kind, at, message in changes:
        if kind in END_EVENTS:
            ended = (at, Run.Status(kind.removeprefix("run.")).label.lower())
        elif kind == REOPENED and ended is not None:
            by = message.removeprefix(REOPENED_PREFIX)
            spans.append(EndedSpan(_ms(ended[0]), _ms(at), ended[1], by))
            ended = None
    return spans


PAUSE_EVENTS = ("run.paused", "run.resumed")
END_EVENTS = tuple(f"run.{status}" for status in Run.FINISHED)
# task_controls.reopen writes it "run reopened by a retry of scope".
REOPENED, REOPENED_PREFIX = "run.reopened", "run reopened by "
# The events the timeline's bands read: when the run paused, resumed, ended and was reopened.
CLOCK_EVENTS = (*PAUSE_EVENTS, *END_EVENTS, REOPENED)


@dataclass
class Gantt:
    start_ms: int | None
    end_ms: int | None  # None while the run goes on: the timeline ends "now"
    lanes: list[GanttLane] = field(default_factory=list)
    paused: list[PausedSpan] = field(default_factory=list)
    ended: list[EndedSpan] = field(default_factory=list)
    # What the timeline says while it has no bar (no_attempt_text). A running run's says it even
    # with bars (hidden by CSS), as a live page whose bars arrive one by one still does.
    empty_text: str = ""

    @property
    def bars(self) -> int:
        return sum(len(track) for lane in self.lanes for track in lane.tracks)


def gantt_bar(attempt: Attempt) -> GanttBar:
    """One started attempt as a bar (the Attempt with task_run, its subtask and agent selected)."""
    if attempt.started_at is None:
        raise ValueError(f"attempt {attempt.pk} has not started: only started attempts are bars")
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
        end_ms=_ms_or_none(attempt.finished_at),
        input_tokens=attempt.input_tokens,
        output_tokens=attempt.output_tokens,
    )


# What a bar reads of an attempt, its task, subtask and agent (`gantt_bar`, the lanes' names). Not
# the attempt's request and output, the task's output, the subtask's instructions or the agent's
# prompt and settings: a real agent's run makes them large, and the live view reads the bars of
# the tasks concerned at most of its frames.
BAR_FIELDS = (
    "task_run",
    "number",
    "state",
    "worker",
    "error",
    "started_at",
    "finished_at",
    "input_tokens",
    "output_tokens",
    "task_run__agent",
    "task_run__subtask__key",
    "task_run__subtask__title",
    "task_run__agent__name",
)


def started_attempts(run_id: int, task_ids: Iterable[int] | None = None):
    """The run's started attempts (of `task_ids` only, when given) as `gantt_bar` reads them."""
    attempts = Attempt.objects.filter(task_run__run_id=run_id, started_at__isnull=False)
    if task_ids is not None:
        attempts = attempts.filter(task_run_id__in=list(task_ids))
    return (
        attempts.select_related("task_run__subtask", "task_run__agent").only(*BAR_FIELDS).order_by("started_at", "pk")
    )


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
        for bar, track in zip(bars, tracks_of, strict=True):
            tracks[track].append(bar)
        result_lanes.append(GanttLane(agent=agent, agent_id=lane_agents[agent], tracks=tracks))
    start = run.started_at or (attempts[0].started_at if attempts else None)
    changes = list(
        Event.objects.filter(run_id=run.pk, type__in=CLOCK_EVENTS)
        .order_by("seq")
        .values_list("type", "created_at", "message")
    )
    return Gantt(
        start_ms=_ms_or_none(start),
        end_ms=_ms_or_none(run.finished_at),
        lanes=result_lanes,
        paused=paused_spans([(kind, at) for kind, at, _ in changes], run.finished_at),
        ended=ended_spans(changes),
        empty_text="" if attempts and run.is_finished else no_attempt_text(run),
    )


# Why a run ended with no attempt started, by how it ended (the plan's rejection is told apart).
ENDED_BEFORE_ANY_ATTEMPT = {
    Run.Status.CANCELLED: "the run was cancelled before any started",
    Run.Status.FAILED: "the run failed before any started",
    Run.Status.OVER_BUDGET: "the budget did not cover the first task",
    Run.Status.SUCCEEDED: "every task was skipped",
}


def no_attempt_text(run: Run) -> str:
    """What the timeline of a run with no attempt says: "No attempt has started yet." only while
    one still may; once the run ended, that none did and why ("No attempt ran: the plan was
    rejected.", "… the run was cancelled before it started.")."""
    if not run.is_finished:
        return "No attempt has started yet."
    if run.started_at is None:
        # Only a decision or a cancellation ends a run awaiting its plan's approval.
        rejected = Event.objects.filter(run_id=run.pk, type="checkpoint.rejected").exists()
        why = "the plan was rejected" if rejected else "the run was cancelled before it started"
    else:
        why = ENDED_BEFORE_ANY_ATTEMPT.get(Run.Status(run.status), "the run ended before any started")
    return f"No attempt ran: {why}."
