"""A task's path, read back from its audit events: what the glass box shows of an agent that acts.

The agent loop (orchestrator/engine/agent_loop.py) reports every step; the runtime records each as
an event of the task. This module turns those events back into rows: a call joined with its
approval and its result, in the order the agent took them, per attempt, and the task's current
activity for its DAG node and its row ("step 3 · calling lookup"). A call put to a person is read
from its tool checkpoint too (`with_tool_checkpoints`): the steps are written behind the agent, and
the checkpoint is what the task waits on.

The contract with the runtime (what it must write, per attempt ``n`` of a task):

* one event per ``Step``: ``events.record(step.event_type, task=task, actor_name="agent:<name>",
  message=step.sentence(), payload={**step.payload(), "attempt": n})``, in the order the loop
  reports them (``agent.text``, ``tool.call``, ``tool.approval``, ``tool.result``,
  ``tool.refused``, ``agent.model_call``, ``agent.stopped``), and the runtime's own waits before a
  model call the same way (``agent.rate_wait`` when a provider's budget or backoff holds the call,
  naming the wait's code; ``agent.rate_waited`` when the wait ends, with ``duration_s``): one row;
* for a ``tool_result`` step, *before* its event: ``full_results.keep(run_id, task_id, n,
  step.call_id, step.result_full)`` (orchestrator/tools/full_results.py). It writes a file only
  when the whole result is longer than the event's preview; the attempt's detail page reads it
  back (:func:`whole_result`), and says so when a cut result was not kept.

A wait whose attempt ended without its end (a lost worker writes none) is shown as over, never as
still waiting: the rows are read with the numbers of the attempts that ended (``ended``).

Each row has a stable DOM id (``path-<seq of its first event>``): the live view sends a row again
when a later event completes it (a call's result) and appends it when it is new.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator import wording
from orchestrator.models import Attempt, Checkpoint, Event, TaskRun
from orchestrator.tools import full_results

STEP_EVENT_TYPES = (
    "agent.text",
    "tool.call",
    "tool.approval",
    "tool.result",
    "tool.refused",
    "agent.model_call",
    "agent.stopped",
    "agent.rate_wait",
    "agent.rate_waited",
)
# The wait code (engine/waits.py: codes are data, never renamed) of a running task whose agent waits
# for a person to approve a tool call: its pending tool checkpoint says which call.
TOOL_APPROVAL = "tool_approval"
# How much of a result the task panel shows (the event keeps more, the attempt's detail all).
PANEL_RESULT_CHARS = 800
# A model call's stop reason, in words (others are shown as they are).
STOP_WORDS = {
    "end_turn": "ended its turn",
    "tool_use": "asked for tools",
    "max_tokens": "reached its output limit (max tokens)",
    "stop_sequence": "reached a stop sequence",
    "pause_turn": "paused its turn",
    "refusal": "refused to answer",
}


def _kept(preview: str) -> int:
    """The characters of a cut text that its preview holds: the preview less its closing "…"."""
    return len(preview) - 1 if preview.endswith("…") else len(preview)


@dataclass
class PathRow:
    """One row of a task's path: a text, a model call, a tool call (with its approval and
    result), a refusal, a stop, or a model call's wait for the provider's budget."""

    step: int
    kind: str  # "text", "model", "call", "refused", "stopped", "wait"
    attempt: int | None
    text: str = ""
    text_chars: int = 0
    call_id: str = ""
    tool: str = ""
    server: str = ""
    server_tool: str = ""
    arguments: Any = None
    approval_required: bool = False
    approved: bool | None = None
    comment: str = ""
    decided_by: str = ""
    approval_wait_s: float | None = None
    result: str = ""
    result_chars: int = 0
    truncated: bool = False
    is_error: bool = False
    duration_s: float | None = None  # a tool call's own time (its server's start-up apart)
    server_start_s: float | None = None  # how long a tool call waited for its server to start
    stop_reason: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    done: bool = False  # a call whose result has arrived; a wait that ended
    wait: str = ""  # what held a model call back: its wait's code (engine/waits.py)
    wait_cut: bool = False  # a wait its attempt's end cut off (no end of its own)
    call_cut: bool = False  # a call its attempt's end cut off (cancelled, lost: no result recorded)
    cut_by: str = ""  # a model call its attempt's end cut off: how the attempt ended ("cancelled")
    whole: str | None = None  # the whole result, read for the attempt's detail (with_whole_results)
    seqs: list[int] = field(default_factory=list)

    @property
    def dom_id(self) -> str:
        return f"path-{self.seqs[0] if self.seqs else 0}"

    @property
    def result_cut(self) -> bool:
        """The row shows part of the result only (the whole is on the attempt's detail page)."""
        return self.truncated or self.result_chars > len(self.result) or len(self.result) > full_results.PREVIEW_CHARS

    @property
    def result_shown(self) -> str:
        """The result as the task panel shows it: its start, when it is long."""
        cut = self.result[:PANEL_RESULT_CHARS]
        return cut + "…" if len(cut) < len(self.result) and not cut.endswith("…") else cut

    @property
    def panel_cuts_result(self) -> bool:
        return self.result_cut or len(self.result) > PANEL_RESULT_CHARS

    @property
    def arguments_text(self) -> str:
        """The arguments as indented JSON (the start of it, when the event kept only that)."""
        if isinstance(self.arguments, dict) and self.arguments.get("_cut"):
            return str(self.arguments.get("json", ""))
        return json.dumps(self.arguments, indent=2, ensure_ascii=False, sort_keys=True, default=str)

    @property
    def arguments_short(self) -> bool:
        """Short enough to show open in the panel (a few lines)."""
        text = self.arguments_text
        return len(text) <= 300 and text.count("\n") <= 8

    @property
    def arguments_chars(self) -> int | None:
        """The size of arguments the event kept only the start of (None: kept whole)."""
        if isinstance(self.arguments, dict) and self.arguments.get("_cut"):
            return int(self.arguments.get("_chars") or 0)
        return None

    @property
    def text_kept(self) -> int | None:
        """How many characters of the model's text the event kept, when it kept only their start
        (None: the whole text). The "…" that ends a cut text marks the cut and is not counted:
        "The first 2,001 of 2,040 characters" was one more than the agent's."""
        return _kept(self.text) if self.text_chars > len(self.text) else None

    @property
    def arguments_kept(self) -> int:
        """How many characters of the arguments' JSON an event that cut them kept (see text_kept)."""
        return _kept(self.arguments_text)

    @property
    def cut_off(self) -> bool:
        """A call or a wait that its attempt's end cut off: it neither goes on nor ended itself."""
        return self.wait_cut or self.call_cut

    @property
    def cut_words(self) -> str:
        """What a call its attempt's end cut off came to. One that still waited for a person was
        never run, which matters for a tool that acts (a write, a deploy): "cut off" read as if it
        had started."""
        if self.approval_required and self.approved is None:
            return "not run: the attempt ended before anyone decided"
        return "cut off: the attempt ended"

    @property
    def outcome_words(self) -> str:
        """A tool call's end: "answered in 0.4 s · server started in 2.5 s", "failed after 30 s"."""
        return wording.tool_call_outcome(self.is_error, self.duration_s, self.server_start_s)

    @property
    def calling(self) -> bool:
        """A call still under way: no result yet and its attempt has not ended."""
        return self.kind == "call" and not self.done and not self.call_cut

    @property
    def waiting_for_approval(self) -> bool:
        return self.calling and self.approval_required and self.approved is None

    @property
    def waiting(self) -> bool:
        """A model call still held by the provider's budget or backoff."""
        return self.kind == "wait" and not self.done and not self.wait_cut

    @property
    def wait_words(self) -> str:
        """What the wait waits for: "the provider's request budget"."""
        return wording.rate_wait(self.wait)

    @property
    def stop_words(self) -> str:
        return STOP_WORDS.get(self.stop_reason, self.stop_reason.replace("_", " "))


# What an ended attempt without steps says (AttemptPath.no_steps): where its text is.
NO_STEPS_ENDED = (
    "No steps were recorded (an agent without tools answers in one model call: its text is the output above)."
)
NO_STEPS_KEPT = (
    "No steps were recorded (an agent without tools answers in one model call: its text is kept with it, "
    "under Attempts below)."
)
NO_STEPS_GONE = "No steps were recorded (an agent without tools answers in one model call: its text was not kept)."


@dataclass
class AttemptPath:
    """One attempt's path: its number, its Attempt row (None if it has none yet) and its rows."""

    number: int | None
    attempt: Attempt | None
    rows: list[PathRow]
    # The task's output (the panel's, above its path) is this attempt's text: the task's latest
    # attempt's, while the task holds one. An earlier attempt's text is cleared by the next one's start.
    output_above: bool = False

    @property
    def dom_id(self) -> str:
        return f"path-attempt-{self.attempt.task_run_id if self.attempt else 0}-{self.number or 0}"

    @property
    def calls(self) -> int:
        return sum(1 for row in self.rows if row.kind == "call")

    @property
    def model_calls(self) -> int:
        return sum(1 for row in self.rows if row.kind == "model")

    @property
    def counts_text(self) -> str:
        """The path's calls in words, for the attempt's page: "1 model call, cut off when the
        attempt ended (cancelled) · 0 tool calls"."""
        cut = next((row.cut_by for row in self.rows if row.kind == "model" and row.cut_by), "")
        model = wording.counted(self.model_calls, "model call")
        if cut:
            model += f", {'the last ' if self.model_calls > 1 else ''}cut off when the attempt ended ({cut})"
        whole = " · every tool result whole" if self.calls else ""
        return f"{model} · {wording.counted(self.calls, 'tool call')}{whole}"

    @property
    def approval_wait_s(self) -> float:
        """How long its agent waited for people to decide on its tool calls, by the waits their
        decisions recorded: time its timeout does not count (engine/agent_loop.py, `_Clock`). The
        calls of one step are asked at once and wait together: each step counts its longest wait,
        as the timeout counts overlapping waits once."""
        longest: dict[int, float] = {}
        for row in self.rows:
            if row.kind == "call" and row.approval_wait_s is not None:
                longest[row.step] = max(longest.get(row.step, 0.0), row.approval_wait_s)
        return sum(longest.values())

    @property
    def timeout_note(self) -> str:
        """What its timeout did not count, said beside it: "not counting 45 s waiting for approval"
        ("" when it waited for nobody). An attempt that "took 1 min 17 s" beside "timeout 1 min
        00 s" read as if it had run past its timeout. A wait with no decision recorded goes on, or
        was cut off by the attempt's end: it is not counted either, and said so without a time."""
        waited = wording.duration(self.approval_wait_s) if self.approval_wait_s else ""
        undecided = [row for row in self.rows if row.kind == "call" and row.approval_required and row.approved is None]
        if any(row.waiting_for_approval for row in undecided):
            open_wait = "the wait for approval going on now"
        elif undecided:
            open_wait = "the wait for approval its end cut off"
        else:
            return f"not counting {waited} waiting for approval" if waited else ""
        return f"not counting {waited} waiting for approval, nor {open_wait}" if waited else f"not counting {open_wait}"

    @property
    def ended(self) -> bool:
        """Its attempt ended (neither queued nor running): no step of it will come any more."""
        return self.attempt is not None and self.attempt.state not in (Attempt.State.QUEUED, Attempt.State.RUNNING)

    @property
    def no_steps(self) -> str:
        """What an attempt without rows says: "yet" only while a step may still come. An agent
        without tools answers in one model call and records no steps: said so, as a reader of an
        ended attempt's empty path concluded that the agent had done nothing. An attempt that
        ended before its model wrote a token has no text to point to: it said "its text is the
        output above" over "No output." (a timed-out call), and so did each earlier attempt, over
        the latest one's output: it points to where the text is, or says it is gone. One that ended
        part-way through its first model call records no step either, whether or not its agent
        holds tools: it said "an agent without tools" of a researcher holding the workspace's tools."""
        if not self.ended:
            return "No step recorded yet."
        assert self.attempt is not None  # ended
        state = self.attempt.get_state_display().lower()
        if not self.attempt.output_tokens:
            return f"No steps were recorded: the attempt ended ({state}) before its model wrote anything."
        if self.attempt.state != Attempt.State.SUCCEEDED:
            return (
                f"No steps were recorded: the attempt ended ({state}) during its first model call ({self._text_is()})."
            )
        if self.attempt.output:
            return NO_STEPS_KEPT
        return NO_STEPS_ENDED if self.output_above else NO_STEPS_GONE

    def _text_is(self) -> str:
        """Where an ended attempt's text is, as the NO_STEPS_* sentences say it."""
        assert self.attempt is not None
        if self.attempt.output:
            return "its text is kept with it, under Attempts below"
        if self.output_above:
            return "its text is the output above"
        return "its text was not kept"


def step_events(task: TaskRun, *, attempt: int | None = None) -> list[Event]:
    events = Event.objects.filter(task_run=task, type__in=STEP_EVENT_TYPES)
    if attempt is not None:
        events = events.filter(payload__attempt=attempt)
    return list(events.order_by("seq", "id"))


def rows_of(events: Iterable[Event], ended: Container[Any] = ()) -> list[PathRow]:
    """The path rows of step events given oldest first; `ended`: the numbers of the attempts that
    ended (a wait or a call of theirs left open was cut off by that end: a call whose attempt was
    cancelled or lost has no result, and is not still calling)."""
    rows: list[PathRow] = []
    calls: dict[tuple[Any, str], PathRow] = {}
    held: dict[tuple[Any, int], PathRow] = {}  # waits by (attempt, step)
    for event in events:
        data = event.payload or {}
        step, number, seq = int(data.get("step", 0)), data.get("attempt"), event.seq or 0
        key = (number, str(data.get("call_id", "")))
        base: dict[str, Any] = {"step": step, "attempt": number, "seqs": [seq]}
        if event.type == "agent.text":
            text = data.get("text", "")
            rows.append(PathRow(kind="text", text=text, text_chars=int(data.get("text_chars") or len(text)), **base))
        elif event.type == "agent.model_call":
            rows.append(
                PathRow(
                    kind="model",
                    stop_reason=data.get("stop_reason", ""),
                    duration_s=data.get("duration_s"),
                    input_tokens=data.get("input_tokens"),
                    output_tokens=data.get("output_tokens"),
                    **base,
                )
            )
        elif event.type == "tool.call":
            row = PathRow(
                kind="call",
                call_id=key[1],
                tool=data.get("tool", ""),
                server=data.get("server", ""),
                server_tool=data.get("server_tool", ""),
                arguments=data.get("arguments"),
                approval_required=bool(data.get("approval_required")),
                call_cut=number in ended,
                **base,
            )
            calls[key] = row
            rows.append(row)
        elif event.type in ("tool.approval", "tool.result") and key in calls:
            row = calls[key]
            row.seqs.append(seq)
            if event.type == "tool.approval":
                row.approved, row.comment = data.get("approved"), data.get("comment", "")
                row.decided_by, row.approval_wait_s = data.get("decided_by", ""), data.get("duration_s")
            else:
                row.result, row.result_chars = data.get("result", ""), int(data.get("result_chars", 0))
                row.truncated, row.is_error, row.done = bool(data.get("truncated")), bool(data.get("error")), True
                row.call_cut = False
                row.duration_s, row.server_start_s = data.get("duration_s"), data.get("server_start_s")
        elif event.type == "tool.refused":
            rows.append(
                PathRow(
                    kind="refused",
                    call_id=key[1],
                    tool=data.get("tool", ""),
                    arguments=data.get("arguments"),
                    text=data.get("text", ""),
                    is_error=True,
                    done=True,
                    **base,
                )
            )
        elif event.type == "agent.rate_wait":
            row = PathRow(kind="wait", wait=data.get("wait", ""), wait_cut=number in ended, **base)
            held[(number, step)] = row
            rows.append(row)
        elif event.type == "agent.rate_waited":
            started = held.pop((number, step), None)
            if started is None:  # its start was not written: the end stands for both
                started = PathRow(kind="wait", wait=data.get("wait", ""), **base)
                rows.append(started)
            else:
                started.seqs.append(seq)
            started.done, started.wait_cut, started.duration_s = True, False, data.get("duration_s")
        elif event.type == "agent.stopped":
            rows.append(
                PathRow(kind="stopped", text=data.get("text", ""), stop_reason=data.get("stop_reason", ""), **base)
            )
    return rows


def ended_numbers(attempts: Iterable[Attempt]) -> set[int]:
    """The numbers of the attempts that ended (neither queued nor running), for `rows_of`."""
    return {a.number for a in attempts if a.state not in (Attempt.State.QUEUED, Attempt.State.RUNNING)}


def task_path(task: TaskRun, *, attempt: int | None = None, ended: Container[Any] = ()) -> list[PathRow]:
    """The task's path, oldest first (one attempt's when ``attempt`` is given)."""
    return rows_of(step_events(task, attempt=attempt), ended)


def attempt_paths(task: TaskRun) -> list[AttemptPath]:
    """The task's path per attempt, oldest attempt first: every attempt that has a row or a step."""
    attempts = {a.number: a for a in Attempt.objects.filter(task_run=task)}
    by_number: dict[Any, list[PathRow]] = defaultdict(list)
    for row in task_path(task, ended=ended_numbers(attempts.values())):
        by_number[row.attempt].append(row)
    numbers = sorted(set(attempts) | {n for n in by_number if isinstance(n, int)})
    latest = max(attempts, default=None)
    paths = [
        AttemptPath(n, attempts.get(n), by_number.get(n, []), output_above=n == latest and bool(task.output))
        for n in numbers
    ]
    if by_number.get(None):  # steps recorded without an attempt number: kept, not hidden
        paths.insert(0, AttemptPath(None, None, by_number[None]))
    return paths


def attempt_path(task: TaskRun, number: int, *, whole_results: bool = False) -> AttemptPath:
    """One attempt's path; with ``whole_results`` each finished call carries its whole result
    (``row.whole``: the kept file, or the event's result when it was whole; None when a cut
    result was not kept)."""
    attempt = Attempt.objects.filter(task_run=task, number=number).first()
    path = AttemptPath(
        number, attempt, task_path(task, attempt=number, ended=ended_numbers([attempt] if attempt else []))
    )
    unrecorded = unrecorded_call(path)
    if unrecorded is not None:
        path.rows.append(unrecorded)
    if whole_results:
        for row in path.rows:
            if row.kind == "call" and row.done:
                row.whole = whole_result(task, row) if row.result_cut else row.result
    return path


def unrecorded_call(path: AttemptPath) -> PathRow | None:
    """The model call an ended attempt paid for without a step of it: an agent without tools
    answers in one call and records no step, and a call cut off by its attempt's end (cancelled,
    timed out, failed, lost) records none either, though its tokens are counted. Its tokens are the
    attempt's less those of its recorded calls (the page's header counts them all: without it, the
    path said "0 model calls" under "361 in / 69 out"). None while the attempt runs, or when its
    recorded calls account for every token."""
    attempt = path.attempt
    if attempt is None or not path.ended:
        return None
    calls = [row for row in path.rows if row.kind == "model"]
    tokens_in = attempt.input_tokens - sum(row.input_tokens or 0 for row in calls)
    tokens_out = attempt.output_tokens - sum(row.output_tokens or 0 for row in calls)
    if tokens_in <= 0 and tokens_out <= 0:
        return None
    cut = attempt.state != Attempt.State.SUCCEEDED
    return PathRow(
        step=max((row.step for row in calls), default=0) + 1,
        kind="model",
        attempt=path.number,
        input_tokens=max(tokens_in, 0),
        output_tokens=max(tokens_out, 0),
        call_cut=cut,
        is_error=cut,
        cut_by=attempt.get_state_display().lower() if cut else "",
    )


def whole_result(task: TaskRun, row: PathRow) -> str | None:
    """The whole result of a call row, as kept for the attempt's detail (None: only the preview)."""
    if row.kind != "call" or not row.done or row.attempt is None:
        return None
    return full_results.read(task.run_id, task.pk, int(row.attempt), row.call_id)


# --- What the agent is doing now ------------------------------------------------------------------


def activity_of(rows: list[PathRow]) -> str:
    """What an agent whose current attempt's path is ``rows`` is doing now. Of the calls under
    way, the one waiting for a person is named: its task reads "needs approval", and its other
    calls of the turn ("calling fetch (+1 more)") are not why."""
    waiting = [row for row in rows if row.kind == "call" and not row.done]
    if waiting:
        row = next((row for row in reversed(waiting) if row.waiting_for_approval), waiting[-1])
        if row.waiting_for_approval:
            doing = f"waiting for approval of {row.tool}"
        elif row.approved is False:
            doing = f"{row.tool} rejected"
        else:
            doing = f"calling {row.tool}"
        if len(waiting) > 1:
            doing += f" (+{len(waiting) - 1} more)"
        return f"step {row.step} · {doing}"
    if not rows:
        return "step 1 · thinking"
    last = max(rows, key=lambda row: row.seqs[-1])
    if last.kind == "stopped":
        return f"step {last.step} · stopped"
    if last.kind == "wait":  # held by the provider's budget; once it ends the call goes out
        return f"step {last.step} · " + (f"waiting for {last.wait_words}" if last.waiting else "thinking")
    if last.kind in ("call", "refused") or (last.kind == "model" and last.stop_reason == "tool_use"):
        return f"step {last.step + 1} · thinking"
    if last.kind == "model":
        return f"step {last.step} · finishing"
    return f"step {last.step} · writing" if last.kind == "text" else f"step {last.step} · thinking"


class Attempted(Protocol):
    """What `activities` (and `live_tokens.live_tokens`) read of a task: a TaskRun, or a view of it
    read as plain values (tasks.TaskView, tasks.TaskState)."""

    @property
    def pk(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def attempt_count(self) -> int: ...
    @property
    def wait_code(self) -> str: ...


def activities(tasks: Iterable[Attempted]) -> dict[int, str]:
    """What each running task's agent is doing now (one query for all; a second one for those
    asking a person about a call: `with_tool_checkpoints`); others are left out."""
    tasks = [t for t in tasks if t.state == TaskRun.State.RUNNING]
    running = {t.pk: t.attempt_count for t in tasks}
    if not running:
        return {}
    found: dict[int, list[Event]] = defaultdict(list)
    events = Event.objects.filter(task_run_id__in=list(running), type__in=STEP_EVENT_TYPES).order_by("seq", "id")
    for event in events.only("seq", "type", "payload", "task_run_id"):
        if (event.payload or {}).get("attempt") == running[event.task_run_id]:
            found[event.task_run_id].append(event)
    paths = {task_id: rows_of(found.get(task_id, [])) for task_id in running}
    asking = {t.pk for t in tasks if t.wait_code == TOOL_APPROVAL}
    asking |= {task_id for task_id, rows in paths.items() if any(row.waiting_for_approval for row in rows)}
    if asking:
        paths = with_tool_checkpoints(paths, {task_id: running[task_id] for task_id in asking})
    return {task_id: activity_of(rows) for task_id, rows in paths.items()}


# A tool checkpoint's decisions: the call runs, or is refused (a closed one's attempt has ended).
DECIDED = (Checkpoint.Status.APPROVED, Checkpoint.Status.REJECTED)


def with_tool_checkpoints(paths: dict[int, list[PathRow]], attempts: dict[int, int]) -> dict[int, list[PathRow]]:
    """The paths of these tasks (task id -> the number of its running attempt) as their tool
    checkpoints have it. A checkpoint is the state; the steps are its record, written behind the
    agent (engine/tool_attempt.StepLog): a call asked about before its step was written, or whose
    step was lost, still waits for a person (its task reads "needs approval", and its row said
    "step 1 · thinking"), and a call decided before its worker wrote the decision is decided."""
    rows = Checkpoint.objects.filter(task_run_id__in=list(attempts), kind=Checkpoint.Kind.TOOL).values_list(
        "task_run_id", "attempt__number", "call_id", "status", "details"
    )
    paths = {task_id: list(path) for task_id, path in paths.items()}
    for task_id, number, call_id, status, details in rows.order_by("created_at", "pk"):
        if number != attempts[task_id]:
            continue
        path = paths[task_id]
        row = next((row for row in path if row.kind == "call" and row.call_id == call_id), None)
        if row is None and status == Checkpoint.Status.PENDING:
            asked = (details or {}).get("name") or (details or {}).get("tool", "")
            step = max((row.step for row in path), default=1)
            path.append(
                PathRow(step=step, kind="call", attempt=number, call_id=call_id, tool=asked, approval_required=True)
            )
        elif row is not None and row.approved is None and status in DECIDED:
            row.approved = status == Checkpoint.Status.APPROVED
    return paths


def current_activity(task: TaskRun) -> str:
    """What a running agent is doing now, for its DAG node; "" when it is not running."""
    return activities([task]).get(task.pk, "")
