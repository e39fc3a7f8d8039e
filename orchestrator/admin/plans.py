"""Plans and the planner's answers in the admin: read-only, nobody edits history here."""

from __future__ import annotations

from django.contrib import admin

from orchestrator.admin.base import ReadOnlyAdmin, ReadOnlyInline
from orchestrator.models import Dependency, Plan, PlannerAttempt, Subtask


class SubtaskInline(ReadOnlyInline):
    model = Subtask
    show_change_link = False
    fields = [
        "key",
        "title",
        "agent",
        "gate",
        "priority",
        "timeout_s",
        "max_retries",
        "estimated_input_tokens",
        "estimated_output_tokens",
    ]


class DependencyInline(ReadOnlyInline):
    model = Dependency
    show_change_link = False
    fk_name = "plan"
    fields = ["upstream", "downstream"]


@admin.register(Plan)
class PlanAdmin(ReadOnlyAdmin):
    """Plans are validated whole before they are saved (plans.save_plan): no piecemeal edits here."""

    list_display = ["pk", "goal", "source", "source_name", "created_by", "created_at"]
    list_filter = ["source"]
    search_fields = ["goal", "source_name"]
    inlines = [SubtaskInline, DependencyInline]


@admin.register(PlannerAttempt)
class PlannerAttemptAdmin(ReadOnlyAdmin):
    """The planner's answers, as received: what Claude (or the simulated planner) proposed and why
    an answer was rejected."""

    list_display = ["pk", "created_at", "model", "simulated", "round", "plan", "short_error", "created_by"]
    list_filter = ["simulated", "model"]
    search_fields = ["goal", "error", "raw_answer"]
    list_select_related = ["plan", "created_by"]
    fields = (
        "goal",
        "model",
        "simulated",
        "round",
        "plan",
        "error",
        "raw_answer",
        "input_tokens",
        "output_tokens",
        "created_by",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="error")
    def short_error(self, obj: PlannerAttempt) -> str:
        return obj.error.splitlines()[0][:120] if obj.error else ""
