"""A plan copied to be edited for a run names the plan it was copied from; earlier copies are
linked from the `plan.copied` event each copy wrote ({"from_plan": …, "plan": …})."""

import django.db.models.deletion
from django.db import migrations, models


def link_earlier_copies(apps, schema_editor):
    Plan = apps.get_model("orchestrator", "Plan")
    Event = apps.get_model("orchestrator", "Event")
    known = set(Plan.objects.values_list("pk", flat=True))
    for payload in Event.objects.filter(type="plan.copied").values_list("payload", flat=True):
        original, copy = (payload or {}).get("from_plan"), (payload or {}).get("plan")
        if original in known and copy in known:
            Plan.objects.filter(pk=copy, copied_from__isnull=True).update(copied_from_id=original)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0021_status_and_kind_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="copied_from",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                help_text="The plan this one was copied from, to be edited for a run",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="copies",
                to="orchestrator.plan",
            ),
        ),
        migrations.RunPython(link_earlier_copies, migrations.RunPython.noop),
    ]
