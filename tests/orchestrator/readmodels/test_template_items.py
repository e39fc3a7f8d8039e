"""A read model's fields answer a template's lookup as items, and a missing one reads as nothing."""

from __future__ import annotations

import pytest
from django.template import Context, Template
from django.utils import timezone

from orchestrator.models import TaskRun
from orchestrator.readmodels.log import LogRow
from orchestrator.readmodels.tasks import task_views


def test_a_log_row_answers_a_template_lookup_as_an_item_like_its_attribute():
    row = LogRow(7, timezone.now(), "task.started", 1, 2, "scope", "agent", "researcher", "started", {})
    assert (row["seq"], row["task_key"], row["message"]) == (7, "scope", "started")
    with pytest.raises(KeyError):
        row["no_such_field"]
    rendered = Template("{{ row.seq }}|{{ row.task_key }}|{{ row.no_such_field }}|{{ row.actor_name }}")
    assert rendered.render(Context({"row": row})) == "7|scope||researcher"
    assert not hasattr(row, "__dict__")  # still a slots row: hundreds of them in a fan-out's frame


@pytest.mark.django_db
def test_a_task_record_answers_a_template_lookup_as_an_item_like_its_attribute(launched):
    """Templates look names up as items first (the rows of a large run render faster for it)."""
    run = launched({"scope": ("researcher", []), "a": ("researcher", ["scope"])})
    TaskRun.objects.filter(run=run, subtask__key="a").update(state=TaskRun.State.FAILED, error="boom")
    view = next(v for v in task_views(run, list(run.tasks.values_list("pk", flat=True))) if v.key == "a")
    assert (view["title"], view["pk"], view["state_label"], view["is_terminal"]) == (
        view.title,
        view.id,
        "failed",
        True,
    )
    with pytest.raises(KeyError):
        view["no_such_field"]
    rendered = Template("{{ view.key }}|{{ view.state_label }}|{{ view.no_such_field }}|{{ view.tokens }}")
    assert rendered.render(Context({"view": view})) == f"a|failed||{view.tokens}"
