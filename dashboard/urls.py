"""The dashboard's page URLs. Every prefix a person can reach by trimming a URL answers too:
`/` and `/runs/` are the runs list, and the folders of a run's, a checkpoint's or a plan's URLs
(`/runs/7/tasks/`, `/approvals/12/`, `/accounts/` …) send to the page that shows them."""

from django.urls import include, path
from django.views.generic import RedirectView

from .views import approvals, health, new_run, plans, runs
from .views.favicon import FaviconRedirect

urlpatterns = [
    path("", runs.home, name="home"),
    path("runs/", runs.runs_list, name="runs"),
    path("runs/table/", runs.runs_table, name="runs_table"),
    path("runs/new/", new_run.new_run, name="new_run"),
    path("runs/new/check/", new_run.check_document_view, name="new_run_check"),
    path("runs/new/<str:token>/", new_run.preflight_view, name="preflight"),
    path("plans/", plans.plans_list, name="plans"),
    path("plans/<int:plan_id>/", plans.plan_detail, name="plan_detail"),
    path("plans/<int:plan_id>/document/", plans.plan_document, name="plan_document"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/count/", approvals.count, name="approvals_count"),
    path("approvals/<int:checkpoint_id>/", approvals.checkpoint_redirect, name="approval"),
    path("approvals/<int:checkpoint_id>/approve/", approvals.approve, name="approval_approve"),
    path("approvals/<int:checkpoint_id>/reject/", approvals.reject, name="approval_reject"),
    path("health/", health.health, name="health"),
    path("favicon.ico", FaviconRedirect.as_view(), name="favicon"),
    path("accounts/", RedirectView.as_view(pattern_name="login"), name="accounts"),
    path("runs/<int:run_id>/", include("dashboard.run_urls")),
]
