"""Launching a saved plan: its settings checked, its cost estimated against the budget, the run and
its tasks created and started (or its plan checkpoint opened first), in one transaction.
"""

from __future__ import annotations

from decimal import Decimal

from django.utils import timezone

from orchestrator import events, plans, sql, wording
from orchestrator.engine import cost_estimates, scheduler, waits
from orchestrator.engine.action_errors import ActionError
from orchestrator.engine.run_settings import InvalidRunSetting, RunSettings, budget_shortfall
from orchestrator.models import Checkpoint, Dependency, EventSequence, Plan, Run, TaskRun
from orchestrator.plans import dag


class LaunchRefused(ActionError):
    pass


def estimate_cost(plan: Plan) -> Decimal:
    """The plan's cost estimate (engine/cost_estimates.py: each agent's median recorded usage once it
    has history, else the worst case of its max output tokens; each subtask's input counts what it
    receives from its upstreams), as the pre-flight shows it."""
    return cost_estimates.plan_estimate(plan).total_usd


def task_ranks(plan: Plan) -> dict[str, float]:
    """Each subtask's longest remaining path to the end of the DAG, weighted by duration."""
    weights = plans.plan_weights(plan)
    keys = list(weights)
    edges = list(Dependency.objects.filter(plan=plan).values_list("upstream__key", "downstream__key"))
    return dag.remaining_path_lengths(keys, edges, weights)


def launch(
    plan: Plan,
    *,
    cap: int | None = None,
    budget_usd: Decimal | str | None = None,
    failure_policy: str = Run.FailurePolicy.CONTINUE,
    launched_by=None,
    actor_name: str = "",
    require_plan_approval: bool = False,
) -> Run:
    """Start a run of a saved plan (or open its plan checkpoint first), or raise LaunchRefused.

    Settings not given are the defaults (`RunSettings`); a run over its budget is refused.
    `actor_name` names who launched it when no user did (the command line: `cli:<os user>`), as in
    `pause` and `decide`: the run's `run.created` and `run.started` events say who.
    """
    try:
        chosen = RunSettings.of(
            cap=cap, budget_usd=budget_usd, failure_policy=failure_policy, require_plan_approval=require_plan_approval
        )
    except InvalidRunSetting as error:
        raise LaunchRefused(str(error)) from None
    cap, budget, failure_policy = chosen.cap, chosen.budget_usd, chosen.failure_policy
    agents = {s.agent for s in plan.subtasks.select_related("agent")}
    problems = [problem for agent in sorted(agents, key=str) for problem in plans.agent_setting_problems(agent)]
    if problems:
        raise LaunchRefused("; ".join(problems))
    estimate = estimate_cost(plan)
    if estimate > budget:
        raise LaunchRefused(f"{budget_shortfall(estimate, budget, what='estimated cost')} or trim the plan")
    ranks = task_ranks(plan)
    with events.atomic():
        # A run that starts at once starts as it is created: one moment for both. (The ORM takes
        # `created_at` as it saves, after `started_at` was taken: a run started before it existed.)
        now = timezone.now()
        run = Run(
            plan=plan,
            cap=cap,
            budget_usd=budget,
            failure_policy=failure_policy,
            launched_by=launched_by,
            estimate_usd=estimate,
            status=Run.Status.AWAITING_APPROVAL if require_plan_approval else Run.Status.RUNNING,
            created_at=now,
            started_at=None if require_plan_approval else now,
        )
        sql.insert(Run, [run])
        EventSequence.objects.create(run=run)
        # Before the plan's approval every task says what it waits for (cleared when approved).
        held = waits.PlanApproval() if require_plan_approval else None
        sql.insert(  # one statement of text: the run is already started, and a plan may have hundreds
            TaskRun,
            [
                TaskRun(
                    run_id=run.pk,
                    subtask_id=subtask_id,
                    agent_id=agent_id,
                    rank=ranks.get(key, 0.0),
                    wait_code=held.code if held else "",
                    wait_reason=held.message if held else "",
                )
                for subtask_id, key, agent_id in plan.subtasks.values_list("pk", "key", "agent_id")
            ],
        )
        events.record(
            "run.created",
            run=run,
            user=launched_by,
            actor_name=actor_name,
            message=f"run of plan {plan.pk} created: cap {cap}, budget {wording.budget(budget)}, policy {failure_policy}",
            payload={
                "plan": plan.pk,
                "cap": cap,
                "budget_usd": str(budget),
                "estimate_usd": str(estimate),
                "failure_policy": failure_policy,
            },
        )
        if require_plan_approval:
            version = plans.plan_version(plan)
            checkpoint = Checkpoint.objects.create(run=run, kind=Checkpoint.Kind.PLAN, plan_version=version)
            events.record(
                "checkpoint.created",
                run=run,
                message="the plan needs approval before it runs",
                payload={"checkpoint": checkpoint.pk, "kind": Checkpoint.Kind.PLAN, "plan_version": version},
            )
        else:
            events.record("run.started", run=run, user=launched_by, actor_name=actor_name)
            scheduler.advance(run.pk)
    return run
