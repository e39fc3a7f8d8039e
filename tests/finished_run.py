"""A run's finished state written in code, the way the engine leaves it, without running its attempts.

Every task succeeded: outputs from the simulated provider's generator, summaries, a succeeded
attempt with its request, and the events of each task with the actors the engine records (the
agent starts and finishes its task). Tests that look at a finished run's page use it, large or
small, so that they need no worker.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction

from orchestrator import events
from orchestrator.engine import context
from orchestrator.models import Attempt, Run, TaskRun
from orchestrator.providers.base import AgentRequest
from orchestrator.providers.simulated import generate_output

TASK_FIELDS = [
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
]


def succeeded_task(task: TaskRun, begin: datetime, end: datetime) -> Attempt:
    """Set `task` (unsaved) to succeeded between `begin` and `end`; its one attempt (unsaved)."""
    plan = task.run.plan
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
    return Attempt(
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


def finish_run(run: Run, *, started: datetime, finished: datetime, spacing_s: float = 1.7, task_s: float = 3.5) -> Run:
    """`run` (launched, waiting for its plan's approval: no task started) as it ends when every task succeeded: the tasks start
    `spacing_s` apart in plan order from `started` and last `task_s` each; the run ends at `finished`."""
    tasks = list(run.tasks.select_related("subtask", "agent", "run__plan").order_by("subtask__position"))
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=started)
        run.checkpoints.update(status="approved", decided_at=started)
        run.refresh_from_db()
        attempts = []
        for index, task in enumerate(tasks):
            begin = started + timedelta(seconds=index * spacing_s)
            attempts.append(succeeded_task(task, begin, begin + timedelta(seconds=task_s)))
        TaskRun.objects.bulk_update(tasks, TASK_FIELDS, batch_size=100)
        Attempt.objects.bulk_create(attempts, batch_size=100)
        for task in tasks:
            agent = f"agent:{task.agent.name}"
            events.record("task.queued", run=run, task=task, payload={"attempt": 1})
            events.record(
                "task.started", run=run, task=task, actor_name=agent, payload={"attempt": 1, "worker": "bench:1"}
            )
            events.record("task.succeeded", run=run, task=task, actor_name=agent, payload={"attempt": 1})
        total = sum((t.cost_usd for t in tasks), Decimal("0"))
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.SUCCEEDED,
            finished_at=finished,
            cost_usd=total,
            input_tokens=sum(t.input_tokens for t in tasks),
            output_tokens=sum(t.output_tokens for t in tasks),
            summary=f"all {len(tasks)} tasks succeeded",
        )
        events.record("run.succeeded", run=run, message=f"all {len(tasks)} tasks succeeded")
    run.refresh_from_db()
    return run
