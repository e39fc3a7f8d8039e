"""An agent's path made the way the runtime makes it: the real agent loop with a scripted provider
and fake tools, each step recorded as an event of the task (and a cut result kept whole), as
orchestrator/readmodels/steps.py says the runtime must."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from orchestrator import events
from orchestrator.engine.agent_loop import LoopHooks, run_agent_loop
from orchestrator.engine.agent_steps import Step
from orchestrator.models import TaskRun
from orchestrator.tools import full_results
from tests.orchestrator.engine.test_agent_loop import request


def loop_steps(provider, tools, *, decisions=(), max_steps: int = 3) -> list[Step]:
    """The steps the agent loop reports for this provider's script and these tools."""
    steps: list[Step] = []
    pending = list(decisions)

    async def on_step(step):
        steps.append(step)

    async def on_usage(usage):
        pass

    async def approve(call):
        return pending.pop(0)

    hooks = LoopHooks(on_step=on_step, on_usage=on_usage, approve=approve)
    loop = run_agent_loop(provider, request(), tools, hooks, max_steps=max_steps)
    with ThreadPoolExecutor(1) as thread:  # its own event loop, also under Playwright's running one
        thread.submit(asyncio.run, loop).result()
    return steps


def record_step(task: TaskRun, step: Step, *, attempt: int = 1) -> None:
    """Keep one step as the runtime does: its whole result when cut, then its event."""
    if step.kind == "tool_result":
        full_results.keep(task.run_id, task.pk, attempt, step.call_id, step.result_full)
    events.record(
        step.event_type,
        task=task,
        actor_name=f"agent:{task.agent.name}",
        message=step.sentence(),
        payload={**step.payload(), "attempt": attempt},
    )


def record_loop(task: TaskRun, provider, tools, *, attempt: int = 1, decisions=(), max_steps: int = 3) -> list[Step]:
    """Run the loop and keep each of its steps as the runtime will; the steps."""
    steps = loop_steps(provider, tools, decisions=decisions, max_steps=max_steps)
    for step in steps:
        record_step(task, step, attempt=attempt)
    return steps
