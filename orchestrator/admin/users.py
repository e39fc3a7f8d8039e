"""Logins and roles in the admin: Django's own pages, each change written to the audit log.

Who added a login, made it staff or a superuser, gave it a role or a permission, changed its
password or deleted it; who created a role or gave it a permission (orchestrator/governance/
accounts.py writes the events, in the same transaction as the change). The standing before a
change is read from the database when the form is saved, the standing after once its roles and
permissions are saved too.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import transaction

from orchestrator.admin.base import AuditedAdmin
from orchestrator.governance import accounts

admin.site.unregister(User)
admin.site.unregister(Group)

# The standing before the change, from `save_model` to `save_related` of the same request.
BEFORE = "_glassbox_standing_before"


class AuditedChanges(AuditedAdmin):
    """Adds, changes and deletions of what `kept` describes, each an event."""

    kept: accounts.Kept

    def save_model(self, request, obj, form, change):
        before = self.kept.standing(type(obj).objects.get(pk=obj.pk)) if change else None
        setattr(request, BEFORE, before)
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        self.kept.saved(form.instance, getattr(request, BEFORE, None), user=request.user)

    def delete_model(self, request, obj):
        with transaction.atomic():
            self.kept.deleted(obj, user=request.user)
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset:
                self.kept.deleted(obj, user=request.user)
            super().delete_queryset(request, queryset)


@admin.register(User)
class AuditedUserAdmin(AuditedChanges, UserAdmin):
    kept = accounts.LOGINS

    def user_change_password(self, request, id, form_url=""):
        # A refusal (no change permission on that login) is on record like any other page's:
        # outside the transaction, which a refusal rolls back.
        return self._audited("change", self._change_password, request, id, form_url)

    def _change_password(self, request, id, form_url=""):
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:  # saved: the form redirects
                accounts.record_password_changed(User.objects.get(pk=unquote(id)), user=request.user)
        return response


@admin.register(Group)
class AuditedGroupAdmin(AuditedChanges, GroupAdmin):
    kept = accounts.ROLES
