"""One record model per database model: the shape of a row wherever it leaves the database.

Each record is a pydantic model built from its Django row by one classmethod (`RunRecord.of(run)`).
The same classes are the JSON API's response schemas (django-ninja reads them, so the OpenAPI
document describes exactly what is sent), the JSON download of a run (`run_export`, format
`glassbox.run/1`), its Markdown export and the run page's task rows (`readmodels.tasks.TaskView`
extends `TaskRecord`). Add a field here and every one of them has it. A subclass that adds fields
keeps `of(row)` and fills them through the base's `build(row, **more)`, so every `of` has a
signature its base accepts. A run's checkpoints and events have their records, built on this
module's `Record` and `Time`, in `checkpoint_event_records` (the API, the download and the audit
export read them there).

Inside Python a record holds typed values (Decimal money, aware datetimes); every dump, in
Python or JSON mode, writes money as a decimal string ("0.001234", never a float), times as
ISO 8601 in UTC or None, and foreign keys as the other row's natural key (agent name, subtask
key, user name).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, InstanceOf, PlainSerializer, WithJsonSchema

from orchestrator.models import Agent, Attempt, Checkpoint, Dependency, Plan, Run, Subtask, TaskRun
from orchestrator.readmodels import launchers, prices
from orchestrator.readmodels.live_tokens import NO_LIVE_TOKENS, LiveTokens
from orchestrator.readmodels.template_items import TemplateItems

MONEY_PATTERN = r"^-?\d+(\.\d+)?$"

Money = Annotated[
    InstanceOf[Decimal],
    BeforeValidator(lambda value: Decimal("0") if value is None else Decimal(str(value))),
    PlainSerializer(lambda value: format(value, "f"), return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": MONEY_PATTERN, "description": 'US dollars as a decimal string, e.g. "0.001234"'}
    ),
]
Time = Annotated[
    InstanceOf[datetime] | None,
    PlainSerializer(lambda value: value.isoformat() if value is not None else None, return_type=str | None),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
            "description": "ISO 8601 time in UTC, or null",
        }
    ),
]


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


class Record(TemplateItems, BaseModel):
    """Base of the records: every field required, no unknown fields; a template reads a field
    as an item (`TemplateItems` says why)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def many(cls, objects: list) -> list[Self]:
        """The records of these objects (a page of a list): `of` each, unless a record reads
        something for a whole page at once."""
        return [cls.of(obj) for obj in objects]  # type: ignore[attr-defined]


# --- Agent ----------------------------------------------------------------------------------------


class AgentRecord(Record):
    name: str
    role: str
    capabilities: list[Any]
    provider: str
    model: str
    status: str
    max_concurrency: int
    timeout_s: int
    max_retries: int
    max_output_tokens: int
    system_prompt: str
    provider_options: dict[str, Any]

    @classmethod
    def of(cls, agent: Agent) -> Self:
        return cls(
            name=agent.name,
            role=agent.role,
            capabilities=list(agent.capabilities or []),
            provider=agent.provider,
            model=agent.model,
            status=agent.status,
            max_concurrency=agent.max_concurrency,
            timeout_s=agent.timeout_s,
            max_retries=agent.max_retries,
            max_output_tokens=agent.max_output_tokens,
            system_prompt=agent.system_prompt,
            provider_options=dict(agent.provider_options or {}) if isinstance(agent.provider_options, dict) else {},
        )


# --- Plan, Subtask, Dependency ------------------------------------------------------------------


class EstimateRecord(Record):
    input_tokens: int
    output_tokens: int


class SubtaskRecord(Record):
    key: str
    title: str
    instructions: str
    agent: str
    depends_on: list[str]
    gate: str
    priority: int
    timeout_s: int | None
    max_retries: int | None
    estimate: EstimateRecord
    inputs: str | None = None  # "summaries" or "full"; None: the default (as in a plan file)

    @classmethod
    def of(cls, subtask: Subtask, depends_on: list[str] | None = None) -> Self:
        """`depends_on` may be given by a caller that already read the edges (saves a query)."""
        if depends_on is None:
            depends_on = list(
                subtask.upstream_edges.order_by("upstream__position").values_list("upstream__key", flat=True)
            )
        return cls(
            key=subtask.key,
            title=subtask.title,
            instructions=subtask.instructions,
            agent=subtask.agent.name,
            depends_on=depends_on,
            gate=subtask.gate,
            priority=subtask.priority,
            timeout_s=subtask.timeout_s,
            max_retries=subtask.max_retries,
            estimate=EstimateRecord(
                input_tokens=subtask.estimated_input_tokens, output_tokens=subtask.estimated_output_tokens
            ),
            inputs=subtask.inputs or None,
        )


class DependencyRecord(Record):
    upstream: str
    downstream: str

    @classmethod
    def of(cls, dependency: Dependency) -> Self:
        return cls(upstream=dependency.upstream.key, downstream=dependency.downstream.key)


class PlanRecord(Record):
    """The plan in the shape of a plan file (subtasks with depends_on) plus its edge list."""

    id: int
    goal: str
    source: str
    source_name: str
    created_by: str | None
    created_at: Time
    subtasks: list[SubtaskRecord]
    dependencies: list[DependencyRecord]

    @classmethod
    def of(cls, plan: Plan) -> Self:
        subtasks = list(plan.subtasks.select_related("agent").order_by("position"))
        edges = list(plan.dependencies.select_related("upstream", "downstream").order_by("id"))
        ups: dict[int, list[str]] = {s.pk: [] for s in subtasks}
        for edge in edges:
            ups.setdefault(edge.downstream_id, []).append(edge.upstream.key)
        return cls(
            id=plan.pk,
            goal=plan.goal,
            source=plan.source,
            source_name=plan.source_name,
            created_by=_username(plan.created_by),
            created_at=plan.created_at,
            subtasks=[SubtaskRecord.of(s, ups.get(s.pk, [])) for s in subtasks],
            dependencies=[DependencyRecord.of(e) for e in edges],
        )


# --- Run, TaskRun, Attempt ----------------------------------------------------------------------


class RunRecord(Record):
    id: int
    plan: int
    goal: str
    status: str
    summary: str
    cap: int
    budget_usd: Money
    failure_policy: str
    launched_by: str | None
    # Who launched it in words, as its `run.created` event recorded it ("alice", "root from the
    # command line"; "not recorded" for a run made otherwise): `launched_by` is a login, null for
    # a launch from the command line or by an account deleted since.
    launcher: str
    created_at: Time
    started_at: Time
    finished_at: Time
    input_tokens: int = Field(
        description=(
            "Input tokens of the run's ended attempts, settled with cost_usd. A running attempt's input "
            "is not in it until the attempt ends: the run's totals.input_tokens_so_far (GET /api/runs/{id}) "
            "and its tasks' input_tokens_so_far count it."
        )
    )
    output_tokens: int = Field(
        description=(
            "Output tokens of the run's ended attempts, settled with cost_usd. What running attempts "
            "have streamed so far is the run's totals.streaming_tokens and its tasks' streaming_tokens."
        )
    )
    cost_usd: Money
    unpriced_tokens: dict[str, int] = Field(
        description=(
            'Tokens the run used on models without a price ("provider:model" -> tokens; {} when every '
            "model it used has one): cost_usd counts them as $0 and the budget cannot stop their calls. "
            "unpriced_note says it in words, as the run page's Cost card does."
        )
    )
    unpriced_note: str
    reserved_usd: Money
    peak_running: int
    last_event_seq: int

    @classmethod
    def of(cls, run: Run, launcher: str | None = None, unpriced: dict[str, int] | None = None) -> Self:
        """The run's record (`launcher` and `unpriced`, its `prices.unpriced_by_run`, read when not given)."""
        if unpriced is None:
            unpriced = prices.unpriced_by_run([run.pk]).get(run.pk, {})
        return cls(
            id=run.pk,
            plan=run.plan_id,
            goal=run.plan.goal,
            status=run.status,
            summary=run.summary,
            cap=run.cap,
            budget_usd=run.budget_usd,
            failure_policy=run.failure_policy,
            launched_by=_username(run.launched_by),
            launcher=launchers.launcher(run) if launcher is None else launcher,
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            unpriced_tokens=unpriced,
            unpriced_note=prices.unpriced_text(unpriced),
            reserved_usd=run.reserved_usd,
            peak_running=run.peak_running,
            last_event_seq=run.last_event_seq,
        )

    @classmethod
    def many(cls, objects: list) -> list[Self]:
        """A page of runs, their launchers and their unpriced tokens read in one query each."""
        names = launchers.launchers(run.pk for run in objects)
        unpriced = prices.unpriced_by_run(run.pk for run in objects)
        return [cls.of(run, names[run.pk], unpriced.get(run.pk, {})) for run in objects]


class AttemptRecord(Record):
    number: int
    state: str
    worker: str
    queued_at: Time
    started_at: Time
    finished_at: Time
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: Money
    error: str
    late_result_discarded: bool

    @classmethod
    def of(cls, attempt: Attempt) -> Self:
        duration = None
        if attempt.started_at and attempt.finished_at:
            duration = round((attempt.finished_at - attempt.started_at).total_seconds(), 3)
        return cls(
            number=attempt.number,
            state=attempt.state,
            worker=attempt.worker,
            queued_at=attempt.queued_at,
            started_at=attempt.started_at,
            finished_at=attempt.finished_at,
            duration_s=duration,
            input_tokens=attempt.input_tokens,
            output_tokens=attempt.output_tokens,
            cost_usd=attempt.cost_usd,
            error=attempt.error,
            late_result_discarded=attempt.late_result_discarded,
        )


# A task's output is its result in these states, or the text its current attempt streams; in any
# other (failed, cancelled, skipped, or waiting for a retry) an output is the partial text its last
# attempt wrote before it ended: an attempt's dispatch clears it, only a success makes it a result.
OUTPUT_STATES = (TaskRun.State.SUCCEEDED, TaskRun.State.AWAITING_REVIEW, TaskRun.State.RUNNING, TaskRun.State.QUEUED)


# The ends other than success, in the order an outcome lists them.
ENDED_OTHERWISE = (TaskRun.State.FAILED, TaskRun.State.CANCELLED, TaskRun.State.SKIPPED)


def progress_shown(state: str, progress: int) -> int | None:
    """A task's progress as a person reads it: its saved percentage while under way, 100 once it
    succeeded (whatever its last streamed value was), and None for a task that ended otherwise
    (failed, cancelled, skipped): how far its last attempt got is not how much of it is done (a
    rejected review read "100%", a cancelled task "15%")."""
    if state == TaskRun.State.SUCCEEDED:
        return 100
    return None if state in ENDED_OTHERWISE else progress


def is_partial_output(task: TaskRun) -> bool:
    """Is the task's output the partial text of an attempt that ended without a result?"""
    return bool(task.output) and task.state not in OUTPUT_STATES


class PartialOutputRecord(Record):
    """What a task's output is when it is not its result: the partial text (`text`) of the attempt
    that wrote it (`attempt`, its number; `attempt_state`, how it ended: failed, timed_out, cancelled,
    lost, handed_back), headed as the run page heads it ("Partial output of attempt 3 (failed)").
    Or the whole text of an attempt that succeeded (`attempt_state` "succeeded") but whose review
    did not approve it: "Output of attempt 1, rejected in review" (it was headed "Partial output of
    attempt 1 (succeeded)": neither partial nor a result). The API and the downloads give it here
    and never as the task's `output`, so that nobody takes a failed task's text for its result."""

    attempt: int | None
    attempt_state: str | None
    heading: str
    text: str

    @classmethod
    def of(cls, task: TaskRun, last_attempt: Attempt | None) -> Self | None:
        """None when the task's output is its result (or it has none); `last_attempt`: its
        highest-numbered attempt, which wrote the output."""
        if not is_partial_output(task):
            return None
        if last_attempt is None:
            return cls(attempt=None, attempt_state=None, heading="Partial output (not a result)", text=task.output)
        if last_attempt.state == Attempt.State.SUCCEEDED:
            heading = f"Output of attempt {last_attempt.number}, {review_outcome(task)}"
            return cls(attempt=last_attempt.number, attempt_state=last_attempt.state, heading=heading, text=task.output)
        return cls.written_by(last_attempt, task.output)

    @property
    def what(self) -> str:
        """What the text is, after its heading ("Partial output of attempt 1 (failed): the text it
        wrote before it ended, not a result"), as the run page's Result and the Markdown say it."""
        if self.attempt_state == Attempt.State.SUCCEEDED:
            return "not a result"
        if self.attempt_state is None:  # its heading says "(not a result)"
            return "the text it wrote before it ended"
        return "the text it wrote before it ended, not a result"

    @classmethod
    def written_by(cls, attempt: Attempt, text: str) -> Self:
        """`text` as the partial output of `attempt`, which ended without a result."""
        ended = attempt.get_state_display().lower()
        return cls(
            attempt=attempt.number,
            attempt_state=attempt.state,
            heading=f"Partial output of attempt {attempt.number} ({ended})",
            text=text,
        )


def review_outcome(task: TaskRun) -> str:
    """Why a succeeded attempt's output is not the task's result, in the words of the task's error
    ("output rejected in review: …"): its review rejected it, or the task was skipped or cancelled
    while the review was open (one query, for such a task alone)."""
    review = task.checkpoints.filter(kind=Checkpoint.Kind.AFTER).order_by("-pk").values_list("status", flat=True)
    return "rejected in review" if review.first() == Checkpoint.Status.REJECTED else "not approved in review"


class AttemptOutput(Record):
    """What one attempt wrote, headed for its own page (`note`: why it is kept there, if it is)."""

    heading: str
    note: str = ""
    text: str

    @classmethod
    def of(cls, task: TaskRun, attempt: Attempt, last_attempt: Attempt | None) -> Self | None:
        """The text kept on `attempt` (a lost attempt's, or an earlier answer or partial text kept
        when its task was re-run); else, for the task's latest attempt (`last_attempt`), the task's
        output: its partial text as `PartialOutputRecord` heads it, or its result (or what the
        running attempt has streamed so far). None: nothing of this attempt's is kept."""
        if attempt.output:
            if attempt.late_result_discarded:
                return cls(
                    heading="What this attempt wrote",
                    note="kept, not applied: it had lost its lease",
                    text=attempt.output,
                )
            succeeded = attempt.state == Attempt.State.SUCCEEDED
            heading = "Output" if succeeded else PartialOutputRecord.written_by(attempt, attempt.output).heading
            return cls(heading=heading, note="kept when its task started again", text=attempt.output)
        if last_attempt is None or last_attempt.pk != attempt.pk or not task.output:
            return None
        partial = PartialOutputRecord.of(task, attempt)
        if partial is not None:
            return cls(heading=partial.heading, text=partial.text)
        streaming = task.state in (TaskRun.State.RUNNING, TaskRun.State.QUEUED)
        return cls(heading="Output so far" if streaming else "Output", text=task.output)

    @staticmethod
    def missing(attempt: Attempt) -> str:
        """What the attempt's page says where `of` found nothing: a page without an Output card
        left a reader to guess whether the attempt wrote nothing or the page had failed. Said from
        the attempt's state and tokens: one that ended before its model wrote a token wrote
        nothing; else its text is gone (a lost attempt's text since its host's last save, or an
        earlier attempt's from before its task kept each attempt's text when the next one started;
        a lost attempt's usage is never reported, so its tokens prove nothing)."""
        if attempt.state in (Attempt.State.QUEUED, Attempt.State.RUNNING):
            return "No output yet."
        if not attempt.output_tokens and attempt.state != Attempt.State.LOST:
            if attempt.state == Attempt.State.SUCCEEDED:
                return "This attempt wrote no output."
            ended = attempt.get_state_display().lower()
            return f"This attempt wrote no output: it ended ({ended}) before its model wrote anything."
        return "No output of this attempt was kept."


class TaskRecord(Record):
    """A task of a run as it stands (without its attempts: see TaskRunRecord)."""

    id: int
    key: str
    title: str
    agent: str
    state: str
    wait_reason: str
    progress: int | None = Field(
        description=(
            "How much of the task is done, in percent, as its panel and run_status give it: how far its "
            "running attempt got while it is under way (its output so far against what its agent's answers "
            "take: the median of its latest answers, or its max_output_tokens before it has three; 99 at "
            "most), 100 once it succeeded, and null for a task that "
            "failed, was cancelled or skipped (how far its last attempt got is not how much of it is done)."
        )
    )
    # The task's result (or, while it runs, the text its attempt streams, as the page heads it
    # "Output"). In a TaskRunRecord (the API, the downloads) it is null when the task has none: a
    # failed, cancelled or skipped task's text is its `partial_output`, never its output.
    output: str | None
    summary: str
    error: str
    input_tokens: int = Field(
        description=(
            "Input tokens of the task's ended attempts (before a re-run too), settled with cost_usd. "
            "A running attempt's input is not in it until the attempt ends: input_tokens_so_far counts it."
        )
    )
    output_tokens: int = Field(
        description=(
            "Output tokens of the task's ended attempts, settled with cost_usd. What its running "
            "attempt has streamed so far is streaming_tokens."
        )
    )
    cost_usd: Money
    attempt_count: int
    lost_count: int = Field(
        description=(
            "How many of the task's attempts were declared lost because their worker died or fell silent "
            "past its lease, since the task last started over (a person's retry or a re-run sets it to 0; "
            'each lost attempt is also in attempt_count, its state "lost"). A lost attempt spends none of '
            "the task's retries: the task is tried again until GLASSBOX_MAX_LOST_ATTEMPTS of them are lost, "
            "then it fails."
        )
    )
    ready_at: Time
    started_at: Time
    finished_at: Time

    @classmethod
    def of(cls, task: TaskRun) -> Self:
        return cls.build(task)

    @classmethod
    def build(cls, task: TaskRun, **more: Any) -> Self:
        """The task's record; `more` sets the fields a subclass adds (or overrides one)."""
        values = dict(
            id=task.pk,
            key=task.subtask.key,
            title=task.subtask.title,
            agent=task.agent.name,
            state=task.state,
            wait_reason=task.wait_reason,
            progress=progress_shown(task.state, task.progress),
            output=task.output,
            summary=task.summary,
            error=task.error,
            input_tokens=task.input_tokens,
            output_tokens=task.output_tokens,
            cost_usd=task.cost_usd,
            attempt_count=task.attempt_count,
            lost_count=task.lost_count,
            ready_at=task.ready_at,
            started_at=task.started_at,
            finished_at=task.finished_at,
        )
        return cls(**{**values, **more})


class TaskRunRecord(TaskRecord):
    """A task of a run with every attempt at it: what the API and the JSON download give."""

    input_tokens_so_far: int = Field(
        description=(
            "input_tokens plus the input of the attempt running now, known from its stream's start: "
            'the "in" of the run page\'s task panel. Once the attempt ends, its input is settled into '
            "input_tokens and counted there alone."
        )
    )
    streaming_tokens: int = Field(
        description=(
            "Output the task's attempt running now has streamed so far, not yet in output_tokens: the "
            '"streaming" of the run page\'s task panel. 0 when no attempt of it runs.'
        )
    )
    attempts: list[AttemptRecord]
    # Set when the task's text is not its result but the partial text of an attempt that ended
    # without one (failed, timed out, cancelled…), or an output its review rejected; null when it
    # is the result or there is none.
    partial_output: PartialOutputRecord | None

    @classmethod
    def of(cls, task: TaskRun, attempts: list[Attempt] | None = None, live: LiveTokens = NO_LIVE_TOKENS) -> Self:
        """`attempts` may be given by a caller that prefetched them, in number order (saves a query per task);
        `live`: what its running attempt has used so far (`readmodels.live_tokens`)."""
        if attempts is None:
            attempts = list(task.attempts.order_by("number"))
        return cls.build(
            task,
            input_tokens_so_far=task.input_tokens + live.input,
            streaming_tokens=live.output,
            attempts=[AttemptRecord.of(a) for a in attempts],
            output=task.output if task.state in OUTPUT_STATES else None,
            partial_output=PartialOutputRecord.of(task, attempts[-1] if attempts else None),
        )


# --- Run totals -------------------------------------------------------------------------------


class RunTotals(Record):
    """A run's task counts by state, its spend, its tokens (settled, and so far with its running
    attempts', as the run page and `run_status` count them) and its attempts still stopping: the
    API's run totals, and the heart of the engine's RunProgress (which adds what the command line
    follows: status, checkpoints)."""

    total: int
    done: int
    succeeded: int
    failed: int
    skipped: int
    cancelled: int
    running: int
    queued: int
    ready: int
    throttled: int
    waiting: int
    pending: int
    elapsed_s: float
    cost_usd: Money
    input_tokens: int = Field(
        description=(
            "Input tokens of the run's ended attempts, settled with cost_usd. A running attempt's "
            "input is not in it until the attempt ends: input_tokens_so_far counts it."
        )
    )
    output_tokens: int = Field(
        description=(
            "Output tokens of the run's ended attempts, settled with cost_usd. What running "
            "attempts have streamed so far is streaming_tokens."
        )
    )
    input_tokens_so_far: int = Field(
        description=(
            "input_tokens plus the input of the attempts running now, known from their stream's "
            "start: the run page's Tokens card's \"in\" and run_status's. Once an attempt ends, its "
            "input is settled into input_tokens and counted there alone."
        )
    )
    streaming_tokens: int = Field(
        description=(
            "Output the attempts running now have streamed so far, not yet in output_tokens: the "
            "run page's Tokens card's \"streaming\". 0 once no attempt runs."
        )
    )
    attempts_stopping: int = Field(
        description=(
            "Attempts of an ended run that have not stopped yet: a cancel reaches a running attempt "
            "at its next heartbeat, which then adds what it used to cost_usd and the tokens. 0 while "
            "the run goes on (its running tasks say what runs) and once every attempt has stopped. "
            "Everything is stopped, and the totals final, when the run's status is succeeded, failed, "
            "cancelled or over_budget and this is 0."
        )
    )

    @classmethod
    def of(cls, totals: RunTotals) -> RunTotals:
        """Just the totals of a richer value (a RunProgress)."""
        return cls(**{name: getattr(totals, name) for name in cls.model_fields})
