"""What every admin page of the governance console shares.

A refused page or form (403) is written to the audit log (AuditedAdmin), as everywhere else;
history (ReadOnlyAdmin, ReadOnlyInline) is written by the engine only, never edited here.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied

from orchestrator.governance import audit


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


def refusal_text(subject: str, error: Exception) -> str:
    """A refusal that names its object once. `subject` is how the admin names it ("Run 3", "Task
    scope of run 3"); an engine message that starts with the object's first two words ("run 3 is
    paused: …", "task scope already ended …") goes on from the subject ("Task scope of run 3
    already ended (succeeded)"), any other comes after it ("Checkpoint 5: separation of duties: …")."""
    message = str(error)
    lead = " ".join(subject.split()[:2])
    if message.lower().startswith(f"{lead.lower()} "):
        return subject + message[len(lead) :]
    return f"{subject}: {message}"


def report_action(modeladmin, request, done: list[str], refused: list[str], verb: str) -> None:
    """One message for what an action did and one per refusal, each naming the object."""
    if done:
        modeladmin.message_user(request, f"{verb}: {', '.join(done)}.", messages.SUCCESS)
    for reason in refused:
        modeladmin.message_user(request, reason, messages.WARNING)
