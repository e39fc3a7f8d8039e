from django.urls import include, path

from .views import approvals, health, new_run, runs

urlpatterns = [
    path("", runs.runs_list, name="runs"),
    path("", runs.runs_list, name="home"),  # the name the first dashboard used
    path("runs/table/", runs.runs_table, name="runs_table"),
    path("runs/new/", new_run.new_run, name="new_run"),
    path("runs/new/<str:token>/", new_run.preflight_view, name="preflight"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/count/", approvals.count, name="approvals_count"),
    path("approvals/<int:checkpoint_id>/approve/", approvals.approve, name="approval_approve"),
    path("approvals/<int:checkpoint_id>/reject/", approvals.reject, name="approval_reject"),
    path("health/", health.health, name="health"),
    path("runs/<int:run_id>/", include("dashboard.run_urls")),
]
