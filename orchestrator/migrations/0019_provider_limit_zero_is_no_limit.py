"""Provider limits saved as 0 before 0018's validators become blank: the same meaning ("no
limit": admission has always read 0 as none), in the form those validators accept, so that an
admin who edits such a limit is not stopped by a field they did not touch."""

from django.db import migrations

LIMIT_FIELDS = ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute", "max_in_flight")


def zero_limits_to_blank(apps, schema_editor):
    ProviderLimit = apps.get_model("orchestrator", "ProviderLimit")
    for field in LIMIT_FIELDS:
        ProviderLimit.objects.filter(**{field: 0}).update(**{field: None})


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0018_provider_limit_validators"),
    ]

    operations = [
        migrations.RunPython(zero_limits_to_blank, migrations.RunPython.noop),
    ]
