"""A finished 293-task run, built in code: the shape of the run that once weighed ~760 KB.

scope → 12 areas (architect) → 20 probes per area (researcher, 240 in all) → a synthesis per
area (writer) → a review per area (reviewer); 15 cross-checks (tester) each read two syntheses;
one final report reads every review. 16 tasks are sinks (the checks and the report), so the
Result section has 16 final outputs.

The finished state is written the way the engine leaves it (tests/finished_run.py), without
running 293 attempts, so that a test can afford it.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.models import Agent, Attempt, Plan, Run, TaskRun
from tests.finished_run import finish_run

AREAS = 12
PROBES_PER_AREA = 20
CHECKS = 15
TEAM = ("researcher", "architect", "writer", "reviewer", "tester")


def large_plan_document() -> dict:
    subtasks = [{"key": "scope", "agent": "researcher", "title": "Scope the migration of every service"}]
    for area in range(AREAS):
        subtasks.append(
            {"key": f"area_{area}", "agent": "architect", "title": f"Map area {area}", "depends_on": ["scope"]}
        )
        subtasks += [
            {
                "key": f"probe_{area}_{n}",
                "agent": "researcher",
                "title": f"Probe service {n} of area {area}",
                "depends_on": [f"area_{area}"],
            }
            for n in range(PROBES_PER_AREA)
        ]
        subtasks.append(
            {
                "key": f"synth_{area}",
                "agent": "writer",
                "title": f"Synthesise area {area}",
                "depends_on": [f"probe_{area}_{n}" for n in range(PROBES_PER_AREA)],
            }
        )
        subtasks.append(
            {
                "key": f"review_{area}",
                "agent": "reviewer",
                "title": f"Review area {area}",
                "depends_on": [f"synth_{area}"],
            }
        )
    for check in range(CHECKS):
        ups = [f"synth_{check % AREAS}", f"synth_{(check + 5) % AREAS}"]
        subtasks.append(
            {"key": f"check_{check}", "agent": "tester", "title": f"Cross-check {check}", "depends_on": ups}
        )
    subtasks.append(
        {
            "key": "report",
            "agent": "writer",
            "title": "Write the migration report",
            "depends_on": [f"review_{a}" for a in range(AREAS)],
        }
    )
    return {"goal": "Plan the migration of 240 services to the new platform", "subtasks": subtasks}


def ensure_team() -> None:
    for name in TEAM:
        Agent.objects.get_or_create(
            name=name,
            defaults={
                "role": name.title(),
                "max_concurrency": 8,
                "provider_options": {"latency": {"dist": "fixed", "seconds": 0.2}},
            },
        )


def finished_large_run(launched_by=None) -> Run:
    """A 293-task run that has finished: every task succeeded, as the engine records it."""
    ensure_team()
    plan = plans.save_plan(plans.validate(large_plan_document()), source=Plan.Source.MANUAL)
    run = runs.launch(plan, cap=8, budget_usd="50", launched_by=launched_by, require_plan_approval=True)
    now = timezone.now()
    return finish_run(run, started=now - timedelta(minutes=9), finished=now)


def cancelled_large_run(launched_by=None, *, succeeded: int = 126, running: int = 8) -> Run:
    """The 293-task run cancelled part way: its first `succeeded` tasks (in plan order) succeeded,
    the next `running` were running and their attempts were cancelled when the run was (a few
    seconds after the last of them started), the others never started."""
    run = finished_large_run(launched_by=launched_by)
    tasks = list(run.tasks.select_related("subtask").order_by("subtask__position"))
    stopped = tasks[succeeded : succeeded + running]
    cancelled_at = max(t.started_at for t in stopped) + timedelta(seconds=2)
    with transaction.atomic():
        Attempt.objects.filter(task_run__in=stopped).update(
            state=Attempt.State.CANCELLED, finished_at=cancelled_at, error="run cancelled"
        )
        Attempt.objects.filter(task_run__in=tasks[succeeded + running :]).delete()
        TaskRun.objects.filter(pk__in=[t.pk for t in stopped]).update(
            state=TaskRun.State.CANCELLED, finished_at=cancelled_at, output="", summary="", error="run cancelled"
        )
        TaskRun.objects.filter(pk__in=[t.pk for t in tasks[succeeded + running :]]).update(
            state=TaskRun.State.CANCELLED,
            started_at=None,
            finished_at=cancelled_at,
            output="",
            summary="",
            attempt_count=0,
            error="run cancelled",
        )
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.CANCELLED, finished_at=cancelled_at, summary="cancelled by a person"
        )
    run.refresh_from_db()
    return run
