"""The shared cache's table (embedded profile), so that `manage.py migrate` alone is enough.

django-q2 keeps its cluster statistics in Django's cache, which `launch` and /health/ read; on
the embedded profile that cache is a database table, and without it the first `launch` failed
with "no such table: glassbox_cache". `createcachetable` is idempotent and does nothing for a
cache that is not in the database (Redis on the production profile).
"""

from django.core.management import call_command
from django.db import migrations


def create_cache_tables(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0007_plannerattempt")]

    operations = [migrations.RunPython(create_cache_tables, migrations.RunPython.noop)]
