"""New run: goal, plan source and settings → preflight (validation, DAG, cost, duration) → Launch.

Nothing is saved before Launch. The checked plan waits in the cache as a *draft* (the document
text, or the id of a saved plan) under a random token and the user's id, for DRAFT_TTL_S; the
preflight page recomputes everything from it on each view, so a retired agent or a changed price
shows up before the launch, and Launch checks everything again.
"""

from __future__ import annotations

import importlib
import secrets

from django.contrib import messages
from django.core.cache import cache
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator import plans, wording
from orchestrator.engine import feedback, preflight, runs
from orchestrator.engine.launching import launch_document
from orchestrator.engine.run_settings import RunSettings
from orchestrator.models import Plan
from orchestrator.plans import PlanError, PlanValidationError

from ..formatting import format_duration
from ..forms import (
    DOCUMENT_SOURCES,
    SOURCE_FILE,
    SOURCE_PLANNER,
    SOURCE_SAVED,
    SOURCE_TEXT,
    NewRunForm,
    RunSettingsForm,
)
from ..permissions import LAUNCH_RUN, permission_required
from .runs import run_url

DRAFT_TTL_S = 3600
LAUNCH_LOCK_S = 120


# --- Drafts ----------------------------------------------------------------------------------------


def _draft_key(user, token: str) -> str:
    return f"glassbox:new-run:{user.pk}:{token}"


def _save_draft(user, token: str, draft: dict) -> None:
    cache.set(_draft_key(user, token), draft, DRAFT_TTL_S)


def _load_draft(user, token: str) -> dict | None:
    draft = cache.get(_draft_key(user, token))
    if draft is not None and isinstance(draft.get("settings"), dict):  # a draft cached by an earlier version
        draft["settings"] = RunSettings.of(**draft["settings"])
    return draft


def _draft_preflight(draft: dict, settings: RunSettings) -> preflight.Preflight:
    cap, budget = settings.cap, settings.budget_usd
    if draft["source"] in DOCUMENT_SOURCES:
        return preflight.check_document(
            draft["document"], filename=draft["filename"], goal=draft["goal"], cap=cap, budget_usd=budget
        )
    plan = Plan.objects.filter(pk=draft["plan_id"]).first()
    if plan is None:
        return preflight.Preflight(
            cap=cap, budget_usd=budget, errors=[PlanError("plan", f"saved plan {draft['plan_id']} no longer exists")]
        )
    return preflight.check_saved_plan(plan, cap=cap, budget_usd=budget)


def _draft_from_form(form: NewRunForm, user) -> tuple[dict, preflight.Preflight]:
    """The draft for a valid New-run form and its preflight (which may list plan problems)."""
    data = form.cleaned_data
    settings = form.run_settings()
    goal = data["goal"].strip()
    source = data["source"]
    if source == SOURCE_FILE:
        upload = data["plan_file"]
        raw = upload.read()
        draft = {"source": source, "filename": upload.name, "goal": goal, "document": raw, "plan_id": None}
        checked = _draft_preflight(draft, settings)
        if checked.ok:  # valid means UTF-8: keep the text, without a byte-order mark
            draft["document"] = raw.decode("utf-8").removeprefix("\ufeff")
        return draft, checked
    if source == SOURCE_TEXT:
        draft = {"source": source, "filename": "", "goal": goal, "document": data["plan_text"], "plan_id": None}
        return draft, _draft_preflight(draft, settings)
    if source == SOURCE_SAVED:
        plan = data["saved_plan"]
        draft = {"source": source, "filename": plan.source_name, "goal": plan.goal, "document": "", "plan_id": plan.pk}
        return draft, _draft_preflight(draft, settings)
    return _planner_draft(goal, user, settings)


def _planner_draft(goal: str, user, settings: RunSettings) -> tuple[dict, preflight.Preflight]:
    """Ask the planner for a plan (it saves the plan it proposes, validated like any plan file)."""
    planner = importlib.import_module("orchestrator.plans.planner")  # offered only when it is installed
    draft = {"source": SOURCE_PLANNER, "filename": "", "goal": goal, "document": "", "plan_id": None}
    try:
        result = planner.propose_plan(goal, created_by=user, on_feedback=feedback.apply)
    except (PlanValidationError, planner.PlannerError) as error:
        errors = error.errors if isinstance(error, PlanValidationError) else [PlanError("planner", str(error))]
        return draft, preflight.Preflight(cap=settings.cap, budget_usd=settings.budget_usd, goal=goal, errors=errors)
    draft.update(plan_id=result.plan.pk, filename=result.plan.source_name, simulated=result.simulated)
    return draft, _draft_preflight(draft, settings)


# --- Views -------------------------------------------------------------------------------------


def _initial(request) -> dict:
    """The form's starting values: `?plan=ID` chooses a saved plan, `?edit=ID` opens a copy of its
    document in the editor (launching it saves an edited plan as a new one)."""
    for name, source in (("plan", SOURCE_SAVED), ("edit", SOURCE_TEXT)):
        value = request.GET.get(name, "")
        plan = Plan.objects.filter(pk=int(value)).first() if value.isdigit() else None
        if plan is not None:
            if source == SOURCE_SAVED:
                return {"source": source, "saved_plan": plan.pk}
            return {"source": source, "plan_text": plans.plan_document(plan)}
    return {}


@permission_required(LAUNCH_RUN)
def new_run(request):
    """The form (GET); check the plan and go to its preflight, or list its problems (POST)."""
    checked = None
    if request.method == "POST":
        form = NewRunForm(request.POST, request.FILES)
        if form.is_valid():
            draft, checked = _draft_from_form(form, request.user)
            if checked.ok:
                token = secrets.token_urlsafe(16)
                draft["settings"] = form.run_settings()
                _save_draft(request.user, token, draft)
                return redirect("preflight", token=token)
    else:
        form = NewRunForm(initial={**RunSettings.defaults().as_dict(), **_initial(request)})
    return render(request, "dashboard/new_run.html", {"form": form, "preflight": checked})


@require_POST
@permission_required(LAUNCH_RUN)
def check_document_view(request):
    """The editor's check as you type (htmx): every problem with its line, or what the plan holds."""
    text = request.POST.get("plan_text", "")
    if not text.strip():
        return render(request, "dashboard/partials/plan_check.html", {"empty": True})
    goal = request.POST.get("goal", "")
    try:
        spec = plans.validate_document(text, goal=goal)
    except PlanValidationError as error:
        return render(request, "dashboard/partials/plan_check.html", {"errors": error.errors})
    same = plans.saved_plan_of(spec, text)
    return render(request, "dashboard/partials/plan_check.html", {"spec": spec, "same_as": same})


@permission_required(LAUNCH_RUN)
def preflight_view(request, token: str):
    """The preflight of a checked plan: DAG, cost, duration; change settings, check again, Launch."""
    draft = _load_draft(request.user, token)
    if draft is None and (launched := cache.get(_draft_key(request.user, token) + ":run")):
        return redirect(run_url(launched))  # launched already (a second submit, or Back then Launch)
    if draft is None:
        messages.warning(request, "That check has expired or belongs to someone else: choose the plan again.")
        return redirect("new_run")
    refusal = ""
    if request.method == "POST":
        form = RunSettingsForm(request.POST)
        if form.is_valid():
            draft["settings"] = form.run_settings()
            _save_draft(request.user, token, draft)
            if request.POST.get("action") != "launch":
                return redirect("preflight", token=token)
            checked = _draft_preflight(draft, draft["settings"])
            if checked.can_launch:
                response, refusal = _launch(request, token, draft)
                if response is not None:
                    return response
            else:
                refusal = checked.budget_refusal or "The plan has problems: fix them first."
    else:
        form = RunSettingsForm(initial=draft["settings"].as_dict())
    settings = form.run_settings() if form.is_bound and form.is_valid() else draft["settings"]
    checked = _draft_preflight(draft, settings)
    context = {
        "form": form,
        "token": token,
        "draft": draft,
        "preflight": checked,
        "refusal": refusal,
        "predicted": format_duration(checked.predicted_duration_s),
        "duration_note": checked.duration_note("the run's cap"),
        "budget_percent": wording.percent(checked.estimate_usd, checked.budget_usd),
        "budget_percent_text": wording.percent_text(checked.estimate_usd, checked.budget_usd),
        "decisions": checked.decisions(plan_review=settings.require_plan_approval),
    }
    # A refusal is the page again with the reason on top (200, like a form with errors).
    return render(request, "dashboard/preflight.html", context)


def _launch(request, token: str, draft: dict) -> tuple[HttpResponse | None, str]:
    """Launch the draft: (a redirect to the new run, "") or (None, why it was refused).

    A lock in the shared cache makes a double submit launch once; the second one is sent to the
    run the first one started.
    """
    key = _draft_key(request.user, token)
    if not cache.add(key + ":launching", 1, LAUNCH_LOCK_S):
        messages.warning(request, "This plan is being launched already.")
        return redirect("runs"), ""
    try:
        if launched := cache.get(key + ":run"):
            return redirect(run_url(launched)), ""
        settings = draft["settings"]
        try:
            if draft["source"] in DOCUMENT_SOURCES:
                run = launch_document(
                    draft["document"],
                    filename=draft["filename"],
                    source_name=draft["filename"] or "written on the New-run page",
                    source=Plan.Source.MANUAL if draft["source"] == SOURCE_TEXT else Plan.Source.FILE,
                    goal=draft["goal"],
                    settings=settings,
                    launched_by=request.user,
                )
            else:
                run = runs.launch(Plan.objects.get(pk=draft["plan_id"]), launched_by=request.user, **settings.as_dict())
        except PlanValidationError as error:
            return None, "The plan is no longer valid: " + "; ".join(str(e) for e in error.errors)
        except Plan.DoesNotExist:
            return None, f"Saved plan {draft['plan_id']} no longer exists."
        except runs.ActionError as error:
            return None, f"Launch refused: {error}"
        cache.set(key + ":run", run.pk, DRAFT_TTL_S)
        cache.delete(key)
    finally:
        cache.delete(key + ":launching")
    messages.success(request, f"Run #{run.pk} launched.")
    return redirect(run_url(run.pk)), ""
