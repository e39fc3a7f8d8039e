"""URLs of one run's glass-box page and its actions (included under runs/<int:run_id>/)."""

from django.urls import path

from .views import run

urlpatterns = [
    path("", run.run_detail, name="run_detail"),
    path("graph.json", run.run_graph, name="run_graph"),
    path("events/", run.run_events, name="run_events"),
    path("download.md", run.run_download_markdown, name="run_download_md"),
    path("download.json", run.run_download_json, name="run_download_json"),
    path("pause/", run.run_pause, name="run_pause"),
    path("resume/", run.run_resume, name="run_resume"),
    path("cancel/", run.run_cancel, name="run_cancel"),
    path("tasks/<int:task_id>/", run.run_task, name="run_task"),
    path("tasks/<int:task_id>/output/", run.run_task_output, name="run_task_output"),
    path("tasks/<int:task_id>/retry/", run.run_task_retry, name="run_task_retry"),
    path("tasks/<int:task_id>/skip/", run.run_task_skip, name="run_task_skip"),
    path("checkpoints/<int:checkpoint_id>/decide/", run.run_checkpoint_decide, name="run_checkpoint_decide"),
    path(
        "checkpoints/<int:checkpoint_id>/subtasks/<slug:key>/instructions/",
        run.run_plan_edit,
        name="run_plan_edit",
    ),
    path("checkpoints/<int:checkpoint_id>/subtasks/<slug:key>/remove/", run.run_plan_remove, name="run_plan_remove"),
]
