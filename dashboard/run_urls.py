"""URLs of one run's glass-box page and its actions (included under runs/<int:run_id>/).

The folders between them (`tasks/`, `checkpoints/<id>/` …) send back to the run page, so a
trimmed URL never ends in a 404.
"""

from django.urls import path

from .views import run

urlpatterns = [
    path("", run.run_detail, name="run_detail"),
    path("graph.json", run.run_graph, name="run_graph"),
    path("events/", run.run_events, name="run_events"),
    path("events/tasks/", run.run_event_tasks, name="run_event_tasks"),
    path("download.md", run.run_download_markdown, name="run_download_md"),
    path("download.json", run.run_download_json, name="run_download_json"),
    path("artifacts/", run.run_part_redirect, {"anchor": "run-artifacts"}, name="run_artifacts"),
    path("artifacts/<path:name>", run.run_artifact, name="run_artifact"),
    path("pause/", run.run_pause, name="run_pause"),
    path("resume/", run.run_resume, name="run_resume"),
    path("cancel/", run.run_cancel, name="run_cancel"),
    path("budget/", run.run_budget, name="run_budget"),
    path("launch-again/", run.run_launch_again, name="run_launch_again"),
    path("tasks/", run.run_part_redirect, name="run_tasks"),
    path("tasks/<int:task_id>/", run.run_task, name="run_task"),
    path("tasks/<int:task_id>/output/", run.run_task_output, name="run_task_output"),
    path("tasks/<int:task_id>/attempts/", run.run_task_redirect, name="run_task_attempts"),
    path("tasks/<int:task_id>/attempts/<int:number>/", run.run_attempt, name="run_attempt"),
    path("tasks/<int:task_id>/retry/", run.run_task_retry, name="run_task_retry"),
    path("tasks/<int:task_id>/skip/", run.run_task_skip, name="run_task_skip"),
    path("tasks/<int:task_id>/rerun/", run.run_task_rerun, name="run_task_rerun"),
    path("checkpoints/", run.run_part_redirect, {"anchor": "run-checkpoints"}, name="run_checkpoints"),
    path("checkpoints/<int:checkpoint_id>/", run.run_checkpoint_redirect, name="run_checkpoint"),
    path("checkpoints/<int:checkpoint_id>/decide/", run.run_checkpoint_decide, name="run_checkpoint_decide"),
    path("checkpoints/<int:checkpoint_id>/subtasks/", run.run_checkpoint_redirect, name="run_plan_subtasks"),
    path("checkpoints/<int:checkpoint_id>/subtasks/<slug:key>/", run.run_checkpoint_redirect, name="run_plan_subtask"),
    path(
        "checkpoints/<int:checkpoint_id>/subtasks/<slug:key>/instructions/",
        run.run_plan_edit,
        name="run_plan_edit",
    ),
    path("checkpoints/<int:checkpoint_id>/subtasks/<slug:key>/remove/", run.run_plan_remove, name="run_plan_remove"),
]
