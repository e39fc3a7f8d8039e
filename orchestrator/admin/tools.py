"""Tool servers and tool grants in the admin (DESIGN §10).

A server is added or changed only once it has listed its tools over MCP; its environment's values
are never shown (names only, the form never renders them back); every change, refresh, grant and
revocation goes through orchestrator/governance/tool_registry.py, which writes the Event.
"""

from __future__ import annotations

import shlex

from django import forms
from django.contrib import admin, messages

from orchestrator.admin.base import AuditedAdmin, ReadOnlyAdmin, ReadOnlyInline, report_action
from orchestrator.governance import grant_wording, secrets, tool_registry
from orchestrator.models import Agent, Tool, ToolGrant, ToolServer


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
        existing = self.instance if self.instance.pk else None
        command: list[str] = []
        env: dict[str, str] | None = None
        headers: dict[str, str] = {}
        # Each box's problems are named under that box, every box at once.
        try:
            command = tool_registry.split_command(data.get("command_line") or "")
        except tool_registry.ToolRegistryError as error:
            self.add_error("command_line", error.sentence)
        try:
            if _lines(data.get("environment")) or existing is None or data.get("clear_environment"):
                env = tool_registry.parse_env((data.get("environment") or "").splitlines(), lines=True)
        except tool_registry.ToolRegistryError as error:
            self.add_error("environment", error.sentence)
        try:
            headers = tool_registry.parse_headers((data.get("header_lines") or "").splitlines(), lines=True)
        except tool_registry.ToolRegistryError as error:
            self.add_error("header_lines", error.sentence)
        if self.errors:
            return data
        try:
            self.checked = tool_registry.candidate(
                data.get("name") or (existing.name if existing else ""),
                command=command,
                env=env,
                url=data.get("url") or "",
                headers=headers,
                existing=existing,
            )
        except tool_registry.ToolRegistryError as error:
            raise forms.ValidationError(error.sentence) from None
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
                refused.append(error.sentence)
        report_action(self, request, done, refused, "Refreshed")


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
        self._revoke(request, obj)

    def delete_queryset(self, request, queryset):
        for grant in queryset.select_related("agent", "server"):
            self._revoke(request, grant)

    def _revoke(self, request, grant: ToolGrant) -> None:
        """Revoke, and say what the agent still holds of it (a tool's own grant, gone, leaves its
        server's grant deciding: see grant_wording.still_granted)."""
        agent, target = grant.agent, grant.target
        if left := grant_wording.still_granted(tool_registry.revoke(agent, target, user=request.user)):
            self.message_user(request, f"{agent.name} → {target} revoked. {left}", messages.WARNING)
