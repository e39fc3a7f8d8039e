"""What the management commands share: id lookups, tables, money and time, the watch loop.

The commands stay thin: they parse arguments, call `orchestrator.engine.runs` / `orchestrator.plans`,
and print through the helpers here so that every command words and formats things alike.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import IO, Any

from django.core.management.base import CommandError
from django.utils import timezone
from tqdm import tqdm

from orchestrator import wording
from orchestrator.engine import checkpoint_questions, runs, tool_approvals
from orchestrator.engine.run_settings import InvalidRunSetting, parse_budget, parse_cap
from orchestrator.models import Checkpoint, Run, TaskRun
from orchestrator.readmodels import run_labels
from orchestrator.readmodels.tasks import RETRYING, WAITING, outcome_text, rejected_at_gate
from orchestrator.readmodels.totals import run_idle_text

MANAGE = "python manage.py"
WATCH_POLL_S = 0.5
# Once a run has ended, how long a watch waits for its attempts still stopping (a cancel reaches a
# running attempt at its next beat, which then adds what it used to the run's totals).
STOPPING_WAIT_S = 10.0


# --- Lookups -------------------------------------------------------------------------------------


def get_run(run_id: int) -> Run:
    try:
        return Run.objects.select_related("plan").get(pk=run_id)
    except Run.DoesNotExist:
        raise CommandError(f"No run with id {run_id}. `{MANAGE} runs` lists the runs.") from None


def get_checkpoint(checkpoint_id: int) -> Checkpoint:
    try:
        return Checkpoint.objects.select_related("run", "task_run__subtask").get(pk=checkpoint_id)
    except Checkpoint.DoesNotExist:
        raise CommandError(
            f"No checkpoint with id {checkpoint_id}. `{MANAGE} run_status RUN` lists a run's pending checkpoints."
        ) from None


def run_action(action: Callable[..., Any], run_id: int) -> Run:
    """Apply a runs.py action (pause, resume, cancel) to a run as the command line's user
    (`cli_actor`); an ActionError becomes a CommandError."""
    run = get_run(run_id)
    _as_cli(action, run)
    run.refresh_from_db()
    return run


def get_task(run: Run, key: str) -> TaskRun:
    """The run's task of this key in the plan; a CommandError naming the keys it has otherwise."""
    task = run.tasks.select_related("subtask", "agent").filter(subtask__key=key).first()
    if task is None:
        keys = list(run.tasks.order_by("subtask__position").values_list("subtask__key", flat=True))
        shown = ", ".join(keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")
        raise CommandError(f"Run {run.pk} has no task {key!r}: its tasks are {shown}.")
    return task


def task_action(action: Callable[..., Any], run_id: int, key: str) -> TaskRun:
    """Apply a task control (retry, skip, re-run) to the run's task `key` as the command line's
    user (`cli_actor`); an ActionError becomes a CommandError. The task as it is after."""
    task = get_task(get_run(run_id), key)
    _as_cli(action, task)
    task.refresh_from_db()
    return task


def _as_cli(action: Callable[..., Any], target) -> None:
    """`action` on `target` as the command line's user; its refusal becomes a CommandError."""
    try:
        action(target, user=None, actor_name=cli_actor())
    except runs.ActionError as error:
        raise CommandError(error.sentence) from None


def decide_checkpoint(checkpoint_id: int, *, approve: bool, comment: str) -> Checkpoint:
    """Approve or reject a checkpoint through runs.decide; its refusals become CommandErrors."""
    checkpoint = get_checkpoint(checkpoint_id)
    try:
        # As no user (separation of duties has no one to compare), named as the command line.
        return runs.decide(checkpoint, approve=approve, user=None, actor_name=cli_actor(), comment=comment)
    except runs.ActionError as error:
        raise CommandError(error.sentence) from None


# --- Formatting ----------------------------------------------------------------------------------


def usd(amount: Decimal | float | int | None) -> str:
    """Dollars as the pages show them (orchestrator/wording.py): a fraction of a cent is never $0.00."""
    return wording.usd(amount)


def budget(amount: Decimal | float | int | None) -> str:
    """A budget as the pages show it: $0.50, not $0.5000 (orchestrator/wording.py)."""
    return wording.budget(amount)


def status_text(run: Run, status: str) -> str:
    """A run's status as the run page words it, in lower case: "awaiting approval", "over budget",
    "plan rejected" for a run ended by its plan's rejection (readmodels/run_labels.py; the `--json`
    outputs keep the engine's name: "awaiting_approval", "cancelled")."""
    if status == Run.Status.CANCELLED and run_labels.plan_rejected([run.pk]):
        return run_labels.PLAN_REJECTED.lower()
    return Run.Status(status).label.lower()


def not_started(run: Run) -> str:
    """What a run that has not started says instead of its elapsed time, as the run page says it:
    "not started (waits for the plan's approval)", "never started" (ended before it started);
    "" once it has started."""
    if run.started_at is not None:
        return ""
    if run.status == Run.Status.AWAITING_APPROVAL:
        return "not started (waits for the plan's approval)"
    return "never started"


def elapsed_text(run: Run, progress) -> str:
    """A run's elapsed time as the run page gives it: wall-clock, with how much of it the run was
    paused or lay ended ("3 min 02 s (38 s of it paused)"), or what a run not started says instead."""
    if waiting := not_started(run):
        return waiting
    idle = run_idle_text(run)
    return wording.duration(progress.elapsed_s) + (f" ({idle})" if idle else "")


def timestamp(moment) -> str:
    """A time in the local time zone (settings.TIME_ZONE, UTC), to the second and named as the
    pages name it ("2026-11-28 14:48:10 UTC"); "-" when unset."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def shorten(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain text table: columns left-aligned, padded to the widest cell, a rule under the header."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(value.ljust(width) for value, width in zip(values, widths, strict=False)).rstrip()

    return "\n".join([line(headers), line(["-" * width for width in widths]), *(line(row) for row in cells)])


TOOL_ARGUMENTS_WIDTH = 160


def checkpoint_target(checkpoint: Checkpoint) -> str:
    """What a checkpoint asks, in the run page's words (engine/checkpoint_questions), then the key
    of its task; a tool call with its arguments on one line, shortened: enough to see what the
    call would do."""
    task = checkpoint.task_run
    if task is None:
        return checkpoint_questions.question(checkpoint).text()
    if checkpoint.kind == Checkpoint.Kind.TOOL:
        arguments = shorten(tool_approvals.arguments_json(checkpoint), TOOL_ARGUMENTS_WIDTH)
        return f'{tool_approvals.describe(checkpoint)} with {arguments} (task "{task.subtask.key}")'
    return f'{checkpoint_questions.question(checkpoint).text()} (task "{task.subtask.key}")'


def decide_hint(checkpoint_id: int) -> str:
    return f"{MANAGE} approve {checkpoint_id}   or   {MANAGE} reject {checkpoint_id} --comment {shlex.quote('why')}"


def checkpoint_line(checkpoint: Checkpoint) -> str:
    """One pending checkpoint and the commands that decide it."""
    return f"Checkpoint {checkpoint.pk} waits — {checkpoint_target(checkpoint)}. Decide: {decide_hint(checkpoint.pk)}"


# The counts of tasks under way (RunProgress's fields), each said by its state's label as the run
# page says it (wording.TASK_STATE_LABELS).
UNDER_WAY = (
    ("running_now", TaskRun.State.RUNNING),
    ("queued", TaskRun.State.QUEUED),
    ("ready_now", TaskRun.State.READY),
    ("held_back", WAITING),
    ("retrying", RETRYING),
    ("throttled", TaskRun.State.THROTTLED),
    ("needs_approval", TaskRun.State.WAITING_GATE),
    ("in_review", TaskRun.State.AWAITING_REVIEW),
    ("pending", TaskRun.State.PENDING),
)


def progress_counts(progress) -> str:
    """How the run's tasks came out, as the runs list words it ("5 of 22 succeeded · 17
    cancelled"), then those still under way ("2 running, 1 pending"): a cancelled, skipped or
    failed task is never counted as done."""
    ended: dict[str, int] = {
        TaskRun.State.SUCCEEDED: progress.succeeded,
        TaskRun.State.FAILED: progress.failed,
        TaskRun.State.CANCELLED: progress.cancelled,
        TaskRun.State.SKIPPED: progress.skipped,
    }
    under_way = [
        f"{getattr(progress, name)} {wording.TASK_STATE_LABELS[state]}"
        for name, state in UNDER_WAY
        if getattr(progress, name)
    ]
    rejected = rejected_at_gate([progress.run_id]).get(progress.run_id, []) if progress.skipped else []
    outcome = outcome_text(ended, progress.total, rejected)
    return " · ".join([outcome, *([", ".join(under_way)] if under_way else [])])


def run_summary(run: Run, progress) -> dict[str, Any]:
    """The machine-readable end-of-run summary printed by `launch --json`."""
    return {
        "run": run.pk,
        "status": progress.status,
        "tasks": progress.total,
        "succeeded": progress.succeeded,
        "failed": progress.failed,
        "skipped": progress.skipped,
        "cancelled": progress.cancelled,
        "elapsed_s": round(float(progress.elapsed_s or 0), 3),
        "cost_usd": float(progress.cost_usd or 0),
        "input_tokens": progress.input_tokens,
        "output_tokens": progress.output_tokens,
        "summary": progress.summary,
    }


# --- Watching a run ------------------------------------------------------------------------------


class StoppedWatching(Exception):
    """Ctrl-C while watching: the watcher stops, the run goes on."""


def watch(
    run: Run,
    *,
    messages: IO[str],
    bar_stream: IO[str] | None,
    poll_s: float = WATCH_POLL_S,
):
    """Follow a run until it finishes and return its final RunProgress.

    With `bar_stream`, draws a tqdm bar filled by the succeeded tasks, followed by
    `progress_counts` and the time elapsed. A `bar_stream` that is not a terminal (a log file, a
    pipe, CI) gets a line each time the counts change instead: a bar redrawn twice a second
    there is the same line over and over, thousands of them for a long run.
    Every checkpoint that starts waiting is announced once on `messages`, with the commands
    that decide it, so that a gated plan never hangs silently. Ctrl-C raises StoppedWatching.
    """
    announced: set[int] = set()
    bar = None
    ended_at = None
    draws_bar = bar_stream is not None and bar_stream.isatty()
    last_line: tuple[str, str] | None = None
    try:
        while True:
            current = runs.progress(run)  # re-reads the run
            tasks, waiting = progress_counts(current), not_started(run)
            counts = f"{tasks}, {waiting or f'elapsed {elapsed_text(run, current)}'}"
            if bar_stream is not None and not draws_bar and (tasks, waiting) != last_line:
                last_line = (tasks, waiting)
                write_line(bar_stream, f"Run {run.pk}: {counts}")
            if bar is None and draws_bar:
                bar = tqdm(
                    total=current.total,
                    desc=counts,
                    unit="task",
                    file=bar_stream,
                    dynamic_ncols=True,
                    # The text after the bar is its "description": tqdm puts ", " before a postfix.
                    bar_format=f"Run {run.pk}: {{percentage:3.0f}}%|{{bar}}| {{desc}}",
                )
            if bar is not None:
                # The bar fills with succeeded tasks only: a cancelled run's never reads 100%.
                bar.total, bar.n = current.total, current.succeeded
                bar.set_description_str(counts, refresh=False)
                bar.refresh()
            for checkpoint in current.pending_checkpoints:
                if checkpoint.pk not in announced:
                    announced.add(checkpoint.pk)
                    write_line(messages, checkpoint_line(checkpoint), bar)
            if current.status in Run.FINISHED:
                ended_at = ended_at or time.monotonic()
                if not current.attempts_stopping or time.monotonic() - ended_at >= STOPPING_WAIT_S:
                    return current
            time.sleep(poll_s)
    except KeyboardInterrupt:
        raise StoppedWatching(
            f"Stopped watching. Run {run.pk} goes on: `{MANAGE} run_status {run.pk}` shows it, "
            f"`{MANAGE} cancel {run.pk}` stops it."
        ) from None
    finally:
        if bar is not None:
            bar.close()


def write_line(stream: IO[str], text: str, bar: tqdm | None = None) -> None:
    """Print a line without tearing the progress bar (tqdm redraws it below the line)."""
    if bar is not None:
        bar.write(text, file=stream)
    else:
        stream.write(text + "\n")
        stream.flush()


# --- Argument types shared by the commands ------------------------------------------------------


def cap_argument(value: str) -> int:
    """--cap: a whole number within the run settings' limits."""
    return _run_setting(parse_cap, value)


def budget_argument(value: str) -> Decimal:
    """--budget: an amount in USD within the run settings' limits."""
    return _run_setting(parse_budget, value)


def _run_setting(parse: Callable[[str], Any], value: str) -> Any:
    try:
        return parse(value)
    except InvalidRunSetting as error:
        raise argparse.ArgumentTypeError(error.problem) from None


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def cli_actor() -> str:
    """Who runs a command, for the audit log: ``cli:`` and the operating-system user."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return f"cli:uid-{os.getuid()}"
