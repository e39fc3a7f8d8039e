"""Saved plans and their history: the plans list, one plan's page with every run of it side by
side (status, duration, cost against the estimate), its DAG, and its document.

Launching happens where it always does: "Launch" opens the New-run page with the plan chosen;
"Launch again" on a run page repeats that run's settings (views/run.py).
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import Count, Max
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from orchestrator.engine import preflight
from orchestrator.engine.run_settings import RunSettings
from orchestrator.models import Plan

from ..formatting import format_duration
from ..permissions import VIEW_RUN, permission_required
from .runs import run_rows, runs_queryset

PLANS_PER_PAGE = 50


@require_GET
@permission_required(VIEW_RUN)
def plans_list(request):
    plans = Plan.objects.select_related("created_by").annotate(
        n_runs=Count("runs", distinct=True),
        n_subtasks=Count("subtasks", distinct=True),
        last_run=Max("runs__created_at"),
    )
    page = Paginator(plans.order_by("-created_at", "-pk"), PLANS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "dashboard/plans.html", {"page": page})


@require_GET
@permission_required(VIEW_RUN)
def plan_detail(request, plan_id: int):
    plan = get_object_or_404(Plan.objects.select_related("created_by"), pk=plan_id)
    defaults = RunSettings.defaults()
    checked = preflight.check_saved_plan(plan, cap=defaults.cap, budget_usd=defaults.budget_usd)
    rows = run_rows(runs_queryset().filter(plan=plan))
    context = {
        "plan": plan,
        "rows": rows,
        "copies": list(plan.copies.order_by("pk").prefetch_related("runs")),
        "preflight": checked,
        "predicted": format_duration(checked.predicted_duration_s) if checked.ok else "",
        "duration_note": checked.duration_note("the default cap") if checked.ok else "",
    }
    return render(request, "dashboard/plan_detail.html", context)


@require_GET
@permission_required(VIEW_RUN)
def plan_document(request, plan_id: int):
    """The plan's document as it was submitted (YAML or JSON), as plain text."""
    plan = get_object_or_404(Plan, pk=plan_id)
    if not plan.document.strip():
        return HttpResponse(
            f"Plan {plan.pk} was not saved from a document.\n", content_type="text/plain; charset=utf-8"
        )
    suffix = "json" if plan.document.lstrip().startswith(("{", "[")) else "yaml"
    response = HttpResponse(plan.document, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="plan-{plan.pk}.{suffix}"'
    return response
