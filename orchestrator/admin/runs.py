"""Runs, task runs and attempts in the admin: read-mostly.

Nobody edits history here; the run and task actions call the engine (orchestrator/engine/runs.py)
under the same permissions as the dashboard and the API.
"""

from __future__ import annotations

from django.contrib import admin

from orchestrator.admin.base import ReadOnlyAdmin, ReadOnlyInline, refusal_text, report_action
from orchestrator.admin.checkpoints import CheckpointInline
from orchestrator.engine import runs
from orchestrator.models import Attempt, Run, TaskRun


class ControlActions:
    """Engine actions on runs and tasks need orchestrator.control_run, as everywhere else."""

    def has_control_permission(self, request):
        return request.user.has_perm("orchestrator.control_run")

    def names(self, obj) -> tuple[str, str]:
        """How the messages name `obj`: in the list of what was done, and at the start of a refusal."""
        raise NotImplementedError

    def _apply(self, request, objects, action, verb: str) -> None:
        """Run the engine's `action` on each object; one message for what was done, one per refusal."""
        done, refused = [], []
        for obj in objects:
            named, refusal = self.names(obj)
            try:
                action(obj, user=request.user)
                done.append(named)
            except runs.ActionError as error:
                refused.append(refusal_text(refusal, error))
        report_action(self, request, done, refused, verb)


class TaskRunInline(ReadOnlyInline):
    model = TaskRun
    fields = ["subtask", "agent", "state", "progress", "attempt_count", "cost_usd", "error"]


@admin.register(Run)
class RunAdmin(ControlActions, ReadOnlyAdmin):
    list_display = ["pk", "plan", "status", "cap", "budget_usd", "cost_usd", "launched_by", "started_at", "finished_at"]
    list_filter = ["status", "failure_policy"]
    list_select_related = ["plan", "launched_by"]
    inlines = [TaskRunInline, CheckpointInline]
    actions = ["pause", "resume", "cancel"]

    def names(self, obj) -> tuple[str, str]:
        return f"run {obj.pk}", f"Run {obj.pk}"

    @admin.action(description="Pause selected runs", permissions=["control"])
    def pause(self, request, queryset):
        self._apply(request, queryset, runs.pause, "Paused")

    @admin.action(description="Resume selected runs", permissions=["control"])
    def resume(self, request, queryset):
        self._apply(request, queryset, runs.resume, "Resumed")

    @admin.action(description="Cancel selected runs", permissions=["control"])
    def cancel(self, request, queryset):
        self._apply(request, queryset, runs.cancel, "Cancelled")


class AttemptInline(ReadOnlyInline):
    model = Attempt
    show_change_link = False
    fields = [
        "number",
        "state",
        "worker",
        "started_at",
        "finished_at",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "error",
    ]


@admin.register(TaskRun)
class TaskRunAdmin(ControlActions, ReadOnlyAdmin):
    list_display = ["pk", "run", "subtask", "agent", "state", "progress", "attempt_count", "cost_usd"]
    list_filter = ["state", "agent"]
    list_select_related = ["run", "subtask", "agent"]
    inlines = [AttemptInline]
    actions = ["retry", "skip"]

    def names(self, obj) -> tuple[str, str]:
        return f"{obj.key} (run {obj.run_id})", f"Task {obj.key} of run {obj.run_id}"

    def _apply(self, request, queryset, action, verb: str) -> None:
        super()._apply(request, queryset.select_related("run", "subtask"), action, verb)

    @admin.action(description="Retry selected tasks", permissions=["control"])
    def retry(self, request, queryset):
        self._apply(request, queryset, runs.retry_task, "Retried")

    @admin.action(description="Skip selected tasks (downstream tasks go on without them)", permissions=["control"])
    def skip(self, request, queryset):
        self._apply(request, queryset, runs.skip_task, "Skipped")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["pk", "task_run", "number", "state", "worker", "started_at", "finished_at", "cost_usd"]
    list_filter = ["state"]
    list_select_related = ["task_run__subtask"]
