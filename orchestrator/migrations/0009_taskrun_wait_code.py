"""TaskRun.wait_code: the wait reason as a code the engine compares (orchestrator.engine.waits).

Existing rows get the code whose sentence their ``wait_reason`` matches, or none. The
sentences are copied here as they were written when this migration was made, so that later
rewording in waits.py does not change what this migration does.
"""

import re

from django.db import migrations, models

SENTENCES = [
    ("agent_inactive", r"agent .+ is \w+, not active"),
    ("run_cap", r"run cap reached \(\d+ running\)"),
    ("agent_limit", r"agent .+ at its limit \(\d+ running across runs\)"),
    ("provider_in_flight", r"provider .+ at its in-flight limit"),
    ("budget", r"run budget would be exceeded"),
    ("provider_backoff", r"provider .+ backing off after a rate-limit answer, until .+"),
    ("rate_limit_requests", r"provider .+ requests per minute used up"),
    ("rate_limit_input", r"provider .+ input tokens per minute used up"),
    ("rate_limit_output", r"provider .+ output tokens per minute used up"),
    ("retry_backoff", r"retrying in [\d.]+ s after: .*"),
]


def code_of(sentence: str) -> str:
    for code, pattern in SENTENCES:
        if re.fullmatch(pattern, sentence, flags=re.DOTALL):
            return code
    return ""


def backfill(apps, schema_editor):
    TaskRun = apps.get_model("orchestrator", "TaskRun")
    changed = []
    for task in TaskRun.objects.exclude(wait_reason="").only("pk", "wait_reason").iterator():
        task.wait_code = code_of(task.wait_reason)
        if task.wait_code:
            changed.append(task)
    TaskRun.objects.bulk_update(changed, ["wait_code"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0008_cache_table")]

    operations = [
        migrations.AddField(
            model_name="taskrun",
            name="wait_code",
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
