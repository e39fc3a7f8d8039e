"""Issue 11's runtime: event numbers off the run row, token reservations kept per attempt, and
the time a running attempt last saved its progress."""

import django.db.models.deletion
from django.db import migrations, models


def copy_sequences(apps, schema_editor):
    Run = apps.get_model("orchestrator", "Run")
    EventSequence = apps.get_model("orchestrator", "EventSequence")
    EventSequence.objects.bulk_create(
        [EventSequence(run_id=pk, last_seq=seq) for pk, seq in Run.objects.values_list("pk", "last_event_seq")],
        batch_size=500,
    )


def copy_back(apps, schema_editor):
    Run = apps.get_model("orchestrator", "Run")
    EventSequence = apps.get_model("orchestrator", "EventSequence")
    for run_id, seq in EventSequence.objects.values_list("run_id", "last_seq"):
        Run.objects.filter(pk=run_id).update(last_event_seq=seq)


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0009_taskrun_wait_code")]

    operations = [
        migrations.CreateModel(
            name="EventSequence",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="event_sequence",
                        serialize=False,
                        to="orchestrator.run",
                    ),
                ),
                ("last_seq", models.PositiveBigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(copy_sequences, copy_back),
        migrations.RemoveField(model_name="run", name="last_event_seq"),
        migrations.AddField(
            model_name="taskrun", name="progress_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="attempt", name="reserved_input_tokens", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="attempt", name="reserved_output_tokens", field=models.PositiveIntegerField(default=0)
        ),
        migrations.AddField(
            model_name="attempt", name="rate_window", field=models.BigIntegerField(blank=True, null=True)
        ),
        migrations.AlterField(
            model_name="attempt",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("timed_out", "Timed Out"),
                    ("lost", "Lost"),
                    ("cancelled", "Cancelled"),
                    ("handed_back", "Handed Back"),
                ],
                default="queued",
                max_length=12,
            ),
        ),
    ]
