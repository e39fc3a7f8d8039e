"""Template filters of the run page: sanitised Markdown, states, events and times.

Durations, token counts and money are glassbox_format's filters (dashboard/formatting.py).
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from django import template

from orchestrator.engine import checkpoint_questions, tool_approvals
from orchestrator.readmodels import silence, tasks
from orchestrator.readmodels.log import describe_event
from orchestrator.readmodels.tasks import STATE_LABELS, display_state

from ..markdown import render_markdown

register = template.Library()


@register.filter
def markdown(text):
    """Agent output rendered as sanitised HTML (see dashboard/markdown.py)."""
    return render_markdown(text)


@register.filter
def question(checkpoint) -> checkpoint_questions.Question:
    """What a pending checkpoint asks, in parts (the task's title becomes a link): the command
    line's and the inbox's words too (engine/checkpoint_questions.py)."""
    return checkpoint_questions.question(checkpoint)


@register.filter
def tool_arguments(checkpoint) -> str:
    """A tool checkpoint's arguments as indented JSON."""
    return tool_approvals.arguments_json(checkpoint)


@register.filter
def epoch_ms(value: datetime | None) -> str:
    """Milliseconds since the epoch, for data-* attributes that the run page's scripts read; "" for None."""
    return str(int(value.timestamp() * 1000)) if value else ""


@register.filter
def state_label(state: str) -> str:
    return STATE_LABELS.get(state, state)


@register.filter
def percent_of(part, whole) -> int:
    try:
        return max(0, min(100, int(100 * float(part) / float(whole)))) if float(whole) else 0
    except (TypeError, ValueError):
        return 0


@register.filter
def worked_s(attempt) -> float | None:
    """Seconds an ended attempt ran; a lost one's to when its worker was last heard (readmodels/silence.py)."""
    return silence.worked_s(attempt)


@register.filter
def lost_text(attempt) -> str:
    """A lost attempt's time: "ran 8.3 s until last heard from at 10:30:52 UTC; declared lost at …" ("" unless lost)."""
    return silence.lost_text(attempt)


@register.filter
def lost_said(lost_count: int) -> str:
    """ "1 lost when its worker stopped" ("" for none)."""
    return tasks.lost_said(lost_count)


@register.filter
def lost_note(task, attempts) -> str:
    """What a task's attempt list says of its attempts lost with their worker ("" for none)."""
    return tasks.lost_note(task.attempt_count, task.lost_count, attempts)


@register.filter
def event_text(event) -> str:
    """What the event log shows for an event: its message, or a summary of its payload."""
    return describe_event(event)


@register.filter
def task_state(task) -> str:
    """A TaskRun's display state (`readmodels.tasks.display_state`)."""
    return display_state(task.state, task.wait_reason, task.wait_code)


@register.filter
def task_state_label(task) -> str:
    return STATE_LABELS.get(task_state(task), task.state)


@register.filter
def json_text(value) -> str:
    """A value as compact JSON text (escaped by the template like any text)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


_MARKDOWN_MARKS = re.compile(r"(?<!\w)[#*_`>]+|[*_`]+(?!\w)")


@register.filter
def plain_text(text: str) -> str:
    """Markdown read as plain text (a summary joins an output's words on one line, so its marks
    would show): emphasis, heading and code marks dropped, whitespace folded."""
    return " ".join(_MARKDOWN_MARKS.sub("", text or "").split())
