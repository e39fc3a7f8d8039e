"""The run page's task rows, each distinct look rendered once.

A fan-out makes hundreds of tasks ready in one transaction, and the live view's frame carries
every one of their rows (as the page's table and a plan approval's frame do): ~85 µs of Django
template per row, the larger part of such a frame. Those rows differ only in which task they are
— its id, key and title — so the rest of each row (its look: state, reason, progress, tokens,
cost…) is rendered once from task_row.html with stand-ins for those three, and each task's own
are put in: the same bytes as rendering task_row.html for the task (tests/dashboard/test_task_rows.py
compares them for rows of every state).

The stand-ins are random per process (as fragments.CSRF_PLACEHOLDER), so that no text a task
shows can contain them by design.
"""

from __future__ import annotations

import re
import secrets
from collections import Counter
from collections.abc import Iterable

from django.template.loader import render_to_string
from django.utils.html import escape

from orchestrator.readmodels.tasks import TaskView

TEMPLATE = "dashboard/partials/task_row.html"

STAND_IN_ID = 10**17 + secrets.randbelow(9 * 10**17)  # 18 digits: no count or cost of a row has as many
STAND_IN_KEY = "taskkey" + secrets.token_hex(12)
STAND_IN_TITLE = "tasktitle" + secrets.token_hex(12)
_STAND_INS = re.compile("|".join(re.escape(s) for s in (str(STAND_IN_ID), STAND_IN_KEY, STAND_IN_TITLE)))
_IDENTITY = {"id", "key", "title"}


def look_of(view: TaskView) -> tuple:
    """Everything about a task's view but which task it is: rows with the same look differ
    only in their id, key and title."""
    return tuple(getattr(view, name) for name in type(view).model_fields if name not in _IDENTITY)


def render_rows(ctx: dict, views: Iterable[TaskView]) -> list[str]:
    """task_row.html for each view with `ctx` (the run, oob): a look that several rows share is
    rendered once, a look of one row alone as it is (no stand-ins to put in)."""
    views = list(views)
    looks = [look_of(view) for view in views]
    shared = {look for look, count in Counter(looks).items() if count > 1}
    rendered: dict[tuple, str] = {}
    rows: list[str] = []
    for view, look in zip(views, looks, strict=True):
        if look not in shared:
            rows.append(render_to_string(TEMPLATE, {**ctx, "view": view}))
            continue
        html = rendered.get(look)
        if html is None:
            stand_in = view.model_copy(update={"id": STAND_IN_ID, "key": STAND_IN_KEY, "title": STAND_IN_TITLE})
            html = rendered[look] = render_to_string(TEMPLATE, {**ctx, "view": stand_in})
        rows.append(_put_in(html, view))
    return rows


def _put_in(html: str, view: TaskView) -> str:
    """A stand-in's row with the task's own id, key and title, escaped as the template escapes them."""
    own = {str(STAND_IN_ID): str(view.pk), STAND_IN_KEY: escape(view.key), STAND_IN_TITLE: escape(view.title)}
    return _STAND_INS.sub(lambda match: own[match.group(0)], html)
