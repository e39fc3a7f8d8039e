"""The event log: append-only rows, guarded against change and deletion (written by
orchestrator/events.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from orchestrator.models.agents import Agent
from orchestrator.models.runs import Run, TaskRun


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
