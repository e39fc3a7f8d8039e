"""Admin for governance data. History (runs, task runs, attempts, events) is read-only."""

from django.contrib import admin

from .models import Agent, Attempt, Checkpoint, Dependency, Event, Plan, ProviderLimit, Run, Subtask, TaskRun


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by the engine only: nobody adds, changes or deletes it here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "provider", "model", "status", "max_concurrency", "timeout_s", "max_retries"]
    list_filter = ["status", "provider"]
    search_fields = ["name", "role"]


@admin.register(ProviderLimit)
class ProviderLimitAdmin(admin.ModelAdmin):
    list_display = [
        "provider", "model", "requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute",
        "max_in_flight", "effective_in_flight", "input_price_per_mtok", "output_price_per_mtok", "backoff_until",
    ]
    list_filter = ["provider"]


class SubtaskInline(admin.TabularInline):
    model = Subtask
    extra = 0
    fields = ["key", "title", "agent", "gate", "priority", "timeout_s", "max_retries"]


class DependencyInline(admin.TabularInline):
    model = Dependency
    extra = 0
    fk_name = "plan"
    raw_id_fields = ["upstream", "downstream"]


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ["pk", "goal", "source", "source_name", "created_by", "created_at"]
    list_filter = ["source"]
    search_fields = ["goal", "source_name"]
    inlines = [SubtaskInline, DependencyInline]


class TaskRunInline(ReadOnlyInline):
    model = TaskRun
    fields = ["subtask", "agent", "state", "progress", "attempt_count", "cost_usd", "error"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["pk", "plan", "status", "cap", "budget_usd", "cost_usd", "launched_by", "started_at", "finished_at"]
    list_filter = ["status", "failure_policy"]
    inlines = [TaskRunInline]


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fields = ["number", "state", "worker", "started_at", "finished_at", "input_tokens", "output_tokens", "cost_usd", "error"]


@admin.register(TaskRun)
class TaskRunAdmin(ReadOnlyAdmin):
    list_display = ["pk", "run", "subtask", "agent", "state", "progress", "attempt_count", "cost_usd"]
    list_filter = ["state", "agent"]
    inlines = [AttemptInline]


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["pk", "task_run", "number", "state", "worker", "started_at", "finished_at", "cost_usd"]
    list_filter = ["state"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["pk", "run", "task_run", "kind", "status", "decided_by", "decided_at", "created_at"]
    list_filter = ["kind", "status"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["pk", "created_at", "run", "seq", "type", "actor_kind", "actor_name", "task_run", "message"]
    list_filter = ["type", "actor_kind", "created_at"]
    search_fields = ["message", "actor_name", "type"]
    date_hierarchy = "created_at"
