"""Estimates against actuals, the request behind each attempt, and one plan per document.

Backfills what earlier rows already say: a plan's content hash from its document and goal
(except an approver's edited copy, which its document no longer describes), and a run's
estimate from its `run.created` event.
"""

import hashlib
import re
from decimal import Decimal, InvalidOperation

from django.db import migrations, models

EDITED_COPY = re.compile(r"\(edited for run \d+\)$")


def content_hash(goal: str, document: str) -> str:
    """As orchestrator.plans.storage.content_hash (kept here: a migration must not change later)."""
    text = document.removeprefix("\ufeff").replace("\r\n", "\n")
    return hashlib.sha256(f"{goal.strip()}\x00{text}".encode()).hexdigest()


def backfill(apps, schema_editor):
    Plan = apps.get_model("orchestrator", "Plan")
    Run = apps.get_model("orchestrator", "Run")
    Event = apps.get_model("orchestrator", "Event")
    for plan in Plan.objects.exclude(document="").only("pk", "goal", "document", "source_name"):
        if plan.document.strip() and not EDITED_COPY.search(plan.source_name):
            Plan.objects.filter(pk=plan.pk).update(content_hash=content_hash(plan.goal, plan.document))
    created = Event.objects.filter(type="run.created", run__estimate_usd__isnull=True).values_list("run_id", "payload")
    for run_id, payload in created:
        try:
            estimate = Decimal(str((payload or {}).get("estimate_usd")))
        except InvalidOperation:
            continue
        if estimate.is_finite():
            Run.objects.filter(pk=run_id).update(estimate_usd=estimate)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0010_runtime_event_sequence"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="output",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="attempt",
            name="request",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="plan",
            name="content_hash",
            field=models.CharField(blank=True, db_index=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="run",
            name="estimate_usd",
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=14, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
