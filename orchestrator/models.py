"""Glassbox's domain model (DESIGN §2).

State transitions live in the engine modules (scheduler, execution, runs); the models hold
data, small derived properties and the guards that keep history append-only.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class Agent(models.Model):
    """A registry entry: who an agent is, which provider and model it uses, its limits."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        ACTIVE = "active"
        RETIRED = "retired"

    class Provider(models.TextChoices):
        SIMULATED = "simulated"
        ANTHROPIC = "anthropic"

    name = models.SlugField(max_length=64, unique=True)
    role = models.CharField(max_length=200, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.SIMULATED)
    model = models.CharField(max_length=100, default="sim-1")
    system_prompt = models.TextField(blank=True)
    max_concurrency = models.PositiveIntegerField(default=2, validators=[MinValueValidator(1)])
    timeout_s = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(settings.GLASSBOX_MAX_TASK_TIMEOUT_S)]
    )
    max_retries = models.PositiveIntegerField(default=3, validators=[MaxValueValidator(20)])
    max_output_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    # Model calls one attempt may make when the agent uses tools (each answer to tool results is
    # one more call); the agent loop stops there (orchestrator/engine/agent_loop.py).
    max_steps = models.PositiveIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(100)], help_text="Model calls per attempt"
    )
    # Provider-specific knobs, e.g. for the simulated provider:
    # {"latency": {"dist": "lognormal", "median_s": 1.0, "sigma": 0.5}, "failure_rate": 0.0, "seed": 7}
    provider_options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_schedulable(self) -> bool:
        return self.status == self.Status.ACTIVE


class ProviderLimit(models.Model):
    """Limits and prices shared by every agent that uses one provider and model."""

    # Admission reads an empty limit and 0 alike as "no limit", so 0 is refused: a person who
    # writes 0 output tokens per minute means none, and would get no cap at all.
    NO_ZERO_LIMIT = "Enter 1 or more, or leave it blank for no limit (0 would mean no limit too)."
    NEGATIVE_PRICE = "A price cannot be negative: enter 0 or more."
    LIMIT_VALIDATORS = [MinValueValidator(1, message=NO_ZERO_LIMIT)]
    PRICE_VALIDATORS = [MinValueValidator(Decimal("0"), message=NEGATIVE_PRICE)]
    CONFIGURED_LIMITS = ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute", "max_in_flight")

    provider = models.CharField(max_length=20, choices=Agent.Provider.choices)
    model = models.CharField(max_length=100)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    input_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    output_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    max_in_flight = models.PositiveIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS)
    # Adaptive concurrency: the in-flight cap in force now (None = max_in_flight, or no cap).
    effective_in_flight = models.PositiveIntegerField(null=True, blank=True)
    # Successes since the effective cap last changed: it grows by one per window of successes.
    successes_since_change = models.PositiveIntegerField(default=0)
    input_price_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=Decimal("0"), validators=PRICE_VALIDATORS
    )
    output_price_per_mtok = models.DecimalField(
        max_digits=10, decimal_places=4, default=Decimal("0"), validators=PRICE_VALIDATORS
    )
    # A 429/529 backs off the whole provider until this moment.
    backoff_until = models.DateTimeField(null=True, blank=True)
    # With no requests_per_minute configured or reported: how many requests the provider accepted
    # in the minute before its last 429, and when that was (engine/adaptive.py learn_request_rate).
    learned_requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Learned from the provider's 429s while requests per minute is empty: admission keeps to it, "
        "plus one per minute since it was learned. Setting requests per minute overrides it.",
    )
    learned_at = models.DateTimeField(null=True, blank=True, help_text="When the request rate was last learned.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "model"], name="unique_provider_model")]
        ordering = ["provider", "model"]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"

    # A learned request rate grows by one per minute without a 429: it probes upwards, as a limit
    # learned low (another client's burst, a token limit's refusal) must not hold for ever.
    LEARNED_RATE_GROWTH_PER_MINUTE = 1

    def per_minute(self, field: str, now: datetime | None = None) -> int | None:
        """The per-minute budget admission keeps to for `field` (requests_per_minute,
        input_tokens_per_minute, output_tokens_per_minute): the value configured or reported by
        the provider; for requests, failing both, the rate learned from the provider's 429s."""
        if field != "requests_per_minute" or not self.rate_is_learned:
            return getattr(self, field)
        assert self.learned_requests_per_minute is not None  # rate_is_learned
        minutes = 0
        if self.learned_at is not None:
            elapsed = ((now or timezone.now()) - self.learned_at).total_seconds()
            minutes = max(0, int(elapsed // 60))
        return self.learned_requests_per_minute + minutes * self.LEARNED_RATE_GROWTH_PER_MINUTE

    @property
    def rate_is_learned(self) -> bool:
        """Admission keeps to a request rate learned from 429s (none configured or reported)."""
        return not self.requests_per_minute and bool(self.learned_requests_per_minute)

    # Both prices at 0 is the default a row is made with (a limit set for its rates alone, a model
    # seed_demo has no list price for): nothing tells it apart from a price of 0 set on purpose,
    # so it counts as no price, and a run on it says its cost leaves the model's tokens out.
    UNPRICED_HELP = (
        "USD per million tokens. With both prices at 0 (the default) the model counts as unpriced: "
        "its runs say their cost leaves its tokens out, and the budget cannot stop its calls."
    )

    @property
    def is_priced(self) -> bool:
        """Someone set a price: either price above 0 (both at 0 is the default, not a price)."""
        return bool(self.input_price_per_mtok or self.output_price_per_mtok)

    # Anthropic bills prompt-cache reads at 0.1× and (5-minute) cache writes at 1.25× the base
    # input price (https://docs.anthropic.com/en/docs/about-claude/pricing); both are reported
    # apart from `input_tokens` in the API's usage.
    CACHE_READ_PRICE_FACTOR = Decimal("0.1")
    CACHE_WRITE_PRICE_FACTOR = Decimal("1.25")

    def cost(
        self, input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0, cache_creation_tokens: int = 0
    ) -> Decimal:
        cached_input = (
            Decimal(cache_read_tokens) * self.CACHE_READ_PRICE_FACTOR
            + Decimal(cache_creation_tokens) * self.CACHE_WRITE_PRICE_FACTOR
        )
        return (
            (Decimal(input_tokens) + cached_input) * self.input_price_per_mtok
            + Decimal(output_tokens) * self.output_price_per_mtok
        ) / Decimal(1_000_000)


class Plan(models.Model):
    """A goal and its DAG of subtasks, validated whole before it is saved."""

    class Source(models.TextChoices):
        PLANNER = "planner"
        FILE = "file"
        MANUAL = "manual"

    goal = models.TextField()
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.FILE)
    source_name = models.CharField(max_length=255, blank=True, help_text="File name or planner model")
    document = models.TextField(blank=True, help_text="The plan document as submitted")
    # SHA-256 of the document and its goal when the plan was saved from a document: the same
    # document submitted again is this plan, not a copy (plans.storage). Empty for a plan that
    # was edited after it was saved (an approver's copy), which no document describes.
    content_hash = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Plan {self.pk}: {self.goal[:60]}"


class Subtask(models.Model):
    class Gate(models.TextChoices):
        NONE = "none"
        BEFORE = "before"
        AFTER = "after"

    class Inputs(models.TextChoices):
        DEFAULT = "", "default (summaries; full outputs for a fan-in)"
        SUMMARIES = "summaries"
        FULL = "full"

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="subtasks")
    key = models.CharField(max_length=100)
    title = models.CharField(max_length=200)
    instructions = models.TextField(blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="subtasks")
    priority = models.IntegerField(default=0)
    gate = models.CharField(max_length=10, choices=Gate.choices, default=Gate.NONE)
    timeout_s = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveIntegerField(null=True, blank=True)
    estimated_input_tokens = models.PositiveIntegerField(default=0)
    estimated_output_tokens = models.PositiveIntegerField(default=0)
    position = models.PositiveIntegerField(default=0)
    # What the subtask receives from its upstreams (orchestrator/engine/context.py): "summaries",
    # "full" outputs, or "" for the default (summaries; full outputs for a fan-in task).
    inputs = models.CharField(max_length=10, choices=Inputs.choices, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["plan", "key"], name="unique_subtask_key_in_plan")]
        ordering = ["plan", "position"]

    def __str__(self) -> str:
        return self.key

    @property
    def effective_timeout_s(self) -> int:
        return self.timeout_s or self.agent.timeout_s

    @property
    def effective_max_retries(self) -> int:
        return self.max_retries if self.max_retries is not None else self.agent.max_retries


class Dependency(models.Model):
    """An edge of the DAG: `downstream` may start only after `upstream`."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="dependencies")
    upstream = models.ForeignKey(Subtask, on_delete=models.CASCADE, related_name="downstream_edges")
    downstream = models.ForeignKey(Subtask, on_delete=models.CASCADE, related_name="upstream_edges")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upstream", "downstream"], name="unique_dependency"),
            models.CheckConstraint(condition=~models.Q(upstream=models.F("downstream")), name="no_self_dependency"),
        ]
        verbose_name_plural = "dependencies"

    def __str__(self) -> str:
        return f"{self.upstream.key} → {self.downstream.key}"


class PlannerAttempt(models.Model):
    """One answer of the planner, kept whole for inspection (orchestrator/plans/planner.py).

    A proposal that needed the repair round trip has two rows (``round`` 1 and 2). ``plan`` is
    set only on the answer that became a saved plan; a rejected answer keeps its ``error``.
    """

    goal = models.TextField()
    model = models.CharField(max_length=100, help_text="The Claude model asked, or 'simulated planner'")
    simulated = models.BooleanField(default=False)
    round = models.PositiveSmallIntegerField(default=1, help_text="2 = the answer to the repair request")
    raw_answer = models.TextField(blank=True, help_text="The answer as received (the tool call's input, or the text)")
    error = models.TextField(blank=True, help_text="Why the answer was rejected, or why the call failed")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    plan = models.ForeignKey(Plan, null=True, blank=True, on_delete=models.SET_NULL, related_name="planner_attempts")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        outcome = f"plan {self.plan_id}" if self.plan_id else ("rejected" if self.error else "pending")
        return f"Planner attempt {self.pk} ({self.model}, round {self.round}): {outcome}"


class Run(models.Model):
    """One execution of a plan."""

    class Status(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
        RUNNING = "running"
        PAUSED = "paused"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        OVER_BUDGET = "over_budget", "Over budget"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.OVER_BUDGET)

    class FailurePolicy(models.TextChoices):
        CONTINUE = "continue"
        FAIL_FAST = "fail_fast"

    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    cap = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1), MaxValueValidator(1000)])
    budget_usd = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal("0.50"))
    failure_policy = models.CharField(max_length=10, choices=FailurePolicy.choices, default=FailurePolicy.CONTINUE)
    launched_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    # Worst-case cost of attempts in flight; admission keeps cost + reserved within budget.
    reserved_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    # The pre-flight estimate the run was launched with (engine/cost_estimates.py), to set against
    # what it cost in the end; estimated again when its plan is edited before approval.
    estimate_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    peak_running = models.PositiveIntegerField(default=0)
    summary = models.TextField(blank=True, help_text="How the run ended, in words")
    # Time in which nothing could start, so that its elapsed time can say how much of it was: when
    # the pause now under way began, the seconds of the pauses that ended, and the seconds it lay
    # ended before a person reopened it (a retry, a skip, a re-run). engine/transitions.py keeps them.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_s = models.FloatField(default=0.0)
    ended_s = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("launch_run", "Can launch runs"),
            ("control_run", "Can pause, resume and cancel runs, and retry or skip tasks"),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def last_event_seq(self) -> int:
        """The number of the run's last event (its EventSequence row; see orchestrator/events.py)."""
        try:
            return self.event_sequence.last_seq
        except EventSequence.DoesNotExist:
            return 0


class EventSequence(models.Model):
    """The numbers of one run's events, kept apart from the run row (orchestrator/events.py): the
    scheduler holds the run row for a whole scheduling step, this row is held only from a
    transaction's last statement to its commit."""

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="event_sequence")
    last_seq = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.run_id}: {self.last_seq}"


class TaskRun(models.Model):
    """A subtask within a run."""

    class State(models.TextChoices):
        PENDING = "pending"
        WAITING_GATE = "waiting_gate"
        READY = "ready"
        # Ready, but held back by the provider's rate budget or backoff (not by a cap).
        THROTTLED = "throttled"
        QUEUED = "queued"
        RUNNING = "running"
        AWAITING_REVIEW = "awaiting_review"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"
        CANCELLED = "cancelled"

    TERMINAL = (State.SUCCEEDED, State.FAILED, State.SKIPPED, State.CANCELLED)
    ACTIVE = (State.QUEUED, State.RUNNING)
    ADMISSIBLE = (State.READY, State.THROTTLED)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tasks")
    subtask = models.ForeignKey(Subtask, on_delete=models.PROTECT, related_name="task_runs")
    # Denormalised from the subtask so that admission counts per agent in one indexed query.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="task_runs")
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    # Why a ready task is not running yet (cap, agent limit, rate limit, backoff), in words.
    wait_reason = models.CharField(max_length=255, blank=True)
    # The same reason as a stable code (orchestrator.engine.waits): what the engine compares and
    # filters on; the sentence above is for people.
    wait_code = models.CharField(max_length=32, blank=True)
    # Longest remaining path to the end of the DAG (estimated seconds): critical path first.
    rank = models.FloatField(default=0.0)
    progress = models.PositiveSmallIntegerField(default=0)
    # When a running attempt last saved its progress and output (every few seconds, and at the
    # end): what the live view polls where the workers' live messages cannot reach it.
    progress_at = models.DateTimeField(null=True, blank=True)
    output = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    error = models.TextField(blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    attempt_count = models.PositiveIntegerField(default=0)
    # What the attempts before the task's last re-run spent (engine/reruns.py): still counted in
    # the totals above and the run's, but not this start's, so the task's row can tell them apart.
    earlier_attempts = models.PositiveIntegerField(default=0)
    earlier_tokens = models.PositiveBigIntegerField(default=0)
    earlier_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    # Failures that were the task's own fault (not a provider-wide 429/529): the retry budget.
    fault_count = models.PositiveIntegerField(default=0)
    # A skip that downstream tasks inherit (upstream failed or was rejected), unlike a person's
    # "skip this task", after which downstream tasks go on without it.
    skip_cascades = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True, help_text="Retry backoff: not admitted before")
    ready_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "subtask"], name="unique_subtask_per_run")]
        indexes = [
            models.Index(fields=["run", "state"]),
            models.Index(fields=["agent", "state"]),
            models.Index(fields=["state", "lease_expires_at"]),
        ]
        ordering = ["run", "subtask__position"]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.subtask.key}"

    @property
    def key(self) -> str:
        return self.subtask.key

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL


class Attempt(models.Model):
    """One try of a TaskRun. Nothing is overwritten: a retry is a new row."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        TIMED_OUT = "timed_out"
        LOST = "lost"  # lease expired: the worker died or stalled
        CANCELLED = "cancelled"
        HANDED_BACK = "handed_back"  # its worker stopped (graceful shutdown); the task was ready again at once

    task_run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    worker = models.CharField(max_length=200, blank=True)
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_creation_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    reserved_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    # What admission took from the provider's per-minute token budgets for this attempt, and the
    # minute window it took them from: corrected to the real usage when the attempt ends, as the
    # provider itself does (DESIGN §9). Null window: nothing was taken.
    reserved_input_tokens = models.PositiveIntegerField(default=0)
    reserved_output_tokens = models.PositiveIntegerField(default=0)
    rate_window = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Set when a result arrived after the attempt lost its lease: kept, never applied.
    late_result_discarded = models.BooleanField(default=False)
    # Exactly what was sent to the provider (engine/attempt_requests.py): provider, model,
    # max_tokens, timeout, system prompt and the prompt with its upstream summaries.
    request = models.JSONField(default=dict, blank=True)
    # The output this attempt produced, kept here when its task is re-run (engine/reruns.py) so
    # that a re-run never loses an earlier answer; the task's current output is on the TaskRun.
    output = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task_run", "number"], name="unique_attempt_number")]
        ordering = ["task_run", "number"]
        # The requests a provider accepted in the last minute, counted after its 429 (adaptive.py).
        indexes = [models.Index(fields=["started_at"], name="attempt_started_at")]

    def __str__(self) -> str:
        return f"{self.task_run} #{self.number}"


class Checkpoint(models.Model):
    """A human decision point: the plan, a gate before a subtask, a review after it, or one call
    of a tool granted with approval (engine/tool_approvals.py)."""

    class Kind(models.TextChoices):
        # Named as the pages name them: "Gate checkpoint 7 closed", not "Before checkpoint 7".
        PLAN = "plan"
        BEFORE = "before", "Gate"
        AFTER = "after", "Review"
        TOOL = "tool", "Tool call"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        # Nobody decided: the run stopped, the task was skipped or the attempt ended first
        # (engine/undecided.py); the comment says why.
        CLOSED = "closed", "Closed without a decision"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    task_run = models.ForeignKey(TaskRun, null=True, blank=True, on_delete=models.CASCADE, related_name="checkpoints")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # When it opened, the last time: a retried or re-run task's gate or review opens again
    # (scheduler.open_gate) and waits from then; each opening is a `checkpoint.created` event.
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # Who decided as the audit log names them: the user's name, or `cli:<os user>` for a decision
    # from the command line, which acts as no user ("" before this was kept: see `decider`).
    decided_by_name = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)
    # Plan checkpoints: the version (plans.plan_version) of the plan under review, moved on by
    # every edit; once decided, the version that was approved or rejected.
    plan_version = models.CharField(max_length=64, blank=True, default="")
    # Tool checkpoints: the attempt whose call waits, the model's id of the call, and what it asks
    # (agent, server, tool, the model's name of it, arguments capped: agent_steps.capped_arguments).
    attempt = models.ForeignKey(
        "Attempt", null=True, blank=True, on_delete=models.CASCADE, related_name="tool_checkpoints"
    )
    call_id = models.CharField(max_length=128, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            # A task has one plan, gate or review checkpoint of each kind; tool checkpoints are one
            # per call of an attempt (a task may ask approval for many calls).
            models.UniqueConstraint(
                fields=["task_run", "kind"],
                condition=~models.Q(kind="tool"),
                name="unique_checkpoint_per_task_kind",
            ),
            models.UniqueConstraint(
                fields=["attempt", "call_id"],
                condition=models.Q(kind="tool"),
                name="unique_tool_checkpoint_per_call",
            ),
        ]
        ordering = ["created_at"]
        permissions = [("decide_checkpoint", "Can approve or reject checkpoints")]

    def __str__(self) -> str:
        target = self.task_run.key if self.task_run else "plan"
        return f"{self.get_kind_display()} checkpoint {self.pk} ({target})"

    @property
    def outcome(self) -> str:
        """What became of it, in words: "approved", "pending", or "closed without a decision: the
        run was cancelled" (a closed checkpoint's comment is why, not a person's)."""
        said = self.get_status_display().lower()
        if self.status == self.Status.CLOSED and self.comment:
            return f"{said}: {self.comment}"
        return said

    @property
    def decider(self) -> str:
        """Who decided, "" while pending: the name kept with the decision, else its user's name."""
        if self.decided_by_name:
            return self.decided_by_name
        return self.decided_by.get_username() if self.decided_by_id and self.decided_by else ""


class AppendOnlyError(Exception):
    """Raised on any attempt to change or delete an audit-log row."""


class EventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("Events are append-only: they cannot be updated.")

    def delete(self):
        raise AppendOnlyError("Events are append-only: they cannot be deleted.")


class Event(models.Model):
    """The append-only log of everything that happens: audit trail and source of the live view."""

    class ActorKind(models.TextChoices):
        USER = "user"
        AGENT = "agent"
        SYSTEM = "system"

    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    # Per-run sequence number (1, 2, 3 ...) so a live client sees a gap at once.
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    type = models.CharField(max_length=64)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices, default=ActorKind.SYSTEM)
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, blank=True)
    task_run = models.ForeignKey(TaskRun, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    message = models.CharField(max_length=500, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_event_seq_per_run")]
        indexes = [models.Index(fields=["type"])]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"#{self.seq or self.pk} {self.type}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError("Events are append-only: they cannot be updated.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Events are append-only: they cannot be deleted.")


class RateCounter(models.Model):
    """A counter of the shared rate limiter when it lives in the database (embedded default)."""

    key = models.CharField(max_length=255, unique=True)
    count = models.BigIntegerField(default=0)
    expires_at = models.FloatField(help_text="Unix time at which the window resets")

    def __str__(self) -> str:
        return self.key


class ApiToken(models.Model):
    """A person's token for the JSON API (scripts, CI). Only its SHA-256 hash is stored.

    The token itself is shown once, when it is created (orchestrator/governance/tokens.py); `prefix` is its
    first characters, kept so that people can tell their tokens apart. A revoked token stays,
    with `revoked_at`, as a record of what was issued.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'CI pipeline'")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


# --- Tools (DESIGN §10) ----------------------------------------------------------------------------


class ToolServer(models.Model):
    """An MCP tool server in the registry: how to reach it and the tools it offers.

    stdio: ``command`` and ``args`` start it as a child process that receives only the
    environment declared here (``env_sealed``: NAME=VALUE pairs encrypted at rest, see
    orchestrator/governance/secrets.py; ``env_names`` lists the names, which are all that is ever
    shown). Streamable HTTP: ``url``, and ``headers`` as {header name: environment variable name}:
    the values are read from the worker's environment when connecting, never stored.
    Changed only through orchestrator/governance/tool_registry.py, which audits every change.
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio"
        HTTP = "http", "streamable HTTP"

    class Status(models.TextChoices):
        READY = "ready"  # its tools were discovered at the last registration or refresh
        UNREACHABLE = "unreachable"  # the last refresh could not start it or speak MCP with it

    name = models.SlugField(max_length=64, unique=True)
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env_names = models.JSONField(default=list, blank=True, help_text="Names of the declared environment variables")
    env_sealed = models.TextField(blank=True, editable=False, help_text="The declared environment, encrypted")
    url = models.URLField(max_length=500, blank=True)
    headers = models.JSONField(default=dict, blank=True, help_text="{header: environment variable holding its value}")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.READY)
    status_message = models.CharField(max_length=500, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def endpoint(self) -> str:
        """What it runs or where it listens, without secrets: the command line (quoted as a shell
        would read it back: `python -c 'import sys'`), or the URL."""
        if self.transport == self.Transport.HTTP:
            return self.url
        return shlex.join([self.command, *(str(arg) for arg in self.args or [])])


class Tool(models.Model):
    """One tool a server offered when it was last discovered (MCP tools/list)."""

    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="unique_tool_per_server")]
        ordering = ["server", "name"]

    def __str__(self) -> str:
        return f"{self.server.name}:{self.name}"


class ToolGrant(models.Model):
    """An agent may use a whole server (``tool`` empty) or one of its tools.

    A grant names the tool rather than pointing at the Tool row, so that a refresh that no
    longer finds a tool does not silently delete who was allowed to use it. With
    ``requires_approval`` each call waits for a person's decision.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tool_grants")
    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="grants")
    tool = models.CharField(max_length=128, blank=True, help_text="Empty: every tool of the server")
    requires_approval = models.BooleanField(default=False)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    granted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "server", "tool"], name="unique_tool_grant")]
        ordering = ["agent", "server", "tool"]

    def __str__(self) -> str:
        return f"{self.agent.name} → {self.target}"

    @property
    def target(self) -> str:
        """SERVER or SERVER:TOOL, as the commands write it."""
        return f"{self.server.name}:{self.tool}" if self.tool else self.server.name
