"""A read model's fields answer a template's lookup as items, and a missing one reads as nothing."""

from __future__ import annotations

import pytest
from django.template import Context, Template
from django.utils import timezone

from orchestrator.readmodels.log import LogRow


def test_a_log_row_answers_a_template_lookup_as_an_item_like_its_attribute():
    row = LogRow(7, timezone.now(), "task.started", 1, 2, "scope", "agent", "researcher", "started", {})
    assert (row["seq"], row["task_key"], row["message"]) == (7, "scope", "started")
    with pytest.raises(KeyError):
        row["no_such_field"]
    rendered = Template("{{ row.seq }}|{{ row.task_key }}|{{ row.no_such_field }}|{{ row.actor_name }}")
    assert rendered.render(Context({"row": row})) == "7|scope||researcher"
    assert not hasattr(row, "__dict__")  # still a slots row: hundreds of them in a fan-out's frame
