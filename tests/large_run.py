"""A finished 293-task run, built in code: the shape of the run that once weighed ~760 KB.

scope → 12 areas (architect) → 20 probes per area (researcher, 240 in all) → a synthesis per
area (writer) → a review per area (reviewer); 15 cross-checks (tester) each read two syntheses;
one final report reads every review. 16 tasks are sinks (the checks and the report), so the
Result section has 16 final outputs.

The finished state is written the way the engine leaves it (outputs from the simulated
provider's generator, summaries, a succeeded attempt with its request, the events of each task),
without running 293 attempts, so that a test can afford it.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from orchestrator import events, plans
from orchestrator.engine import context, runs
from orchestrator.models import Agent, Attempt, Plan, Run, TaskRun
from orchestrator.providers.base import AgentRequest
from orchestrator.providers.simulated import generate_output

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
    started = now - timedelta(minutes=9)
    tasks = list(run.tasks.select_related("subtask", "agent", "run__plan").order_by("subtask__position"))
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=started)
        run.checkpoints.update(status="approved", decided_at=started)
        run.refresh_from_db()
        attempts = []
        for index, task in enumerate(tasks):
            begin = started + timedelta(seconds=index * 1.7)
            end = begin + timedelta(seconds=3.5)
            request = AgentRequest(
                agent_name=task.agent.name,
                provider="simulated",
                model="sim-1",
                system_prompt="",
                prompt=f"# {task.subtask.title}\n\nGoal of the whole team: {plan.goal}",
                max_tokens=1024,
                timeout_s=30.0,
                seed=f"{plan.pk}:{task.subtask.key}",
                attempt=1,
            )
            output = generate_output(request).text
            task.state, task.output, task.summary = TaskRun.State.SUCCEEDED, output, context.summarize(output)
            task.progress, task.attempt_count, task.wait_code, task.wait_reason = 100, 1, "", ""
            task.input_tokens, task.output_tokens = 600, len(output.split())
            task.cost_usd = Decimal("0.0018") + Decimal(task.output_tokens) * Decimal("0.000015")
            task.ready_at, task.started_at, task.finished_at = begin, begin, end
            attempts.append(
                Attempt(
                    task_run=task,
                    number=1,
                    state=Attempt.State.SUCCEEDED,
                    worker="bench:1",
                    started_at=begin,
                    finished_at=end,
                    input_tokens=task.input_tokens,
                    output_tokens=task.output_tokens,
                    cost_usd=task.cost_usd,
                    request={"provider": "simulated", "model": "sim-1", "max_tokens": 1024, "prompt": request.prompt},
                )
            )
        TaskRun.objects.bulk_update(
            tasks,
            [
                "state",
                "output",
                "summary",
                "progress",
                "attempt_count",
                "wait_code",
                "wait_reason",
                "input_tokens",
                "output_tokens",
                "cost_usd",
                "ready_at",
                "started_at",
                "finished_at",
            ],
            batch_size=100,
        )
        Attempt.objects.bulk_create(attempts, batch_size=100)
        for task in tasks:
            events.record("task.queued", run=run, task=task, payload={"attempt": 1})
            events.record("task.started", run=run, task=task, payload={"attempt": 1, "worker": "bench:1"})
            events.record("task.succeeded", run=run, task=task, payload={"attempt": 1})
        total = sum((t.cost_usd for t in tasks), Decimal("0"))
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.SUCCEEDED,
            finished_at=now,
            cost_usd=total,
            input_tokens=sum(t.input_tokens for t in tasks),
            output_tokens=sum(t.output_tokens for t in tasks),
            summary=f"all {len(tasks)} tasks succeeded",
        )
        events.record("run.succeeded", run=run, message=f"all {len(tasks)} tasks succeeded")
    run.refresh_from_db()
    return run
