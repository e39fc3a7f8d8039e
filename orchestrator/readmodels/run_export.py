"""The whole record of one run, for people to download: JSON (`glassbox.run/1`) and Markdown.

`RunExport` is built from the records of orchestrator/readmodels/records.py, so the download
has the same fields and formats as the JSON API. `run_markdown` writes the same content as a
document: the final output first, then every task's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal, Self

from orchestrator import wording
from orchestrator.models import Run, TaskRun

from .records import AgentRecord, CheckpointRecord, PlanRecord, Record, RunRecord, TaskRunRecord

EXPORT_FORMAT = "glassbox.run/1"


def run_tasks(run: Run) -> list[TaskRun]:
    """The run's tasks in plan order, with subtask, agent and attempts read in three queries."""
    return list(run.tasks.select_related("subtask", "agent").prefetch_related("attempts").order_by("subtask__position"))


def task_run_records(tasks: Iterable[TaskRun]) -> list[TaskRunRecord]:
    """The records of tasks read by `run_tasks` (their attempts prefetched)."""
    return [TaskRunRecord.of(t, sorted(t.attempts.all(), key=lambda a: a.number)) for t in tasks]


def checkpoint_records(run: Run) -> list[CheckpointRecord]:
    checkpoints = run.checkpoints.select_related("task_run__subtask", "decided_by").order_by("created_at", "pk")
    return [CheckpointRecord.of(c) for c in checkpoints]


def final_task_keys(run: Run) -> list[str]:
    """Keys of the plan's sinks (no downstream task): the fan-in result of the run."""
    with_downstream = set(run.plan.dependencies.values_list("upstream_id", flat=True))
    return [
        key
        for sid, key in run.plan.subtasks.order_by("position").values_list("id", "key")
        if sid not in with_downstream
    ]


class RunExport(Record):
    format: Literal["glassbox.run/1"]
    run: RunRecord
    plan: PlanRecord
    agents: list[AgentRecord]
    tasks: list[TaskRunRecord]
    final_tasks: list[str]
    checkpoints: list[CheckpointRecord]

    @classmethod
    def of(cls, run: Run) -> Self:
        run = Run.objects.select_related("plan", "launched_by").get(pk=run.pk)
        tasks = run_tasks(run)
        agents = {t.agent.pk: t.agent for t in tasks}
        return cls(
            format=EXPORT_FORMAT,
            run=RunRecord.of(run),
            plan=PlanRecord.of(run.plan),
            agents=[AgentRecord.of(a) for a in sorted(agents.values(), key=lambda a: a.name)],
            tasks=task_run_records(tasks),
            final_tasks=final_task_keys(run),
            checkpoints=checkpoint_records(run),
        )


def run_export(run: Run) -> dict[str, Any]:
    """The JSON download of a run: plain JSON values, ready for json.dumps."""
    return RunExport.of(run).model_dump(mode="json")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def run_markdown(run: Run) -> str:
    """The run's result as a Markdown document: the final output first, then every task's.

    Agent output is copied as written (it is Markdown already); titles and the goal are put
    on one line so that they cannot break the document's headings.
    """
    data = run_export(run)
    r = data["run"]
    finals = set(data["final_tasks"])
    lines = [
        f"# Run {r['id']}: {_one_line(r['goal'])}",
        "",
        f"- Status: {r['status']}" + (f" ({_one_line(r['summary'])})" if r["summary"] else ""),
        f"- Started: {r['started_at'] or 'not started'}; finished: {r['finished_at'] or 'not finished'}",
        f"- Cost: {wording.usd(r['cost_usd'])} of a {wording.usd(r['budget_usd'])} budget; "
        f"tokens: {r['input_tokens']:,} in, {r['output_tokens']:,} out",
        f"- Tasks: {len(data['tasks'])}",
        "",
    ]
    ordered = [t for t in data["tasks"] if t["key"] in finals] + [t for t in data["tasks"] if t["key"] not in finals]
    if ordered and ordered[0]["key"] in finals:
        lines += ["## Result", ""]
    for index, task in enumerate(ordered):
        if index == len(finals) and finals:
            lines += ["## Every task", ""]
        level = "###"
        lines.append(f"{level} {_one_line(task['title'])} (`{task['key']}`, {task['agent']}, {task['state']})")
        lines.append("")
        if task["output"]:
            lines += [task["output"].rstrip(), ""]
        elif task["error"]:
            lines += [f"_No output: {_one_line(task['error'])}_", ""]
        else:
            lines += ["_No output._", ""]
    return "\n".join(lines).rstrip() + "\n"
