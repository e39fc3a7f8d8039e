"""The Event audit log in the admin.

Read-only for everyone, superusers included (no add, change or delete), filterable by run, agent,
actor, type and date, exportable as CSV or JSON Lines (streamed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.urls import path, reverse
from django.utils import timezone

from orchestrator import wording
from orchestrator.admin.base import ReadOnlyAdmin
from orchestrator.governance import audit, audit_export
from orchestrator.models import Event, Run
from orchestrator.readmodels.log import describe_event


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

    # What a reader of the log needs, narrow enough to be read whole at 1280 px: the actor's name
    # says its kind ("agent:researcher"), and an agent acts as itself (the kind and the agent are
    # filters); the task by its key within the run; the message as the run page's log words it.
    list_display = ["time", "run", "seq", "type", "actor_name", "task", "said"]
    list_filter = [
        EventTypeFilter,
        EventRunFilter,
        "agent",  # every agent in the registry (small), not a scan of the events
        EventActorFilter,
        "actor_kind",
        "created_at",
    ]
    list_select_related = ["run", "agent", "task_run__subtask"]
    readonly_fields = ["time"]  # its own page says when, as the list does
    ordering = ["-id"]  # newest first, as a log is read; the exports stay in the order of the log
    search_fields = ["message", "actor_name", "type"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    actions = ["export_csv", "export_jsonl"]
    change_list_template = "admin/orchestrator/event/change_list.html"

    @admin.display(description="time", ordering="created_at")
    def time(self, event: Event) -> str:
        """When it happened to the second, in UTC and labelled so ("2026-11-28 10:31:07 UTC"): an
        audit log is read for the order of things within a minute, where Django's own format
        ("Nov. 28, 2026, 10:31 a.m.") gives none."""
        return wording.moment(event.created_at)

    @admin.display(description="task", ordering="task_run__subtask__key")
    def task(self, event: Event) -> str:
        """The task's key ("scope"): the run is in its own column."""
        return event.task_run.subtask.key if event.task_run else ""

    @admin.display(description="message")
    def said(self, event: Event) -> str:
        """The event as the run page's log says it: its message, or what its payload tells ("attempt 1
        · output tokens 272 · $0.0041" for a task that succeeded), where the list showed "-"."""
        return describe_event(event)

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
