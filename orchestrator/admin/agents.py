"""The agent registry and provider limits in the admin.

Editable by agent admins; every save, lifecycle action and deletion goes through
orchestrator/governance/registry.py, which writes the Event. Agents are never deleted (plans and
history refer to them): retire them.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from orchestrator.admin.base import AuditedAdmin
from orchestrator.governance import registry
from orchestrator.models import Agent, ProviderLimit
from orchestrator.providers.options import option_problems


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


class ProviderLimitForm(forms.ModelForm):
    """A provider limit's form: every bad value is named under its field at once (the model's
    validators); a negative limit says what a limit of 0 says, to leave it blank for no limit."""

    class Meta:
        model = ProviderLimit
        fields = list(registry.LIMIT_FIELDS)
        help_texts = {field: ProviderLimit.UNPRICED_HELP for field in ("input_price_per_mtok", "output_price_per_mtok")}
        error_messages = {
            field: {"min_value": ProviderLimit.NO_ZERO_LIMIT} for field in ProviderLimit.CONFIGURED_LIMITS
        }


@admin.register(ProviderLimit)
class ProviderLimitAdmin(AuditedAdmin):
    form = ProviderLimitForm
    list_display = [
        "provider",
        "model",
        "requests_per_minute",
        "learned_requests_per_minute",
        "input_tokens_per_minute",
        "output_tokens_per_minute",
        "max_in_flight",
        "effective_in_flight",
        "input_price_per_mtok",
        "output_price_per_mtok",
        "backoff_until",
    ]
    list_filter = ["provider"]
    # Written by the engine (adaptive concurrency, 429 backoff, learned request rate), shown for information.
    readonly_fields = [
        "effective_in_flight",
        "successes_since_change",
        "backoff_until",
        "learned_requests_per_minute",
        "learned_at",
    ]

    def save_model(self, request, obj, form, change):
        registry.save_provider_limit(obj, user=request.user)

    def delete_model(self, request, obj):
        registry.delete_provider_limit(obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for limit in queryset:
            registry.delete_provider_limit(limit, user=request.user)
