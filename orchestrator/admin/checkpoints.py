"""Checkpoints in the admin: read-only but for approving, which calls the engine
(orchestrator/engine/runs.py) under the same permission as the dashboard and the API.
"""

from __future__ import annotations

from django.contrib import admin

from orchestrator.admin.base import ReadOnlyAdmin, ReadOnlyInline, refusal_text, report_action
from orchestrator.engine import runs
from orchestrator.models import Checkpoint


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["kind", "task_run", "status", "decided_by", "decided_at", "comment"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    """Approving is an action here; rejecting needs a comment, so it is done in the dashboard or API."""

    list_display = ["pk", "run", "task_run", "kind", "outcome", "decider", "decided_at", "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["run", "task_run__subtask", "decided_by"]
    actions = ["approve"]

    @admin.display(description="Status", ordering="status")
    def outcome(self, checkpoint: Checkpoint) -> str:
        """ "Closed without a decision: the run was cancelled", not a bare status with no decider."""
        return checkpoint.outcome[:1].upper() + checkpoint.outcome[1:]

    def has_decide_permission(self, request):
        return request.user.has_perm("orchestrator.decide_checkpoint")

    @admin.action(description="Approve selected checkpoints", permissions=["decide"])
    def approve(self, request, queryset):
        done, refused = [], []
        for checkpoint in queryset:
            try:
                runs.decide(checkpoint, approve=True, user=request.user)
                done.append(f"checkpoint {checkpoint.pk}")
            except runs.ActionError as error:
                refused.append(refusal_text(f"Checkpoint {checkpoint.pk}", error))
        report_action(self, request, done, refused, "Approved")
