"""The run page's tasks: each task's display state, its label and its live token burn.

`TaskView` is the task's record (orchestrator/readmodels/records.py: `TaskRecord`, the shape
the API and the JSON download give) plus what the page shows besides: the display state, the
tokens its running attempt has used so far, the agent's id for the lanes, the gate, and what a running agent is doing now
(its activity, from its step events: orchestrator/readmodels/steps.py). The task rows, the lanes, the
task panel and the websocket frames all render it, so a task is described once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, NamedTuple, Self

from django.conf import settings
from django.db.models import Case, CharField, Count, F, OuterRef, Q, Subquery, Value, When

from orchestrator import sql, wording
from orchestrator.models import Agent, Attempt, Checkpoint, Run, TaskRun

from .live_tokens import NO_LIVE_TOKENS, NOT_RUNNING_ON, LiveTokens, live_tokens
from .records import ENDED_OTHERWISE, PartialOutputRecord, TaskRecord, progress_shown
from .silence import Silence, silence_of
from .steps import TOOL_APPROVAL, activities

State = TaskRun.State

# A ready task held back by a cap or an agent's limits (the engine's `throttled` state is the
# other kind of holding back: by the provider's rate budget or backoff).
WAITING = "waiting"
# A ready task waiting for its retry's backoff to pass: not held back by anything a person can
# raise, and not to be counted with those (it was "3 held back" beside "0 running of 4").
RETRYING = "retrying"
# The wait codes (engine/waits.py: codes are data, never renamed) of a retry's backoff, and of a
# running task whose agent waits for a person to approve a tool call (steps.TOOL_APPROVAL): it shows
# "needs approval", as a task at its gate does, where its node was drawn running.
RETRY_BACKOFF = "retry_backoff"

# Display states in the order a legend or a count lists them (active work first).
DISPLAY_ORDER = (
    State.RUNNING,
    State.QUEUED,
    State.THROTTLED,
    WAITING,
    RETRYING,
    State.READY,
    State.WAITING_GATE,
    State.AWAITING_REVIEW,
    State.PENDING,
    State.SUCCEEDED,
    State.FAILED,
    State.SKIPPED,
    State.CANCELLED,
)
# Each display state's label (the badges, the legend, the counts): wording's, which the engine's
# refusals say too ("task start needs approval: …").
STATE_LABELS: Mapping[str, str] = wording.TASK_STATE_LABELS


# The order of a state strip, left to right: what ended (good news first), what is under way,
# what has not started.
STRIP_ORDER = (
    State.SUCCEEDED,
    State.FAILED,
    State.SKIPPED,
    State.CANCELLED,
    State.AWAITING_REVIEW,
    State.RUNNING,
    State.QUEUED,
    State.THROTTLED,
    WAITING,
    RETRYING,
    State.READY,
    State.WAITING_GATE,
    State.PENDING,
)


@dataclass(frozen=True)
class StripSegment:
    """One state's share of a state strip (an SVG bar): where it starts and how wide it is, in %."""

    state: str
    label: str
    count: int
    x: float
    width: float

    @property
    def text(self) -> str:
        return f"{self.count} {self.label}"


def state_strip(counts: Mapping[str, int]) -> list[StripSegment]:
    """Tasks by (display) state as segments of one bar, in STRIP_ORDER; empty states are left out.

    A state that holds tasks is never drawn thinner than MIN_SEGMENT % (one cancelled task among
    three hundred must still be seen); the others share what is left in proportion.
    """
    present = [(state, counts.get(state, 0)) for state in STRIP_ORDER if counts.get(state, 0) > 0]
    total = sum(count for _, count in present)
    if not total:
        return []
    widths = [max(MIN_SEGMENT, 100 * count / total) for _, count in present]
    scale = 100 / sum(widths)
    segments, x = [], 0.0
    for (state, count), width in zip(present, widths, strict=True):
        segments.append(
            StripSegment(state, STATE_LABELS.get(state, state), count, round(x, 3), round(width * scale, 3))
        )
        x += width * scale
    return segments


MIN_SEGMENT = 1.5

# The run page's Tasks card shows every task up to this many rows (a table cut short hid its last
# task, with no scrollbar in sight); a longer one scrolls in its box, which says so at its bottom
# edge, so that the event log beside it stays within reach.
TASK_TABLE_WHOLE = 12


def task_table_scroll_cue(count: int) -> str:
    """What the bottom edge of a table of `count` tasks says: "" when it shows every one (at most
    TASK_TABLE_WHOLE), else "18 tasks in all: scroll the table to see every one"."""
    if count <= TASK_TABLE_WHOLE:
        return ""
    return f"{wording.counted(count, 'task')} in all: scroll the table to see every one"


def outcome_text(counts: Mapping[str, int], total: int, rejected: Sequence[str] = ()) -> str:
    """How many of `total` tasks succeeded, and how many ended otherwise: "7 of 22 succeeded ·
    15 cancelled". Never "done" for a task that was cancelled, skipped or failed.

    The skipped count names the tasks a person rejected at their gate (`rejected`, their keys):
    "1 of 3 succeeded · 2 skipped (a rejected at its gate)". Such a rejection fails the run with no
    task failed, and a "Failed" beside counts that show no failure must say why, as the run's
    summary does (engine/scheduler.finish_if_done)."""
    text = f"{counts.get(State.SUCCEEDED, 0)} of {total} succeeded"
    others = [count_text(state, counts[state], rejected) for state in ENDED_OTHERWISE if counts.get(state)]
    return text + (" · " + ", ".join(others) if others else "")


def count_text(state: str, count: int, rejected: Sequence[str] = ()) -> str:
    """`count` tasks in `state`, in words: "3 failed"; the skipped ones name those of them rejected
    at their gate: "2 skipped (a rejected at its gate)"."""
    text = f"{count} {STATE_LABELS.get(state, state)}"
    return f"{text} ({rejected_text(rejected)})" if state == State.SKIPPED and rejected else text


def outcome_of(tasks: Sequence[TaskRun]) -> str:
    """outcome_text of these tasks (by engine state): "15 of 16 succeeded · 1 failed", naming
    those of them rejected at their gate (one query, when any of them was skipped)."""
    skipped = {task.run_id for task in tasks if task.state == State.SKIPPED and task.pk}
    keys = {task.subtask.key for task in tasks} if skipped else set()
    by_run = rejected_at_gate(skipped) if skipped else {}
    rejected = [key for keys_of_run in by_run.values() for key in keys_of_run if key in keys]
    return outcome_text(Counter(task.state for task in tasks), len(tasks), rejected)


def rejected_text(keys: Sequence[str]) -> str:
    """Tasks a person rejected at their gate, as the run's summary and its counts say it:
    "a rejected at its gate", "a, b rejected at their gate"."""
    return f"{', '.join(keys)} rejected at {'its' if len(keys) == 1 else 'their'} gate"


def rejected_at_gate(run_ids: Iterable[int]) -> dict[int, list[str]]:
    """Keys of each run's tasks skipped because a person rejected them at their gate, in plan
    order (one query; runs without one are left out). Such a task is skipped like one below a
    failure (its branch must not run), but it is a person's decision.

    Its latest gate's decision: a task retried after a rejection asks again with a new gate
    (scheduler.open_gate), and one approved then and skipped later below a failure was not
    rejected, though its first gate still reads so."""
    latest_gate = (
        Checkpoint.objects.filter(task_run=OuterRef("pk"), kind=Checkpoint.Kind.BEFORE)
        .order_by("-created_at", "-pk")
        .values("status")[:1]
    )
    rows = (
        TaskRun.objects.filter(run_id__in=list(run_ids), state=State.SKIPPED, skip_cascades=True)
        .annotate(gate=Subquery(latest_gate))
        .filter(gate=Checkpoint.Status.REJECTED)
        .order_by("run_id", "subtask__position", "pk")
        .values_list("run_id", "subtask__key")
    )
    keys: dict[int, list[str]] = {}
    for run_id, key in rows:
        keys.setdefault(run_id, []).append(key)
    return keys


def counts_by_run(run_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Tasks by display state for each of these runs, in one query: what the runs lists count
    (the page's strips, the `runs` command's outcomes).

    A ready task that a cap holds back counts as `waiting` ("held back"), one waiting for its retry
    as `retrying`, as the run page's Tasks card and graph count them: the runs list must not call
    "ready" what the run page calls "held back"."""
    counts: dict[int, dict[str, int]] = {}
    rows = (
        TaskRun.objects.filter(run_id__in=list(run_ids))
        .order_by()
        .annotate(shown_as=SHOWN_AS)
        .values_list("run_id", "shown_as")
    )
    for run_id, shown_as, n in rows.annotate(n=Count("pk")):
        by_state = counts.setdefault(run_id, {})
        by_state[shown_as] = by_state.get(shown_as, 0) + n
    return counts


def display_state(state: str, wait_reason: str = "", wait_code: str = "") -> str:
    """The state a person reads: `retrying` for a ready task waiting for its retry's backoff,
    `waiting` for one that a cap holds back, `waiting_gate` ("needs approval") for a running task
    whose agent waits for a tool call's approval, else the task's state.

    The one rule of them: `SHOWN_AS` is it as a database expression, `HELD_BACK` and `RETRYING_NOW`
    as filters, for counts read in the database (readmodels/run_progress.py)."""
    if state == State.READY and wait_code == RETRY_BACKOFF:
        return RETRYING
    if state == State.READY and wait_reason:
        return WAITING
    if state == State.RUNNING and wait_code == TOOL_APPROVAL:
        return State.WAITING_GATE
    return state


# `display_state`'s rule as filters: the tasks it shows `retrying`, `waiting` ("held back"), and
# the running ones it shows as needing approval; and as the display state of each row.
RETRYING_NOW = Q(state=State.READY, wait_code=RETRY_BACKOFF)
HELD_BACK = Q(state=State.READY) & ~Q(wait_reason="") & ~Q(wait_code=RETRY_BACKOFF)
AWAITING_TOOL_APPROVAL = Q(state=State.RUNNING, wait_code=TOOL_APPROVAL)
SHOWN_AS = Case(
    When(RETRYING_NOW, then=Value(RETRYING)),
    When(HELD_BACK, then=Value(WAITING)),
    When(AWAITING_TOOL_APPROVAL, then=Value(State.WAITING_GATE.value)),
    default=F("state"),
    output_field=CharField(),
)


class TaskNote(NamedTuple):
    """Why a task is where it is, in one line, and what kind of line it is: each reader words and
    styles a kind its own way (the page's row gives an activity its own colour and cuts an error
    short; `run_status` says "waiting: …"). `kind` is "" when there is nothing to say."""

    kind: Literal["silent", "activity", "waiting", "error", "summary", ""]
    text: str


NO_NOTE = TaskNote("", "")


def shown(state: str, progress: int, wait_reason: str, wait_code: str, activity: str = "") -> dict[str, Any]:
    """What a TaskView shows otherwise than its task's columns say: its progress as its record
    gives it (`progress_shown`), a ready task held back is `waiting`, and only a running task has
    an activity."""
    return {
        "progress": progress_shown(state, progress),
        "display_state": display_state(state, wait_reason, wait_code),
        "activity": activity if state == State.RUNNING else "",
    }


class TaskView(TaskRecord):
    """A task as the run page shows it: its record plus display state and live token burn.

    `progress` is its record's (100 for a succeeded task whatever its last streamed value was, None
    for one that ended otherwise); `progress_text` is how the task panel and `run_status` give it.
    """

    agent_id: int
    display_state: str
    # What the attempt running now has used so far (not yet settled into the task's totals): its
    # input, known once its request was sent, and the output it has streamed.
    live_input_tokens: int
    live_output_tokens: int
    gate: str
    wait_code: str = ""  # its wait's code (engine/waits.py): a retry's, a tool call's approval…
    activity: str  # what a running agent is doing now ("step 3 · calling lookup"), else ""
    # A running task whose worker missed its lease renewals: since when, and until when it waits
    # for it (readmodels/silence.py), else None.
    silence: Silence | None = None
    # What its attempts before its last re-run spent (engine/reruns.py): part of its record's
    # totals and the run's, not of what this start spends (`tokens`, `cost_now_usd`).
    earlier_attempts: int
    earlier_tokens: int
    earlier_cost_usd: Decimal

    @classmethod
    def of(cls, task: TaskRun, live: LiveTokens = NO_LIVE_TOKENS, activity: str = "") -> Self:
        """The view of a TaskRun with subtask and agent selected."""
        return cls.build(
            task,
            agent_id=task.agent_id,
            live_input_tokens=live.input,
            live_output_tokens=live.output,
            gate=task.subtask.gate,
            earlier_attempts=task.earlier_attempts,
            earlier_tokens=task.earlier_tokens,
            earlier_cost_usd=task.earlier_cost_usd,
            silence=silence_of(
                task.state,
                task.lease_owner,
                task.lease_expires_at,
                lost_before=task.lost_count,
                attempts=task.attempt_count - task.earlier_attempts,
            ),
            wait_code=task.wait_code,
            **shown(task.state, task.progress, task.wait_reason, task.wait_code, activity),
        )

    @classmethod
    def of_values(cls, values: dict[str, Any]) -> Self:
        """The view of a task read as plain values: VIEW_COLUMNS by their field names, and its
        LEASE_COLUMNS (`task_views`)."""
        owner, expires, lost = values.pop("lease_owner"), values.pop("lease_expires_at"), values["lost_count"]
        attempts = values["attempt_count"] - values["earlier_attempts"]
        return cls(
            **{
                **values,
                "silence": silence_of(values["state"], owner, expires, lost_before=lost, attempts=attempts),
                "live_input_tokens": 0,
                "live_output_tokens": 0,
                **shown(values["state"], values["progress"], values["wait_reason"], values["wait_code"]),
            }
        )

    @property
    def pk(self) -> int:
        return self.id

    @property
    def state_label(self) -> str:
        return STATE_LABELS.get(self.display_state, self.display_state)

    @property
    def attempts_text(self) -> str:
        """Its attempts as its panel's head counts them: "3", or "3 · 2 lost" (its attempt list
        says how they were lost, `lost_note`; the head's narrow column has room for a word)."""
        return f"{self.attempt_count} · {self.lost_count} lost" if self.lost_count else str(self.attempt_count)

    @property
    def progress_text(self) -> str:
        """`progress` as the task panel and `run_status` give it: "40%", or "—"."""
        return "—" if self.progress is None else f"{self.progress}%"

    @property
    def input_tokens_so_far(self) -> int:
        """Its input tokens with those of the attempt running now (the panel's Tokens title)."""
        return self.input_tokens + self.live_input_tokens

    @property
    def tokens(self) -> int:
        """The token burn of this start of the task: settled input + output tokens plus what the
        attempt running now has used, less what was spent before its last re-run."""
        return self.input_tokens_so_far + self.output_tokens + self.live_output_tokens - self.earlier_tokens

    @property
    def cost_now_usd(self) -> Decimal:
        """What this start of the task cost: its cost less what was spent before its last re-run."""
        return self.cost_usd - self.earlier_cost_usd

    @property
    def is_terminal(self) -> bool:
        return self.state in TaskRun.TERMINAL

    @property
    def note(self) -> TaskNote:
        """Why the task is where it is, as its row on the run page and `run_status` say it (the task
        panel's head says its activity or wait, and its error on a line of its own): that its
        worker has gone silent (what its agent was doing is then no longer news), else what its
        agent is doing now ("step 2 · calling workspace:calculate"), else what it waits for (never
        while queued: it was let through, and a reason it still has is from before), else
        the error it ended with when it ended without success, else its summary.

        A task keeps its last attempt's error while it waits for a retry and while the retry runs:
        that error is the past, not why the task waits or what it does."""
        if self.silence:
            return TaskNote("silent", self.silence.text)
        if self.activity:
            return TaskNote("activity", self.activity)
        if self.wait_reason and self.state != State.QUEUED:
            return TaskNote("waiting", self.wait_reason)
        if self.error and self.is_terminal and self.state != State.SUCCEEDED:
            return TaskNote("error", self.error)
        return TaskNote("summary", self.summary) if self.summary else NO_NOTE


def lost_said(lost_count: int) -> str:
    """A task's attempts lost with their worker (`TaskRun.lost_count`), in words: "1 lost when its
    worker stopped", "2 lost when their workers stopped" ("" for none). It was shown nowhere: a
    panel said "Attempts 3" of a task whose two workers had died, as if it had failed twice."""
    if not lost_count:
        return ""
    return f"{lost_count} lost when {'its worker' if lost_count == 1 else 'their workers'} stopped"


def lost_note(attempt_count: int, lost_count: int, attempts: Iterable[Attempt] = ()) -> str:
    """What the task panel's attempt list says of the attempts lost with their worker: "2 attempts
    · 1 lost when its worker stopped", that they spent no retry, and when the task fails of them
    ("" for none). `attempts`: the task's attempts; when more of them are lost than it counts, the
    others were lost before a person's retry or a re-run started the count again: said so."""
    if not lost_count:
        return ""
    listed = sum(1 for a in attempts if a.state == Attempt.State.LOST)
    since = " since its last retry or re-run" if listed > lost_count else ""
    bound = settings.GLASSBOX_MAX_LOST_ATTEMPTS
    return (
        f"{wording.counted(attempt_count, 'attempt')} · {lost_said(lost_count)}{since}. A lost attempt spends "
        f"none of the task's retries; the task fails once {bound} {'is' if bound == 1 else 'are'} lost "
        "(GLASSBOX_MAX_LOST_ATTEMPTS; a retry or a re-run counts again from 0)."
    )


def output_heading(task: TaskRun, last_attempt: Attempt | None) -> str:
    """What the task's output is, as the panel heads it: "Output" (its result, or the text its
    running attempt streams), or for a task with no result the partial text its last attempt wrote
    before it ended: "Partial output of attempt 3 (failed)" (the downloads' `PartialOutputRecord`)."""
    partial = PartialOutputRecord.of(task, last_attempt)
    return partial.heading if partial else "Output"


def tasks_query(run_id: int):
    return TaskRun.objects.filter(run_id=run_id).select_related("subtask", "agent").order_by("subtask__position", "pk")


# What a TaskView reads of a task, its subtask and its agent, as plain values: its field -> the
# column. The live view builds the view of every task a frame touches (all but one of a 200-task
# run's at its fan-out); reading them as model instances (three per task: the task, its subtask
# and its agent) took half the time of building that frame.
# What a view reads for its `silence` (and whether losing its attempt leaves a retry): the last
# is a field of the view too.
LEASE_COLUMNS = ("lease_owner", "lease_expires_at", "lost_count")
VIEW_COLUMNS = {
    name: {"id": "pk", "key": "subtask__key", "title": "subtask__title", "agent": "agent__name"}.get(name, name)
    for name in TaskView.model_fields
    if name not in ("display_state", "live_input_tokens", "live_output_tokens", "activity", "silence", *LEASE_COLUMNS)
} | {"gate": "subtask__gate"}


def task_views(run: Run | int, task_ids: Iterable[int] | None = None) -> list[TaskView]:
    """Every task of the run in plan order (or only `task_ids`), with live token burn."""
    run_id = run.pk if isinstance(run, Run) else run
    query = TaskRun.objects.filter(run_id=run_id).order_by("subtask__position", "pk")
    if task_ids is not None:
        query = query.filter(pk__in=list(task_ids))
    names = (*VIEW_COLUMNS, *LEASE_COLUMNS)
    views = [
        TaskView.of_values(dict(zip(names, row, strict=True)))
        for row in query.values_list(*VIEW_COLUMNS.values(), *LEASE_COLUMNS)
    ]
    live = live_tokens(views)
    doing = activities(views)
    return [_with_live_work(view, live.get(view.pk), doing.get(view.pk)) for view in views]


def _with_live_work(view: TaskView, tokens: LiveTokens | None, activity: str | None) -> TaskView:
    """`view` with what its running attempt has used so far and what its agent is doing now
    (None: not known), or `view` itself when neither is known (most tasks of a large run)."""
    if tokens is None and activity is None:
        return view
    tokens = tokens or NO_LIVE_TOKENS
    return view.model_copy(
        update={"live_input_tokens": tokens.input, "live_output_tokens": tokens.output, "activity": activity or ""}
    )


@dataclass(frozen=True)
class TaskState:
    """What the totals and the lanes need of a task, read as plain values.

    The live view refreshes them at nearly every frame of a running run, for every task: building
    each task's whole view (TaskView: its models, its record, its agent's activity) for that was
    most of a round on a large run. The rows of the tasks a frame touches still get TaskViews.
    """

    pk: int
    key: str
    title: str
    agent_id: int
    state: str
    wait_reason: str
    wait_code: str  # the reason's stable code (engine/waits.py): "run_cap", "agent_limit"…
    progress: int
    attempt_count: int
    started_at: datetime | None
    finished_at: datetime | None
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    earlier_tokens: int
    # When its last attempt ended: for a task reviewed after it ran, when its work ended, before
    # the wait for the reviewer (its `finished_at` is when the review was approved). The pace of
    # the run's ETA measures the work (eta.py).
    worked_until: datetime | None
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    lost_count: int = 0
    earlier_attempts: int = 0  # for its silence's words, as `lost_count` (task_states reads both)
    live_input_tokens: int = 0
    live_output_tokens: int = 0

    @property
    def display_state(self) -> str:
        return display_state(self.state, self.wait_reason, self.wait_code)

    @property
    def is_terminal(self) -> bool:
        return self.state in TaskRun.TERMINAL

    @property
    def silence(self) -> Silence | None:
        """Its worker's silence while it runs (the agent's lane says it), else None."""
        return silence_of(
            self.state,
            self.lease_owner,
            self.lease_expires_at,
            lost_before=self.lost_count,
            attempts=self.attempt_count - self.earlier_attempts,
        )

    @property
    def spent_tokens(self) -> int:
        """Every token the task has used, before its last re-run too, and what its running attempt
        has used so far."""
        return self.input_tokens + self.output_tokens + self.live_input_tokens + self.live_output_tokens

    @property
    def tokens(self) -> int:
        """As TaskView.tokens: this start's burn, without what was spent before its last re-run."""
        return self.spent_tokens - self.earlier_tokens


# What `task_states` reads of a task after its STATE_FIELDS (or not as a column: its live tokens).
AFTER_STATE_FIELDS = ("worked_until", *LEASE_COLUMNS, "earlier_attempts", "live_input_tokens", "live_output_tokens")
STATE_FIELDS = tuple(
    name for name in TaskState.__dataclass_fields__ if name not in ("pk", "key", "title", *AFTER_STATE_FIELDS)
)


def task_states(run: Run | int, *, live_only: bool = False) -> list[TaskState]:
    """Every task of the run in plan order (or only those whose attempt may be running still,
    `live_tokens.may_run_on`), as TaskState (two statements: the tasks with when their last
    attempts ended, and the tokens their running attempts have used so far)."""
    run_id = run.pk if isinstance(run, Run) else run
    last_attempt = Attempt.objects.filter(task_run_id=OuterRef("pk"), number=OuterRef("attempt_count"))
    query = TaskRun.objects.filter(run_id=run_id)
    if live_only:
        query = query.filter(attempt_count__gt=0).exclude(state__in=NOT_RUNNING_ON)
    rows = (
        query.annotate(worked_until=Subquery(last_attempt.values("finished_at")[:1]))
        .order_by("subtask__position", "pk")
        .values_list(
            "pk", "subtask__key", "subtask__title", *STATE_FIELDS, "worked_until", *LEASE_COLUMNS, "earlier_attempts"
        )
    )
    states = [TaskState(*row) for row in rows]
    live = live_tokens(states)
    return [
        replace(state, live_input_tokens=live[state.pk].input, live_output_tokens=live[state.pk].output)
        if state.pk in live
        else state
        for state in states
    ]


@dataclass(frozen=True)
class RunTokens:
    """A run's tokens as people read them while it runs: the run page's Tokens card and
    `run_status` say the same. What its ended attempts used is settled on the run (`input`,
    `output`); what its running attempts have used so far is not yet (`live_tokens`): their
    input, known from their stream's start, and the output they have streamed."""

    input: int
    output: int
    running_input: int = 0
    streaming: int = 0

    @property
    def input_so_far(self) -> int:
        """The input tokens of the run, the running attempts' included (the Tokens card's "in")."""
        return self.input + self.running_input

    @property
    def total(self) -> int:
        """Every token the run has used, the running attempts' so far included."""
        return self.input_so_far + self.output + self.streaming


def run_tokens(run: Run, tasks: Iterable[TaskState] | None = None) -> RunTokens:
    """The run's tokens, its running attempts' so far included. `tasks`: its tasks' states, read
    with `run` in one snapshot (a settled attempt is then counted on the run or on its task,
    never both); without them, the tasks whose attempts may run are read here (read `run` in the
    same snapshot). An attempt whose task was cancelled counts until it stops, as it did before
    the cancel: the total never goes back while nothing is undone."""
    states = task_states(run, live_only=True) if tasks is None else tasks
    running_input = streaming = 0
    for state in states:
        running_input += state.live_input_tokens
        streaming += state.live_output_tokens
    return RunTokens(run.input_tokens, run.output_tokens, running_input, streaming)


def agents_of(states: Iterable[TaskState]) -> dict[int, Agent]:
    """The agents of these tasks by id, in name order: one read for a frame's totals and lanes."""
    ids = sorted({state.agent_id for state in states})
    return {agent.pk: agent for agent in sql.objects(Agent, order_by=("name",), pk__in=ids)} if ids else {}


def task_view(task: TaskRun) -> TaskView:
    (view,) = task_views(task.run_id, [task.pk])
    return view


def skip_said(task: TaskRun) -> str:
    """What a person's skip of `task` came to, for the answer to it: the tasks directly below it go
    on without it, unless another upstream that did not succeed keeps them skipped. The answer
    said "tasks below it go on without it" over a fan-in that stayed skipped because of another
    failed branch (and of a final task, which has none below it)."""
    below = TaskRun.objects.filter(
        run_id=task.run_id, subtask__upstream_edges__upstream_id=task.subtask_id
    ).select_related("subtask")
    if not below:
        return f"{task.subtask.key} skipped."
    kept = sorted(
        (t for t in below if t.state == TaskRun.State.SKIPPED and t.skip_cascades), key=lambda t: t.subtask.position
    )
    if not kept:
        return f"{task.subtask.key} skipped: tasks below it go on without it."
    stays = "; ".join(f"{t.subtask.key} stays skipped: {t.error}" for t in kept[:3])
    more = f"; {len(kept) - 3} more stay skipped" if len(kept) > 3 else ""
    return f"{task.subtask.key} skipped; {stays}{more}."
