"""Runs: one execution of a plan, its tasks, their attempts, and the checkpoints where people decide."""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from orchestrator.models.agents import Agent
from orchestrator.models.plans import Plan, Subtask
from orchestrator.wording import counted


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
    # Bound on a start's attempts whatever their cause, so a provider that never recovers cannot
    # loop forever (engine/retries.py).
    MAX_ATTEMPTS = 50

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
    # Attempts of this start lost with their worker (engine/reaper.py): not the task's fault, so they
    # spend no retry, but bounded apart (GLASSBOX_MAX_LOST_ATTEMPTS, `no_retry_after_loss`).
    lost_count = models.PositiveIntegerField(default=0)
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

    @classmethod
    def no_retry_after_loss(cls, lost_before: int, attempts: int) -> NoRetry | None:
        """Why a task whose running attempt is lost now (its worker killed or silent past its
        lease) fails instead of being retried (None: it is retried). `lost_before`: its start's
        attempts lost before this one (`lost_count`); `attempts`: its start's attempts, this one
        included.

        A lost attempt spends no retry (`max_retries` bounds the task's own failures; a worker's
        death is not one), so only these bounds stop it. The reaper decides by this rule
        (engine/retries.py) and a silent worker's task says it beforehand (readmodels/silence.py):
        the page promises a retry only when one will come."""
        lost = lost_before + 1
        if lost >= settings.GLASSBOX_MAX_LOST_ATTEMPTS:
            return NoRetry(f"{counted(lost, 'attempt')} lost", "the most GLASSBOX_MAX_LOST_ATTEMPTS allows")
        if attempts >= cls.MAX_ATTEMPTS:
            return NoRetry(f"{counted(attempts, 'attempt')} made", "the most a task makes")
        return None


class NoRetry(NamedTuple):
    """Why a lost attempt's task gets no retry: "3 attempts lost" (what a silent worker's task
    says), and the bound that stops it, "the most GLASSBOX_MAX_LOST_ATTEMPTS allows" (what the
    failed task's reason adds)."""

    why: str
    bound: str


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
    # When it opened. A retried or re-run task's gate or review asks again with a new checkpoint
    # (scheduler.open_gate): a decided one is history and is never reopened.
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
            # A task waits on one gate or review of each kind at a time (a retry asks again with a
            # new one, the decided ones kept); tool checkpoints are one per call of an attempt (a
            # task may ask approval for many calls).
            models.UniqueConstraint(
                fields=["task_run", "kind"],
                condition=~models.Q(kind="tool") & models.Q(status="pending"),
                name="unique_pending_checkpoint_per_task_kind",
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
