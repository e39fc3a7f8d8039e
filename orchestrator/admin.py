"""The Django admin as the governance console (DESIGN §1 J6, §6).

- Agent registry and provider limits: editable by agent admins; every save, lifecycle action
  and deletion goes through orchestrator/governance/registry.py, which writes the Event. Agents are never
  deleted (plans and history refer to them): retire them.
- Plans, runs, task runs, attempts and checkpoints: read-mostly. Nobody edits history here; the
  run, task and checkpoint actions call the engine (orchestrator/engine/runs.py) under the same
  permissions as the dashboard and the API.
- The Event audit log: read-only for everyone, superusers included (no add, change or delete),
  filterable by run, agent, actor, type and date, exportable as CSV or JSON Lines (streamed).
- Tool servers and tool grants: a server is added or changed only once it has listed its tools
  over MCP; its environment's values are never shown (names only, the form never renders them
  back); every change, refresh, grant and revocation goes through
  orchestrator/governance/tool_registry.py, which writes the Event.
- API tokens: issued here (shown once) or by `manage.py create_api_token`; revocable, never
  deleted or edited.
- A refused page or form (403) is written to the audit log (AuditedAdmin), as everywhere else.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Iterator

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.db import transaction
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from orchestrator.engine import runs
from orchestrator.governance import audit, audit_export, registry, secrets, tokens, tool_registry
from orchestrator.models import (
    Agent,
    ApiToken,
    Attempt,
    Checkpoint,
    Dependency,
    Event,
    Plan,
    PlannerAttempt,
    ProviderLimit,
    Run,
    Subtask,
    TaskRun,
    Tool,
    ToolGrant,
    ToolServer,
)
from orchestrator.providers.options import option_problems


class AuditedAdmin(admin.ModelAdmin):
    """A refused admin page or form (403) is written to the audit log, like any other denial.

    Someone trying to add, change or delete history here (superusers included) is refused and
    the attempt is on record.
    """

    def _audited(self, perm: str, view, request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except PermissionDenied:
            codename = f"{self.opts.app_label}.{perm}_{self.opts.model_name}"
            audit.record_denial(request.user, codename, action=f"{request.method} {request.path}")
            raise

    def add_view(self, request, *args, **kwargs):
        return self._audited("add", super().add_view, request, *args, **kwargs)

    def change_view(self, request, *args, **kwargs):
        perm = "view" if request.method in ("GET", "HEAD") else "change"
        return self._audited(perm, super().change_view, request, *args, **kwargs)

    def delete_view(self, request, *args, **kwargs):
        return self._audited("delete", super().delete_view, request, *args, **kwargs)

    def changelist_view(self, request, *args, **kwargs):
        return self._audited("view", super().changelist_view, request, *args, **kwargs)

    def history_view(self, request, *args, **kwargs):
        return self._audited("view", super().history_view, request, *args, **kwargs)


class ReadOnlyAdmin(AuditedAdmin):
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

    def has_delete_permission(self, request, obj=None):
        return False


def _report_action(modeladmin, request, done: list[str], refused: list[str], verb: str) -> None:
    """One message for what an action did and one per refusal, each naming the object."""
    if done:
        modeladmin.message_user(request, f"{verb}: {', '.join(done)}.", messages.SUCCESS)
    for reason in refused:
        modeladmin.message_user(request, reason, messages.WARNING)


# --- Agent registry and provider limits ----------------------------------------------------------


class AgentForm(forms.ModelForm):
    """The agent's form: beyond the model's own validators, its provider options are checked
    against the provider's schema, each problem named under the field."""

    class Meta:
        model = Agent
        fields = list(registry.AGENT_FIELDS)

    def clean(self):
        data = super().clean()
        if "provider" in data and "provider_options" in data:
            for problem in option_problems(data["provider"], data["provider_options"]):
                self.add_error("provider_options", problem[:1].upper() + problem[1:] + ".")
        return data


@admin.register(Agent)
class AgentAdmin(AuditedAdmin):
    list_display = [
        "name",
        "role",
        "provider",
        "model",
        "status",
        "max_concurrency",
        "timeout_s",
        "max_retries",
        "owner",
    ]
    list_filter = ["status", "provider"]
    search_fields = ["name", "role", "model"]
    readonly_fields = ["created_at", "updated_at"]
    actions = ["activate", "retire"]
    form = AgentForm

    def has_delete_permission(self, request, obj=None):
        return False  # plans, runs and the audit log refer to agents: retire instead

    def save_model(self, request, obj, form, change):
        registry.save_agent(obj, user=request.user)

    def _set_status(self, request, queryset, status: str, verb: str) -> None:
        changed = [agent.name for agent in queryset if registry.set_status(agent, status, user=request.user)]
        unchanged = queryset.count() - len(changed)
        if changed:
            self.message_user(request, f"{verb}: {', '.join(changed)}.", messages.SUCCESS)
        if unchanged:
            self.message_user(request, f"{unchanged} agent(s) were already {status}.", messages.INFO)

    @admin.action(description="Activate selected agents (they can be scheduled)", permissions=["change"])
    def activate(self, request, queryset):
        self._set_status(request, queryset, Agent.Status.ACTIVE, "Activated")

    @admin.action(description="Retire selected agents (never scheduled again)", permissions=["change"])
    def retire(self, request, queryset):
        self._set_status(request, queryset, Agent.Status.RETIRED, "Retired")


@admin.register(ProviderLimit)
class ProviderLimitAdmin(AuditedAdmin):
    list_display = [
        "provider",
        "model",
        "requests_per_minute",
        "input_tokens_per_minute",
        "output_tokens_per_minute",
        "max_in_flight",
        "effective_in_flight",
        "input_price_per_mtok",
        "output_price_per_mtok",
        "backoff_until",
    ]
    list_filter = ["provider"]
    # Written by the engine (adaptive concurrency, 429 backoff), shown for information.
    readonly_fields = ["effective_in_flight", "successes_since_change", "backoff_until"]

    def save_model(self, request, obj, form, change):
        registry.save_provider_limit(obj, user=request.user)

    def delete_model(self, request, obj):
        registry.delete_provider_limit(obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for limit in queryset:
            registry.delete_provider_limit(limit, user=request.user)


# --- Tool servers and grants (DESIGN §10) ---------------------------------------------------------


class SecretTextarea(forms.Textarea):
    """A textarea that never renders a value: what was typed is not sent back, not even when the
    form is shown again with an error."""

    def format_value(self, value):
        return ""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


class ToolServerForm(forms.ModelForm):
    """A server is saved only once it has listed its tools over MCP (tool_registry.candidate)."""

    command_line = forms.CharField(
        required=False,
        label="Command",
        help_text='stdio: the command and its arguments, e.g. "python -m orchestrator.tools.demo_server".',
    )
    environment = forms.CharField(
        required=False,
        widget=SecretTextarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="stdio: NAME=VALUE, one a line. Stored encrypted and never shown again. On a change, leave it "
        "empty to keep the stored environment.",
    )
    clear_environment = forms.BooleanField(required=False, help_text="On a change: remove the stored environment.")
    url = forms.URLField(required=False, max_length=500, assume_scheme="https", label="URL")
    header_lines = forms.CharField(
        required=False,
        label="Headers",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Streamable HTTP: HEADER=ENVVAR, one a line; the value is read from the worker's environment "
        "variable ENVVAR when connecting, never stored.",
    )

    class Meta:
        model = ToolServer
        fields = ["name", "url"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        server = self.instance
        if server.pk:
            self.fields["command_line"].initial = shlex.join([server.command, *server.args]) if server.command else ""
            self.fields["header_lines"].initial = "\n".join(f"{h}={v}" for h, v in (server.headers or {}).items())

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            command = shlex.split(data.get("command_line") or "")
        except ValueError as error:
            raise forms.ValidationError(f"Command: {error}") from None
        existing = self.instance if self.instance.pk else None
        env: dict[str, str] | None = None
        try:
            if _lines(data.get("environment")) or existing is None or data.get("clear_environment"):
                env = tool_registry.parse_env(_lines(data.get("environment")))
            self.checked = tool_registry.candidate(
                data.get("name") or (existing.name if existing else ""),
                command=command,
                env=env,
                url=data.get("url") or "",
                headers=tool_registry.parse_headers(_lines(data.get("header_lines"))),
                existing=existing,
            )
        except tool_registry.ToolRegistryError as error:
            raise forms.ValidationError(str(error)) from None
        return data


class ToolInline(ReadOnlyInline):
    model = Tool
    show_change_link = False
    fields = ["name", "description", "input_schema"]
    readonly_fields = ["name", "description", "input_schema"]


class ToolGrantInline(ReadOnlyInline):
    model = ToolGrant
    show_change_link = False
    fields = ["agent", "tool", "requires_approval", "granted_by", "granted_at"]
    readonly_fields = ["agent", "tool", "requires_approval", "granted_by", "granted_at"]


@admin.register(ToolServer)
class ToolServerAdmin(AuditedAdmin):
    """Tool servers: added or changed only once they speak MCP; the environment's values are never
    shown (names only); every change, refresh and removal is an event (governance/tool_registry.py)."""

    form = ToolServerForm
    list_display = ["name", "transport", "status", "endpoint", "environment_names", "tool_count", "refreshed_at"]
    list_filter = ["transport", "status"]
    search_fields = ["name", "command", "url"]
    readonly_fields = ["transport", "environment_names", "status", "status_message", "refreshed_at", "created_by"]
    inlines = [ToolInline, ToolGrantInline]
    actions = ["refresh"]

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def get_fields(self, request, obj=None):
        fields = ["name", "command_line", "environment"]
        if obj is not None:
            fields += ["clear_environment", "environment_names"]
        return [*fields, "url", "header_lines", "transport", "status", "status_message", "refreshed_at", "created_by"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "name"] if obj is not None else self.readonly_fields

    @admin.display(description="environment")
    def environment_names(self, obj):
        return secrets.masked(obj.env_names or []) or "-"

    @admin.display(description="tools")
    def tool_count(self, obj):
        return obj.tools.count()

    def save_model(self, request, obj, form, change):
        saved = tool_registry.save(form.checked, user=request.user)
        obj.pk = saved.pk

    def get_deleted_objects(self, objs, request):
        """A server's tools and grants go with it (tool_registry.remove_server records each grant):
        the read-only Tool admin must not make the removal look forbidden."""
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request, obj):
        tool_registry.remove_server(obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for server in queryset:
            tool_registry.remove_server(server, user=request.user)

    @admin.action(description="Refresh the tools of the selected servers", permissions=["change"])
    def refresh(self, request, queryset):
        done, refused = [], []
        for server in queryset:
            try:
                tool_registry.refresh_server(server, user=request.user)
                done.append(server.name)
            except tool_registry.ToolRegistryError as error:
                refused.append(str(error))
        _report_action(self, request, done, refused, "Refreshed")


@admin.register(Tool)
class ToolAdmin(ReadOnlyAdmin):
    """The tools servers listed at their last discovery: changed only by a refresh."""

    list_display = ["name", "server", "description"]
    list_filter = ["server"]
    search_fields = ["name", "description"]
    list_select_related = ["server"]


class ToolGrantForm(forms.ModelForm):
    class Meta:
        model = ToolGrant
        fields = ["agent", "server", "tool", "requires_approval"]

    def clean(self):
        data = super().clean()
        server, tool = data.get("server"), data.get("tool")
        if server is not None and tool and not server.tools.filter(name=tool).exists():
            offered = ", ".join(server.tools.values_list("name", flat=True)) or "none"
            raise forms.ValidationError(f"Tool server {server.name} has no tool {tool!r} (it offers: {offered}).")
        agent = data.get("agent")
        if agent is not None and agent.status == Agent.Status.RETIRED:
            raise forms.ValidationError(f"Agent {agent.name} is retired.")
        return data


@admin.register(ToolGrant)
class ToolGrantAdmin(AuditedAdmin):
    """Who may call which tools; each grant, change and revocation is an event (tool_registry)."""

    form = ToolGrantForm
    list_display = ["agent", "target", "requires_approval", "granted_by", "granted_at"]
    list_filter = ["server", "requires_approval", "agent"]
    list_select_related = ["agent", "server", "granted_by"]

    def get_readonly_fields(self, request, obj=None):
        return ["agent", "server", "tool", "granted_by", "granted_at"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        saved = tool_registry.grant(obj.agent, obj.target, requires_approval=obj.requires_approval, user=request.user)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        tool_registry.revoke(obj.agent, obj.target, user=request.user)

    def delete_queryset(self, request, queryset):
        for grant in queryset.select_related("agent", "server"):
            tool_registry.revoke(grant.agent, grant.target, user=request.user)


# --- Plans ---------------------------------------------------------------------------------------


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


# --- Runs, task runs, attempts, checkpoints (read-mostly) ----------------------------------------


class ControlActions:
    """Engine actions on runs and tasks need orchestrator.control_run, as everywhere else."""

    def has_control_permission(self, request):
        return request.user.has_perm("orchestrator.control_run")


class TaskRunInline(ReadOnlyInline):
    model = TaskRun
    fields = ["subtask", "agent", "state", "progress", "attempt_count", "cost_usd", "error"]


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["kind", "task_run", "status", "decided_by", "decided_at", "comment"]


@admin.register(Run)
class RunAdmin(ControlActions, ReadOnlyAdmin):
    list_display = ["pk", "plan", "status", "cap", "budget_usd", "cost_usd", "launched_by", "started_at", "finished_at"]
    list_filter = ["status", "failure_policy"]
    list_select_related = ["plan", "launched_by"]
    inlines = [TaskRunInline, CheckpointInline]
    actions = ["pause", "resume", "cancel"]

    def _apply(self, request, queryset, action, verb: str) -> None:
        done, refused = [], []
        for run in queryset:
            try:
                action(run, user=request.user)
                done.append(f"run {run.pk}")
            except runs.ActionError as error:
                refused.append(f"Run {run.pk}: {error}")
        _report_action(self, request, done, refused, verb)

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

    def _apply(self, request, queryset, action, verb: str) -> None:
        done, refused = [], []
        for task in queryset.select_related("run", "subtask"):
            try:
                action(task, user=request.user)
                done.append(f"{task.key} (run {task.run_id})")
            except runs.ActionError as error:
                refused.append(f"Task {task.key} of run {task.run_id}: {error}")
        _report_action(self, request, done, refused, verb)

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


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    """Approving is an action here; rejecting needs a comment, so it is done in the dashboard or API."""

    list_display = ["pk", "run", "task_run", "kind", "status", "decided_by", "decided_at", "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["run", "task_run__subtask", "decided_by"]
    actions = ["approve"]

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
                refused.append(f"Checkpoint {checkpoint.pk}: {error}")
        _report_action(self, request, done, refused, "Approved")


# --- The audit log -------------------------------------------------------------------------------


class _ChoiceOrAnyFilter(admin.SimpleListFilter):
    """A filter listing recent values that also accepts any value given in the URL."""

    def choices_from(self, values) -> list[tuple[str, str]]:
        choices = [(str(value), self.label(value)) for value in values]
        current = self.value()
        if current and current not in {value for value, _ in choices}:
            choices.insert(0, (current, self.label(current)))
        return choices

    def label(self, value) -> str:
        return str(value)


class EventRunFilter(_ChoiceOrAnyFilter):
    title = "run"
    parameter_name = "run"

    def lookups(self, request, model_admin):
        return self.choices_from(Run.objects.order_by("-pk").values_list("pk", flat=True)[:25])

    def label(self, value) -> str:
        return f"Run {value}"

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if not value.isdigit():
            raise IncorrectLookupParameters(f"run must be a run id, got {value!r}")
        return queryset.filter(run_id=int(value))


class EventTypeFilter(_ChoiceOrAnyFilter):
    title = "type"
    parameter_name = "type"

    def lookups(self, request, model_admin):
        return self.choices_from(Event.objects.order_by("type").values_list("type", flat=True).distinct()[:200])

    def queryset(self, request, queryset):
        value = self.value()
        return queryset if value is None else queryset.filter(type=value)


class EventActorFilter(_ChoiceOrAnyFilter):
    """Who did it: a user's name, `system`, `anonymous` or `agent:NAME`."""

    title = "actor"
    parameter_name = "actor"

    def lookups(self, request, model_admin):
        # From the (small) user table rather than a scan of the (large) event table.
        people = get_user_model().objects.order_by(get_user_model().USERNAME_FIELD)
        names = list(people.values_list(get_user_model().USERNAME_FIELD, flat=True)[:200])
        return self.choices_from(["system", "anonymous", *names])

    def queryset(self, request, queryset):
        value = self.value()
        return queryset if value is None else queryset.filter(actor_name=value)


EXPORT_FORMATS = ("csv", "jsonl")


def export_response(request, queryset, fmt: str) -> StreamingHttpResponse:
    """Stream events as CSV or JSON Lines: async rows under daphne (ASGI), sync rows under WSGI."""
    content: Iterator[str] | AsyncIterator[str]
    if isinstance(request, ASGIRequest):
        content = audit_export.aiter_export(queryset, fmt)
    else:
        content = audit_export.iter_export(queryset, fmt)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(content, content_type=audit_export.CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="glassbox-audit-{stamp}.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    """Append-only: read-only for everyone, superusers included."""

    list_display = [
        "pk",
        "created_at",
        "run",
        "seq",
        "type",
        "actor_kind",
        "actor_name",
        "agent",
        "task_run",
        "message",
    ]
    list_filter = [
        EventTypeFilter,
        EventRunFilter,
        "agent",  # every agent in the registry (small), not a scan of the events
        EventActorFilter,
        "actor_kind",
        "created_at",
    ]
    list_select_related = ["run", "agent", "task_run__subtask"]
    search_fields = ["message", "actor_name", "type"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    actions = ["export_csv", "export_jsonl"]
    change_list_template = "admin/orchestrator/event/change_list.html"

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_view)
        return [path("export/<str:fmt>/", export, name="orchestrator_event_export"), *super().get_urls()]

    def export_view(self, request, fmt: str):
        """Every event the changelist shows with the same filters and search, as a download."""
        if not self.has_view_permission(request):
            audit.record_denial(request.user, "orchestrator.view_event", action=f"{request.method} {request.path}")
            raise PermissionDenied
        if fmt not in EXPORT_FORMATS:
            return HttpResponseBadRequest(f"Unknown export format {fmt!r}: use csv or jsonl.")
        try:
            queryset = self.get_changelist_instance(request).get_queryset(request)
        except IncorrectLookupParameters as error:
            return HttpResponseBadRequest(f"Cannot export: the filters are not valid ({error}).")
        audit.record_export(request.user, fmt, {key: request.GET[key] for key in request.GET})
        return export_response(request, queryset, fmt)

    def _export_selected(self, request, queryset, fmt: str):
        audit.record_export(request.user, fmt, {"selected": str(queryset.count())})
        return export_response(request, queryset, fmt)

    @admin.action(description="Export selected events as CSV")
    def export_csv(self, request, queryset):
        return self._export_selected(request, queryset, "csv")

    @admin.action(description="Export selected events as JSON Lines")
    def export_jsonl(self, request, queryset):
        return self._export_selected(request, queryset, "jsonl")

    def changelist_view(self, request, extra_context=None):
        query = request.GET.urlencode()
        suffix = f"?{query}" if query else ""
        extra_context = {
            **(extra_context or {}),
            "export_links": [
                (label, reverse("admin:orchestrator_event_export", args=[fmt]) + suffix)
                for fmt, label in (("csv", "Export as CSV"), ("jsonl", "Export as JSON Lines"))
            ],
        }
        return super().changelist_view(request, extra_context)


# --- API tokens ----------------------------------------------------------------------------------


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["user", "name"]

    def clean(self):
        cleaned = super().clean()
        user = cleaned.get("user")
        if user is not None and not user.is_active:
            self.add_error("user", f"{user.get_username()} is inactive: activate the account before issuing a token.")
        return cleaned


class RevokedFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedAdmin):
    """Issue (the token is shown once, on the page after saving), list and revoke API tokens."""

    form = ApiTokenForm
    list_display = ["prefix", "name", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = [RevokedFilter]
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user"]
    actions = ["revoke", "reissue"]
    issued_template = "admin/orchestrator/apitoken/issued.html"

    def get_readonly_fields(self, request, obj=None):
        return ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"] if obj else []

    def has_change_permission(self, request, obj=None):
        return False  # a token is issued and revoked, never edited

    def has_delete_permission(self, request, obj=None):
        return False  # revoked tokens stay as a record of what was issued

    def has_revoke_permission(self, request):
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def save_model(self, request, obj, form, change):
        token, raw = tokens.issue(form.cleaned_data["user"], form.cleaned_data["name"], by=request.user)
        obj.pk, obj.prefix, obj.token_hash, obj.created_at = token.pk, token.prefix, token.token_hash, token.created_at
        request._issued_api_tokens = [(token, raw)]

    def response_add(self, request, obj, post_url_continue=None):
        return self._show_issued(request)

    def _show_issued(self, request):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API token issued",
            "issued": getattr(request, "_issued_api_tokens", []),
            "changelist_url": reverse("admin:orchestrator_apitoken_changelist"),
        }
        response = TemplateResponse(request, self.issued_template, context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        revoked = [token.prefix for token in queryset.select_related("user") if tokens.revoke(token, by=request.user)]
        if revoked:
            self.message_user(request, f"Revoked: {', '.join(revoked)}.", messages.SUCCESS)
        else:
            self.message_user(request, "The selected tokens were already revoked.", messages.INFO)

    @admin.action(description="Replace selected tokens (revoke each, issue a new one shown once)", permissions=["add"])
    def reissue(self, request, queryset):
        issued = []
        for old in queryset.select_related("user"):
            try:
                with transaction.atomic():
                    token, raw = tokens.issue(old.user, old.name, by=request.user)
                    tokens.revoke(old, by=request.user)
            except tokens.TokenError as error:
                self.message_user(request, f"Token {old.prefix}: {error}", messages.WARNING)
                continue
            issued.append((token, raw))
        if not issued:
            return None
        request._issued_api_tokens = issued
        return self._show_issued(request)
