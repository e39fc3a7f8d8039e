"""Plans: a goal and its DAG of subtasks and dependencies, and the planner's answers."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from orchestrator.models.agents import Agent


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
    # The plan this one is a copy of, made for one run whose plan an approver edited before
    # approving it (engine/plan_edits.own_plan): each page links the other, so a plan's history
    # of runs includes the run that ran it edited.
    copied_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="copies",
        editable=False,
        help_text="The plan this one was copied from, to be edited for a run",
    )

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
