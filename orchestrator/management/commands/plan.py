"""`python manage.py plan "GOAL" [--launch] [--no-approval] [--cap N] [--budget USD]`.

Asks the planner (Claude with ANTHROPIC_API_KEY set, else the simulated planner) for a plan for
GOAL with the active agents, saves it and prints it: each subtask's key, agent, gate and
dependencies, then the DAG's statistics. With --launch it also starts a run, which waits at the
plan checkpoint until someone approves it (the command prints the `approve` command), unless
--no-approval is given.

Exit codes: 0 planned (and launched); 1 the planner failed (nothing saved) or the launch was
refused (the plan stays saved).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from orchestrator import plans
from orchestrator.engine import feedback, runs
from orchestrator.engine.cluster import cluster_is_running
from orchestrator.engine.run_settings import FAILURE_POLICIES
from orchestrator.management import console
from orchestrator.management.commands.validate_plan import database_unavailable, format_summary
from orchestrator.management.console import budget_argument, cap_argument
from orchestrator.models import Checkpoint, Plan, Run
from orchestrator.plans import dag, planner
from orchestrator.wording import counted

TITLE_WIDTH = 48


class Command(BaseCommand):
    help = "Propose a plan for a goal with the planner, save and print it; --launch also starts a run."

    def add_arguments(self, parser):
        parser.add_argument("goal", help='What the team should achieve, e.g. "Compare three vector databases"')
        parser.add_argument(
            "--launch", action="store_true", help="Start a run of the plan (it waits for plan approval)."
        )
        parser.add_argument(
            "--no-approval", action="store_true", help="With --launch: start at once, without the plan checkpoint."
        )
        parser.add_argument("--cap", type=cap_argument, help="With --launch: most tasks at once (default: setting).")
        parser.add_argument("--budget", type=budget_argument, help="With --launch: budget in USD (default: setting).")
        parser.add_argument(
            "--policy",
            choices=FAILURE_POLICIES,
            default=None,
            help="With --launch: on a failed task, continue with independent branches (default) or fail_fast.",
        )

    def handle(self, *args, goal, launch, no_approval, cap, budget, policy, **options):
        if not launch and (no_approval or cap is not None or budget is not None or policy is not None):
            raise CommandError("--no-approval, --cap, --budget and --policy only apply together with --launch.")
        try:
            result = planner.propose_plan(goal, on_feedback=feedback.apply)
        except planner.PlannerError as error:
            # The planner's message is a sentence of its own ("The goal is empty: …"), not a clause.
            raise CommandError(f"No plan was made. {error}") from None
        except DatabaseError as error:
            raise database_unavailable(error, doing="plan") from None
        self.print_plan(result)
        if launch:
            self.launch(
                result.plan,
                cap=cap,
                budget=budget,
                policy=policy or Run.FailurePolicy.CONTINUE,
                approval=not no_approval,
            )
        else:
            self.stdout.write(
                f"Saved as plan {result.plan.pk}. Start it from the dashboard's New run page, or plan and launch in "
                "one step with --launch."
            )

    def print_plan(self, result: planner.PlannerResult) -> None:
        plan = result.plan
        if result.simulated:
            source = "the simulated planner (no ANTHROPIC_API_KEY set)"
        else:
            source = f"Claude ({plan.source_name})"
        subtasks = list(plan.subtasks.select_related("agent").order_by("position"))
        upstream: dict[int, list[str]] = {s.pk: [] for s in subtasks}
        for dependency in plan.dependencies.select_related("upstream").order_by("id"):
            upstream[dependency.downstream_id].append(dependency.upstream.key)
        self.stdout.write(f"Plan {plan.pk} proposed by {source}: {counted(len(subtasks), 'subtask')}")
        self.stdout.write(f"  goal: {plan.goal}")
        self.stdout.write("")
        rows = [
            (
                s.key,
                s.agent.name,
                s.gate if s.gate != "none" else "-",
                ", ".join(upstream[s.pk]) or "-",
                console.shorten(s.title, TITLE_WIDTH),
            )
            for s in subtasks
        ]
        self.stdout.write(console.table(["key", "agent", "gate", "depends on", "title"], rows))
        self.stdout.write("")
        keys, edges = plans.plan_graph(plan)
        for line in format_summary(dag.summarize(keys, edges, plans.plan_weights(plan))):
            self.stdout.write(line)

    def launch(self, plan: Plan, *, cap: int | None, budget, policy: str, approval: bool) -> None:
        try:
            run = runs.launch(
                plan,
                cap=cap,
                budget_usd=budget,
                failure_policy=policy,
                require_plan_approval=approval,
                actor_name=console.cli_actor(),
            )
        except runs.ActionError as error:
            raise CommandError(f"Run not launched: {error}\nThe plan was saved as plan {plan.pk}.") from None
        self.stdout.write(
            f"Launched run {run.pk} ({counted(run.tasks.count(), 'task')}, cap {run.cap}, budget {console.budget(run.budget_usd)})"
        )
        if approval:
            checkpoint = run.checkpoints.get(kind=Checkpoint.Kind.PLAN, status=Checkpoint.Status.PENDING)
            self.stdout.write(console.checkpoint_line(checkpoint))
        else:
            self.stdout.write(f"Follow it with `{console.MANAGE} run_status {run.pk}` or in the dashboard.")
        if not cluster_is_running():
            self.stdout.write(
                self.style.WARNING(
                    "No qcluster seems to be running: the run's tasks start once one is "
                    f"(`{console.MANAGE} qcluster` in another terminal, or `make run`)."
                )
            )
