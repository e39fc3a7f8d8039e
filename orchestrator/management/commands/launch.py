"""`python manage.py launch FILE`: validate and save a plan file, start a run, optionally follow it.

The plan is saved and the run started together (`engine.launching`): a refused launch saves
nothing. Exit codes: 0 launched (or, when waiting, the run succeeded); 1 invalid plan, launch
refused or run not succeeded; 2 no qcluster running; 130 stopped watching with Ctrl-C (the run
goes on).
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from orchestrator import plans
from orchestrator.engine import launching, runs
from orchestrator.engine.cluster import cluster_is_running
from orchestrator.engine.run_settings import FAILURE_POLICIES, InvalidRunSetting, RunSettings
from orchestrator.management import console
from orchestrator.management.commands.validate_plan import database_unavailable, load_or_fail
from orchestrator.management.console import budget_argument, cap_argument
from orchestrator.models import Run
from orchestrator.readmodels.totals import stopping_text
from orchestrator.wording import counted

NO_CLUSTER_MESSAGE = (
    "No qcluster is running. Start one with `python manage.py qcluster` in another terminal, or use `make run`."
)
NO_CLUSTER_EXIT = 2
STOPPED_WATCHING_EXIT = 130


class Command(BaseCommand):
    help = "Validate and save a plan file (YAML or JSON), then launch a run of it."

    def add_arguments(self, parser):
        parser.add_argument("file", help="Plan file, e.g. examples/research_brief.yaml")
        parser.add_argument("--cap", type=cap_argument, help="Most tasks of this run at once (default: setting)")
        parser.add_argument("--budget", type=budget_argument, help="Budget in USD (default: setting)")
        parser.add_argument(
            "--policy",
            choices=FAILURE_POLICIES,
            default=Run.FailurePolicy.CONTINUE,
            help="On a failed task: continue with independent branches, or fail_fast.",
        )
        approval = parser.add_mutually_exclusive_group()
        approval.add_argument(
            "--approval",
            dest="approval",
            action="store_const",
            const=True,
            help="Wait for an approver to approve the plan before anything runs.",
        )
        approval.add_argument(
            "--no-approval",
            dest="approval",
            action="store_const",
            const=False,
            help="Start at once, without plan approval.",
        )
        parser.add_argument("--watch", action="store_true", help="Show a live progress bar until the run ends.")
        parser.add_argument(
            "--json",
            dest="as_json",
            action="store_true",
            help="Wait for the end and print one JSON summary line on stdout (other output goes to stderr).",
        )
        parser.add_argument(
            "--no-cluster-check", action="store_true", help="Launch even when no qcluster seems to be running."
        )

    def handle(self, *args, file, cap, budget, policy, watch, as_json, no_cluster_check, approval=None, **options):
        # With --json, stdout carries exactly one JSON line; everything meant for people goes to stderr.
        messages = self.stderr._out if as_json else self.stdout._out
        try:
            settings = RunSettings.of(cap=cap, budget_usd=budget, failure_policy=policy, require_plan_approval=approval)
        except InvalidRunSetting as error:
            raise CommandError(f"Run not launched: {error}") from None
        run = self.launch(file, settings=settings, check_cluster=not no_cluster_check)
        console.write_line(messages, f"Launched run {run.pk} ({counted(run.tasks.count(), 'task')}, cap {run.cap})")
        if run.status == Run.Status.AWAITING_APPROVAL:
            checkpoint = run.checkpoints.get()
            console.write_line(
                messages,
                f"It waits for its plan's approval (plan version {checkpoint.plan_version}): "
                f"{console.decide_hint(checkpoint.pk)}. `--no-approval` launches without it.",
            )
        if not (watch or as_json):
            console.write_line(messages, f"Follow it with `{console.MANAGE} run_status {run.pk}` or in the dashboard.")
            return
        if watch:
            console.write_line(messages, "Ctrl-C stops watching; the run goes on.")
        try:
            final = console.watch(run, messages=messages, bar_stream=self.stderr._out if watch else None)
        except console.StoppedWatching as stopped:
            console.write_line(messages, str(stopped))
            raise SystemExit(STOPPED_WATCHING_EXIT) from None
        self.report_end(run, final, as_json=as_json, messages=messages)

    def launch(self, path: str, *, settings: RunSettings, check_cluster: bool) -> Run:
        """Validate the plan (problems reported as validate_plan does), then save it and start the run
        together; without a cluster, or when the launch is refused, nothing is saved."""
        spec, document = load_or_fail(path)
        if check_cluster and not cluster_is_running():
            raise CommandError(NO_CLUSTER_MESSAGE, returncode=NO_CLUSTER_EXIT)
        try:
            return launching.launch_spec(
                spec,
                document=document,
                settings=settings,
                source_name=Path(path).name,
                actor_name=console.cli_actor(),
            )
        except plans.PlanValidationError as error:
            raise CommandError(error.report(path), returncode=1) from None
        except runs.ActionError as error:
            raise CommandError(f"Run not launched: {error}\nNothing was saved.", returncode=1) from None
        except DatabaseError as error:
            raise database_unavailable(error, doing="save the plan") from None

    def report_end(self, run: Run, final, *, as_json: bool, messages) -> None:
        line = (
            f"Run {run.pk} {console.status_text(run, final.status)}: {console.progress_counts(final)}; "
            f"{console.not_started(run) or f'elapsed {console.elapsed_text(run, final)}'}, cost {console.usd(final.cost_usd)}"
        )
        if stopping := stopping_text(final.attempts_stopping):
            line += f" ({stopping})"
        console.write_line(messages, line)
        if final.summary:
            console.write_line(messages, final.summary)
        if as_json:
            self.stdout.write(json.dumps(console.run_summary(run, final)))
        if final.status != Run.Status.SUCCEEDED:
            raise SystemExit(1)
