"""The whole record of one run, for people to download: JSON (`glassbox.run/1`) and Markdown.

`RunExport` is built from the records of orchestrator/readmodels/records.py (its checkpoints'
from checkpoint_event_records.py), so the download has the same fields and formats as the JSON
API, plus the path of every agent that took steps (`paths`: its steps as the glass box shows them,
orchestrator/readmodels/steps.py). `run_markdown` writes the same content as a document: the final
output first, then every task's, each with the path of every attempt that called a tool. A task's text that is not its result (the
partial text of a failed, timed-out or cancelled attempt, or an output its review rejected) is
labelled as such in both, as the run page heads it: in the JSON it is `partial_output.text`, and
the task's `output` is null.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal, Self

from orchestrator import wording
from orchestrator.models import Event, Run, TaskRun

from .checkpoint_event_records import CheckpointRecord
from .live_tokens import NO_LIVE_TOKENS, live_tokens
from .records import AgentRecord, PartialOutputRecord, PlanRecord, Record, RunRecord, TaskRunRecord
from .snapshot import read_snapshot
from .steps import STEP_EVENT_TYPES, STOP_WORDS, PathRow, ended_numbers, rows_of
from .tasks import outcome_text, rejected_at_gate, run_tokens
from .totals import attempts_stopping, stopping_text

EXPORT_FORMAT = "glassbox.run/1"


def run_tasks(run: Run) -> list[TaskRun]:
    """The run's tasks in plan order, with subtask, agent and attempts read in three queries."""
    return list(run.tasks.select_related("subtask", "agent").prefetch_related("attempts").order_by("subtask__position"))


def task_run_records(tasks: Iterable[TaskRun]) -> list[TaskRunRecord]:
    """The records of tasks read by `run_tasks` (their attempts prefetched), each with what its
    running attempt has used so far, as the run page's task panel counts it (one more query, when
    a task runs). Read them in the snapshot the tasks were read in (`read_snapshot`): a settled
    attempt is then counted in its task's tokens or as running, never both."""
    tasks = list(tasks)
    live = live_tokens(tasks)
    return [
        TaskRunRecord.of(t, sorted(t.attempts.all(), key=lambda a: a.number), live.get(t.pk, NO_LIVE_TOKENS))
        for t in tasks
    ]


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


class PathStepRecord(Record):
    """One row of an agent's path: a text, a model call, a tool call with its approval and result
    (the result as its audit event keeps it: a long one is cut, `result_chars` says how long it
    was), a refused call, a stop, or a model call's wait for the provider's budget (`wait`: the
    wait's code, e.g. rate_limit_requests; `duration_s`: how long, null while it lasts or when
    the attempt's end cut it off; a tool call's: its own time, from the moment its server was ready,
    and `server_start_s` how long it waited for its server to start, null when it was running
    already). `cut_off`: a call or a wait that the attempt's end cut off (it
    was cancelled or lost): no result, no end of its own, and not going on."""

    attempt: int | None
    step: int
    kind: Literal["text", "model", "call", "refused", "stopped", "wait"]
    text: str
    tool: str  # the name the model used
    server: str
    server_tool: str  # the tool's name on its server
    arguments: Any
    approval_required: bool
    approved: bool | None
    decided_by: str
    comment: str
    result: str
    result_chars: int
    truncated: bool
    is_error: bool
    duration_s: float | None
    server_start_s: float | None
    stop_reason: str
    input_tokens: int | None
    output_tokens: int | None
    wait: str
    cut_off: bool

    @classmethod
    def of(cls, row: PathRow) -> Self:
        return cls(**{name: getattr(row, name) for name in cls.model_fields})


def run_paths(run: Run, tasks: Iterable[TaskRun]) -> dict[str, list[PathStepRecord]]:
    """The path of each task whose agent took steps, by task key (one query for the whole run;
    the tasks' attempts prefetched, as `run_tasks` reads them)."""
    by_task: dict[int, list[Event]] = defaultdict(list)
    for event in Event.objects.filter(run=run, type__in=STEP_EVENT_TYPES).order_by("seq", "id"):
        by_task[event.task_run_id].append(event)
    return {
        task.subtask.key: [
            PathStepRecord.of(row) for row in rows_of(by_task[task.pk], ended_numbers(task.attempts.all()))
        ]
        for task in tasks
        if by_task.get(task.pk)
    }


class RunExport(Record):
    format: Literal["glassbox.run/1"]
    run: RunRecord
    plan: PlanRecord
    agents: list[AgentRecord]
    tasks: list[TaskRunRecord]
    final_tasks: list[str]
    checkpoints: list[CheckpointRecord]
    paths: dict[str, list[PathStepRecord]]

    @classmethod
    def of(cls, run: Run) -> Self:
        """The run's whole record, read as of one moment (`read_snapshot`)."""
        with read_snapshot():
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
                paths=run_paths(run, tasks),
            )


def run_export(run: Run) -> dict[str, Any]:
    """The JSON download of a run: plain JSON values, ready for json.dumps."""
    return RunExport.of(run).model_dump(mode="json")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# How much of a step's text, arguments or result one line of the Markdown path shows.
PATH_LINE_CHARS = 200


def _short(text: str) -> str:
    text = _one_line(text)
    return text if len(text) <= PATH_LINE_CHARS else text[: PATH_LINE_CHARS - 1] + "…"


def _seconds(value: float | None) -> str:
    return f" ({value:.1f} s)" if value is not None else ""


def path_line(step: dict[str, Any]) -> str:
    """One step of a path as a Markdown list item (inline code for what the agent sent and got)."""
    head = f"- Step {step['step']}"
    if step["kind"] == "text":
        return f"{head}, said: {_short(step['text'])}"
    if step["kind"] == "model":
        tokens = step["input_tokens"], step["output_tokens"]
        spent = f", {tokens[0]:,} in / {tokens[1]:,} out tokens" if None not in tokens else ""
        reason = STOP_WORDS.get(step["stop_reason"], step["stop_reason"].replace("_", " ")) or "no stop reason"
        return f"{head}, model call: {reason}{spent}{_seconds(step['duration_s'])}"
    if step["kind"] == "wait":  # "held", not "waiting": a download outlives the wait
        until = " until the attempt ended" if step["cut_off"] else ""
        return f"{head}, model call held by {wording.rate_wait(step['wait'])}{until}{_seconds(step['duration_s'])}"
    given = step["arguments"]
    cut = isinstance(given, dict) and given.get("_cut")  # the event kept the start of the JSON only
    arguments = _short(str(given.get("json", "")) if cut else json.dumps(given, ensure_ascii=False, sort_keys=True))
    if step["kind"] == "refused":
        return f"{head}, refused `{step['tool']}` `{arguments}`: {_short(step['text'])}"
    if step["kind"] == "stopped":
        return f"{head}, stopped: {_short(step['text'] or step['stop_reason'])}"
    name = f"{step['server']}:{step['server_tool'] or step['tool']}" if step["server"] else step["tool"]
    line = f"{head}, called `{name}` `{arguments}`"  # named as the page names it
    if step["approval_required"]:
        undecided = "not decided" if step["cut_off"] else "awaiting approval"
        decision = {True: "approved", False: "rejected", None: undecided}[step["approved"]]
        line += f", {decision}" + (f" by {step['decided_by']}" if step["decided_by"] else "")
        line += f" ({_short(step['comment'])})" if step["comment"] else ""
    if step["result"] or step["result_chars"]:
        outcome = "error" if step["is_error"] else "result"
        more = (
            f", {step['result_chars']:,} characters"
            if step["truncated"] or step["result_chars"] > len(step["result"])
            else ""
        )
        line += f" → {outcome}{more}: `{_short(step['result'])}`"
    elif step["cut_off"] and step["approval_required"] and step["approved"] is None:
        line += ", not run: the attempt ended first"
    elif step["cut_off"]:
        line += ", cut off: the attempt ended with no result"
    if step["duration_s"] is not None and step["approved"] is not False:  # a rejected call was not run
        return line + f" ({wording.tool_call_outcome(step['is_error'], step['duration_s'], step['server_start_s'])})"
    return line


def _when(moment: datetime | None, otherwise: str) -> str:
    """A moment as a reader reads it, as the pages say it: "2026-11-28 10:53:26 UTC" (it was the
    JSON's "2026-11-28T10:53:26.368409+00:00")."""
    return wording.moment(moment) if moment else otherwise


def tokens_text(run: Run) -> str:
    """The run's tokens as its page's Tokens card counts them (`run_tokens`): of a run under way,
    "tokens so far: 1,035 (1,027 in, 0 out, 8 streaming)", its running attempts' input and
    streamed output included; of an ended run, "tokens: 1,067 (1,027 in, 40 out)", and what its
    attempts still stopping will add ("1 attempt still stopping: not counted yet")."""
    tokens = run_tokens(run)
    streaming = f", {tokens.streaming:,} streaming" if tokens.streaming else ""
    counted = f"{tokens.total:,} ({tokens.input_so_far:,} in, {tokens.output:,} out{streaming})"
    if not run.is_finished:
        return f"tokens so far: {counted}"
    stopping = stopping_text(attempts_stopping(run))
    return f"tokens: {counted}" + (f"; {stopping}" if stopping else "")


def tasks_outcome(run: Run, tasks: list[dict]) -> str:
    """How the run's tasks came out, as its page's Tasks card and the runs list say it: "2 of 4
    succeeded · 1 cancelled, 1 skipped (b rejected at its gate)" (the document said "Tasks: 4",
    whatever became of them)."""
    counts = Counter(task["state"] for task in tasks)
    rejected = rejected_at_gate([run.pk]).get(run.pk, []) if counts.get(TaskRun.State.SKIPPED) else []
    return outcome_text(counts, len(tasks), rejected)


# The steps that make a path worth reading: a tool call, a call the runtime refused, or a model
# call's wait for the provider's budget (only a call after a tool's result waits: the first call
# was admitted with its budget).
PATH_STEP_KINDS = ("call", "refused", "wait")


def tool_paths(path: list[dict[str, Any]]) -> list[tuple[int | None, list[dict[str, Any]]]]:
    """A task's path per attempt (by number, those without one last), keeping only the attempts
    that took a tool step. An attempt that answered without calling a tool records its text and its
    model call and nothing else: its "Path" repeated the output above it and read as if the agent
    had acted."""
    by_attempt: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for step in path:
        by_attempt[step["attempt"]].append(step)
    return [
        (number, steps)
        for number, steps in sorted(by_attempt.items(), key=lambda item: (item[0] is None, item[0] or 0))
        if any(step["kind"] in PATH_STEP_KINDS for step in steps)
    ]


def run_markdown(run: Run) -> str:
    """The run's result as a Markdown document: the final output first, then every task's.

    Agent output is copied as written (it is Markdown already); titles and the goal are put
    on one line so that they cannot break the document's headings. Read as of one moment: its
    tokens and its tasks agree.
    """
    with read_snapshot():
        data = run_export(run)
        now = Run.objects.get(pk=run.pk)
        tokens = tokens_text(now)
        outcome = tasks_outcome(now, data["tasks"])
    r = data["run"]
    finals = set(data["final_tasks"])
    lines = [
        f"# Run {r['id']}: {_one_line(r['goal'])}",
        "",
        f"- Status: {r['status']}" + (f" ({_one_line(r['summary'])})" if r["summary"] else ""),
        f"- Started: {_when(now.started_at, 'not started')}; finished: {_when(now.finished_at, 'not finished')}",
        f"- Cost: {wording.usd(r['cost_usd'])} of a {wording.budget(r['budget_usd'])} budget; {tokens}",
        *([f"  - {r['unpriced_note']}"] if r["unpriced_note"] else []),
        f"- Tasks: {outcome}",
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
        if partial := task["partial_output"]:  # as the page heads it, so that it is not read as the result
            lines += [f"_{partial['heading']}: {PartialOutputRecord(**partial).what}._", ""]
            lines += [below_heading(partial["text"].rstrip(), level), ""]
        elif task["output"]:
            lines += [below_heading(task["output"].rstrip(), level), ""]
        elif task["error"]:
            lines += [f"_No output: {_one_line(task['error'])}_", ""]
        else:
            lines += ["_No output._", ""]
        for number, steps in tool_paths(data["paths"].get(task["key"], [])):
            label = f"attempt {number}" if number is not None else "steps without an attempt number"
            lines += [f"Path ({label}):", ""]
            lines += [path_line(step) for step in steps]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX_HEADING = re.compile(r"^( {0,3})(#{1,6})(?=\s|$)")
# A setext heading's underline: "===" makes its paragraph a level-1 heading, "---" a level-2 one.
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# A horizontal rule ("---", "* * *", "___"): one that no paragraph line sits on stays a rule.
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# A line that opens a block quote or a list item: the lines after it belong to that block (a
# "---" under them is a rule, not an underline), until a blank line.
_CONTAINER = re.compile(r"^ {0,3}(?:>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))")
# The second row of a table ("| --- | :-: |"): the line above is its header, not a paragraph.
_TABLE_DELIMITER = re.compile(r"^ {0,3}(?=[^|]*\|)\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
# Of the ordered list items only one numbered 1 may interrupt a paragraph ("in 2021. The" may not).
_INTERRUPTS = re.compile(r"^ {0,3}(?:>|[-+*](?:[ \t]|$)|1[.)](?:[ \t]|$))")


def _atx(indent: str, level: int, text: str) -> str:
    """An ATX heading of `level` (at most "######"); a "#" ending the text is escaped, or it would
    read as the heading's closing sequence and be dropped."""
    text = re.sub(r"(^|\s)(#+)$", r"\1\\\2", text)
    return f"{indent}{'#' * min(6, level)} {text}".rstrip()


def below_heading(text: str, level: str) -> str:
    """An agent's Markdown put under a heading of `level` ("###"): its own headings moved down
    below it (its "## Findings" becomes "#### Findings", never past "######"), code blocks left
    as they are. Its "##" headings sat under the task's "###" and broke the document's outline.

    Its setext headings ("Findings" underlined with "===" or "---") are moved down the same way,
    written as ATX headings ("#### Findings": an underline has no level past 2). A "---" that
    underlines no paragraph line (after a blank line, a heading, a list item) is a horizontal rule
    and stays one."""
    depth = len(level)
    lines: list[str] = []
    fence = ""
    paragraph: list[int] = []  # the indexes in `lines` of the open paragraph's lines
    in_container = False  # the lines follow a list item or a block quote's first line
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
        elif opened:
            fence, paragraph, in_container = opened.group(1), [], False
        elif not line.strip():
            paragraph, in_container = [], False
        elif paragraph and (underline := _SETEXT_UNDERLINE.match(line)):
            first = lines[paragraph[0]]
            words = " ".join(lines[i].strip() for i in paragraph)
            del lines[paragraph[0] :]
            demoted = depth + (1 if underline.group(1)[0] == "=" else 2)
            line, paragraph = _atx(first[: len(first) - len(first.lstrip(" "))], demoted, words), []
        elif paragraph and _TABLE_DELIMITER.match(line):  # the paragraph was a table's header row
            paragraph, in_container = [], True
        elif heading := _ATX_HEADING.match(line):
            hashes = "#" * min(6, len(heading.group(2)) + depth)
            line = heading.group(1) + hashes + line[heading.end() :]
            paragraph, in_container = [], False
        elif _THEMATIC_BREAK.match(line):
            paragraph, in_container = [], False
        elif (_INTERRUPTS if paragraph else _CONTAINER).match(line):
            paragraph, in_container = [], True
        elif paragraph:
            paragraph.append(len(lines))
        elif not in_container and not line.startswith("    ") and not line.startswith("\t"):
            paragraph = [len(lines)]  # indented four spaces it would be code
        lines.append(line)
    return "\n".join(lines)
