"""Edits to a run's plan while its approval checkpoint is pending (DESIGN J2).

The approver may rewrite a subtask's instructions or remove a subtask before approving.
Removing reconnects nothing: the tasks below the removed one simply lose that upstream.

A plan can be shared: several runs may have been launched from it, and it stays in the list of
saved plans for later launches. Edits made while approving one run belong to that run alone,
so the first edit copies the plan (subtasks and dependencies), points the run and its tasks at
the copy, and edits the copy; later edits for the same run change that copy in place. The copy
is recognisable as the run's own: it is used by this run only and was created after the run.

Each edit runs in one transaction under the run's row lock, checks that the plan checkpoint is
still pending, moves the checkpoint's `plan_version` on (an approval of the version before the
edit is then refused: runs.decide), estimates the run's cost again for the plan it now runs (the
page sets what the run cost against it), and writes its Event (`plan.copied`, `plan.subtask_edited`,
`plan.subtask_removed`, each with the version before and after).
"""

from __future__ import annotations

from django.db.models.deletion import ProtectedError

from orchestrator import events, plans
from orchestrator.engine import run_launch, scheduler
from orchestrator.engine.action_errors import ActionError
from orchestrator.models import Checkpoint, Dependency, Plan, Run, Subtask, TaskRun


def _locked_pending_plan_checkpoint(checkpoint: Checkpoint) -> tuple[Run, Checkpoint]:
    run = scheduler.lock_run(checkpoint.run_id)
    checkpoint = Checkpoint.objects.get(pk=checkpoint.pk)
    if checkpoint.kind != Checkpoint.Kind.PLAN:
        raise ActionError(
            f"checkpoint {checkpoint.pk} is a {checkpoint.get_kind_display().lower()} checkpoint of one task: "
            "only the plan's approval checkpoint allows editing the plan"
        )
    if checkpoint.status != Checkpoint.Status.PENDING:
        raise ActionError(f"the plan was already {checkpoint.status}: it can no longer be edited")
    if run.status != Run.Status.AWAITING_APPROVAL:
        raise ActionError(f"run {run.pk} is {run.get_status_display().lower()}: its plan can no longer be edited")
    return run, checkpoint


def _new_version(checkpoint: Checkpoint, plan: Plan) -> dict[str, str]:
    """Move the checkpoint to the plan's version after an edit; the versions for the edit's event."""
    before = checkpoint.plan_version
    checkpoint.plan_version = plans.plan_version(plan)
    checkpoint.save(update_fields=["plan_version"])
    return {"version_before": before, "version": checkpoint.plan_version}


def _estimate_again(run: Run, plan: Plan) -> None:
    """The run's cost estimate for its plan as edited: a removed subtask's share was still in it."""
    run.estimate_usd = run_launch.estimate_cost(plan)
    run.save(update_fields=["estimate_usd"])


def _is_own_copy(plan: Plan, run: Run) -> bool:
    return plan.created_at > run.created_at and not plan.runs.exclude(pk=run.pk).exists()


def own_plan(run: Run, user=None) -> Plan:
    """The run's plan, copied first unless it is already this run's own copy. Call under the run lock."""
    plan = run.plan
    if _is_own_copy(plan, run):
        return plan
    copy = Plan.objects.create(
        goal=plan.goal,
        source=plan.source,
        source_name=f"{plan.source_name or f'plan {plan.pk}'} (edited for run {run.pk})"[
            : Plan._meta.get_field("source_name").max_length
        ],
        document=plan.document,
        created_by=plan.created_by,
        copied_from=plan,
    )
    originals = list(plan.subtasks.order_by("position"))
    Subtask.objects.bulk_create(
        [
            Subtask(
                plan=copy,
                key=s.key,
                title=s.title,
                instructions=s.instructions,
                agent_id=s.agent_id,
                priority=s.priority,
                gate=s.gate,
                timeout_s=s.timeout_s,
                max_retries=s.max_retries,
                estimated_input_tokens=s.estimated_input_tokens,
                estimated_output_tokens=s.estimated_output_tokens,
                position=s.position,
                inputs=s.inputs,
            )
            for s in originals
        ]
    )
    ids = dict(copy.subtasks.values_list("key", "id"))
    Dependency.objects.bulk_create(
        Dependency(plan=copy, upstream_id=ids[up], downstream_id=ids[down])
        for up, down in plan.dependencies.order_by("pk").values_list("upstream__key", "downstream__key")
    )
    for task_id, key in run.tasks.values_list("pk", "subtask__key"):
        TaskRun.objects.filter(pk=task_id).update(subtask_id=ids[key])
    run.plan = copy
    run.save(update_fields=["plan"])
    events.record(
        "plan.copied",
        run=run,
        user=user,
        message=f"plan {plan.pk} copied to plan {copy.pk}: this run's edits leave the original unchanged",
        payload={"from_plan": plan.pk, "plan": copy.pk},
    )
    return copy


def _subtask(plan: Plan, key: str) -> Subtask:
    try:
        return plan.subtasks.select_related("agent").get(key=key)
    except Subtask.DoesNotExist:
        raise ActionError(f"the plan has no subtask {key!r} (was it removed?)") from None


def edit_instructions(checkpoint: Checkpoint, subtask_key: str, text: str, user=None) -> Subtask:
    """Replace one subtask's instructions. No change, no copy and no event."""
    if not isinstance(text, str):
        raise ActionError("instructions must be text")
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if len(text) > plans.MAX_INSTRUCTIONS_CHARS:
        raise ActionError(
            f"instructions must be at most {plans.MAX_INSTRUCTIONS_CHARS:,} characters, got {len(text):,}"
        )
    with events.atomic():
        run, checkpoint = _locked_pending_plan_checkpoint(checkpoint)
        current = _subtask(run.plan, subtask_key)
        if current.instructions == text:
            return current
        plan = own_plan(run, user)
        subtask = _subtask(plan, subtask_key)
        before = subtask.instructions
        subtask.instructions = text
        subtask.save(update_fields=["instructions"])
        _estimate_again(run, plan)
        # The event names the task in its payload, not as a foreign key: a task with history
        # could no longer be removed from the plan before approval.
        task_id = run.tasks.filter(subtask=subtask).values_list("pk", flat=True).first()
        versions = _new_version(checkpoint, plan)
        events.record(
            "plan.subtask_edited",
            run=run,
            user=user,
            message=f"instructions of {subtask.key} edited ({len(before):,} → {len(text):,} characters); "
            f"the plan is now version {versions['version']}",
            payload={
                "checkpoint": checkpoint.pk,
                "key": subtask.key,
                "task": task_id,
                "field": "instructions",
                "before": before,
                "after": text,
                **versions,
            },
        )
    return subtask


def remove_subtask(checkpoint: Checkpoint, subtask_key: str, user=None) -> list[str]:
    """Remove one subtask (and its task in this run) from the plan; returns the keys below it
    that lost it as an upstream. The plan's last subtask cannot be removed: reject the plan."""
    with events.atomic():
        run, checkpoint = _locked_pending_plan_checkpoint(checkpoint)
        _subtask(run.plan, subtask_key)
        if run.plan.subtasks.count() <= 1:
            raise ActionError(f"{subtask_key} is the plan's only subtask: reject the plan instead of removing it")
        plan = own_plan(run, user)
        subtask = _subtask(plan, subtask_key)
        upstream = list(subtask.upstream_edges.order_by("upstream__position").values_list("upstream__key", flat=True))
        downstream = list(
            subtask.downstream_edges.order_by("downstream__position").values_list("downstream__key", flat=True)
        )
        task = run.tasks.get(subtask=subtask)
        removed = {"key": subtask.key, "title": subtask.title, "agent": subtask.agent.name, "task": task.pk}
        try:
            with events.atomic():
                task.delete()
                subtask.delete()  # its dependencies go with it
        except ProtectedError:
            raise ActionError(
                f"{subtask_key} already has history in this run (events or attempts): it cannot be removed"
            ) from None
        ranks = run_launch.task_ranks(plan)
        for task_id, key in run.tasks.values_list("pk", "subtask__key"):
            TaskRun.objects.filter(pk=task_id).update(rank=ranks.get(key, 0.0))
        _estimate_again(run, plan)
        versions = _new_version(checkpoint, plan)
        events.record(
            "plan.subtask_removed",
            run=run,
            user=user,
            message=f"{subtask.key} removed from the plan"
            + (f"; {', '.join(downstream)} no longer wait for it" if downstream else "")
            + f"; the plan is now version {versions['version']}",
            payload={
                "checkpoint": checkpoint.pk,
                **removed,
                "depends_on": upstream,
                "downstream": downstream,
                **versions,
            },
        )
    return downstream
