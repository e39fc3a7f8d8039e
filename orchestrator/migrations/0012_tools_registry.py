"""Tools (issue 12): tool servers, their tools and grants; Agent.max_steps; Subtask.inputs.

The roles learn the new models: a Viewer (and so a Launcher and an Approver) sees tool servers,
tools and grants, as it sees agents; an Agent admin manages them. Running it again only adds what is missing.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Added to the roles of 0006_roles (tests/conftest.py's ensure_roles reads this too).
VIEW_TOOLS = ["view_toolserver", "view_tool", "view_toolgrant"]
ROLE_ADDITIONS = {
    # Launcher and Approver include the Viewer's permissions (0006_roles).
    "Viewer": VIEW_TOOLS,
    "Launcher": VIEW_TOOLS,
    "Approver": VIEW_TOOLS,
    "Agent admin": [
        "view_toolserver",
        "add_toolserver",
        "change_toolserver",
        "delete_toolserver",
        "view_tool",
        "view_toolgrant",
        "add_toolgrant",
        "change_toolgrant",
        "delete_toolgrant",
    ],
}


def add_tool_permissions(apps, schema_editor):
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    db = schema_editor.connection.alias
    create_permissions(global_apps.get_app_config("orchestrator"), apps=apps, verbosity=0, using=db)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLE_ADDITIONS.items():
        group = Group.objects.using(db).filter(name=role).first()
        if group is None:  # the role was removed by someone: leave it so
            continue
        group.permissions.add(
            *Permission.objects.using(db).filter(content_type__app_label="orchestrator", codename__in=codenames)
        )


def remove_tool_permissions(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    db = schema_editor.connection.alias
    for role, codenames in ROLE_ADDITIONS.items():
        for group in Group.objects.using(db).filter(name=role):
            group.permissions.remove(
                *Permission.objects.using(db).filter(content_type__app_label="orchestrator", codename__in=codenames)
            )


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0011_glass_estimates_requests_history"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="max_steps",
            field=models.PositiveIntegerField(
                default=8,
                help_text="Model calls per attempt",
                validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)],
            ),
        ),
        migrations.AddField(
            model_name="subtask",
            name="inputs",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "default (summaries; full outputs for a fan-in)"),
                    ("summaries", "Summaries"),
                    ("full", "Full"),
                ],
                default="",
                max_length=10,
            ),
        ),
        migrations.CreateModel(
            name="ToolServer",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.SlugField(max_length=64, unique=True)),
                (
                    "transport",
                    models.CharField(choices=[("stdio", "stdio"), ("http", "streamable HTTP")], max_length=10),
                ),
                ("command", models.CharField(blank=True, max_length=500)),
                ("args", models.JSONField(blank=True, default=list)),
                (
                    "env_names",
                    models.JSONField(blank=True, default=list, help_text="Names of the declared environment variables"),
                ),
                (
                    "env_sealed",
                    models.TextField(blank=True, editable=False, help_text="The declared environment, encrypted"),
                ),
                ("url", models.URLField(blank=True, max_length=500)),
                (
                    "headers",
                    models.JSONField(
                        blank=True, default=dict, help_text="{header: environment variable holding its value}"
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[("ready", "Ready"), ("unreachable", "Unreachable")], default="ready", max_length=12
                    ),
                ),
                ("status_message", models.CharField(blank=True, max_length=500)),
                ("refreshed_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="ToolGrant",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tool", models.CharField(blank=True, help_text="Empty: every tool of the server", max_length=128)),
                ("requires_approval", models.BooleanField(default=False)),
                ("granted_at", models.DateTimeField(auto_now_add=True)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="tool_grants", to="orchestrator.agent"
                    ),
                ),
                (
                    "granted_by",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "server",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="grants", to="orchestrator.toolserver"
                    ),
                ),
            ],
            options={
                "ordering": ["agent", "server", "tool"],
                "constraints": [models.UniqueConstraint(fields=("agent", "server", "tool"), name="unique_tool_grant")],
            },
        ),
        migrations.CreateModel(
            name="Tool",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=128)),
                ("description", models.TextField(blank=True)),
                ("input_schema", models.JSONField(default=dict)),
                (
                    "server",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="tools", to="orchestrator.toolserver"
                    ),
                ),
            ],
            options={
                "ordering": ["server", "name"],
                "constraints": [models.UniqueConstraint(fields=("server", "name"), name="unique_tool_per_server")],
            },
        ),
        migrations.RunPython(add_tool_permissions, remove_tool_permissions),
    ]
