"""API tokens in the admin: issued here (shown once) or by `manage.py create_api_token`;
revocable, never deleted or edited.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import reverse

from orchestrator.admin.base import AuditedAdmin
from orchestrator.governance import tokens
from orchestrator.models import ApiToken


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
