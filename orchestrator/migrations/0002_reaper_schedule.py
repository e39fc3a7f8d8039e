"""Creates the reaper's q2 Schedule: crash recovery's safety net, once a minute."""

from django.db import migrations

REAPER_NAME = "glassbox reaper"


def create_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=REAPER_NAME,
        defaults={"func": "orchestrator.tasks.tick", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def delete_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=REAPER_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, delete_schedule)]
