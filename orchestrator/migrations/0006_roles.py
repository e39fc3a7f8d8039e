"""The four roles as groups (DESIGN §6). Assign people to them in the admin (Users → Groups).

- Viewer: sees runs, plans, tasks, attempts, checkpoints, events and agents.
- Launcher: a Viewer who also launches runs and pauses, resumes, cancels them, retries and skips tasks.
- Approver: a Viewer who also approves and rejects checkpoints.
- Agent admin: manages the agent registry and the provider limits and prices (in the admin,
  which also needs the user's "staff status").

Launcher and Approver include the Viewer's permissions: nobody acts on a run they cannot see.
Running this again (or after a role was edited) only adds what is missing.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEWER = [
    "view_run",
    "view_plan",
    "view_subtask",
    "view_dependency",
    "view_taskrun",
    "view_attempt",
    "view_checkpoint",
    "view_event",
    "view_agent",
]
ROLES = {
    "Viewer": VIEWER,
    "Launcher": [*VIEWER, "launch_run", "control_run"],
    "Approver": [*VIEWER, "decide_checkpoint"],
    "Agent admin": [
        "view_agent",
        "add_agent",
        "change_agent",
        "view_providerlimit",
        "add_providerlimit",
        "change_providerlimit",
    ],
}


def create_roles(apps, schema_editor):
    from django.apps import apps as global_apps

    db = schema_editor.connection.alias
    # Permissions are normally created after all migrations ran (post_migrate): make them now.
    create_permissions(global_apps.get_app_config("orchestrator"), apps=apps, verbosity=0, using=db)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLES.items():
        found = {
            p.codename: p
            for p in Permission.objects.using(db).filter(content_type__app_label="orchestrator", codename__in=codenames)
        }
        missing = sorted(set(codenames) - set(found))
        if missing:
            raise RuntimeError(f"cannot create the {role} role: permissions {', '.join(missing)} do not exist")
        group, _ = Group.objects.using(db).get_or_create(name=role)
        group.permissions.add(*found.values())


def remove_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.using(schema_editor.connection.alias).filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0005_apitoken"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
