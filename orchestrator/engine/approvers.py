"""Who may approve a checkpoint, and why someone may not: one rule for the engine and every page.

Approving needs the `decide_checkpoint` permission (the Approver role). Separation of duties
(`GLASSBOX_SEPARATION_OF_DUTIES`, on by default) adds one rule: whoever launched a run may not
approve its plan (they may still reject it, which only stops their own run). `runs.decide`
refuses with `separation_of_duties`'s sentence; the run page and the approvals inbox show the
same sentence and the people who may approve instead, so that a newcomer with one login is
never left at a button that cannot work.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q

from orchestrator.models import Checkpoint, Run

DECIDE_CODENAME = "decide_checkpoint"
# Names listed in a sentence before "and N more".
MAX_NAMED = 5


def launcher_may_not_approve(checkpoint: Checkpoint, run: Run) -> bool:
    """True when separation of duties keeps the run's launcher from approving this checkpoint."""
    return (
        settings.GLASSBOX_SEPARATION_OF_DUTIES
        and checkpoint.kind == Checkpoint.Kind.PLAN
        and run.launched_by_id is not None
    )


def approvers(checkpoint: Checkpoint, run: Run | None = None) -> list[str]:
    """Usernames of the active people who may approve `checkpoint`: holders of the Approver role's
    permission (directly, through a group, or as superusers), less its run's launcher when
    separation of duties applies."""
    run = run or checkpoint.run
    permission = Permission.objects.filter(content_type__app_label="orchestrator", codename=DECIDE_CODENAME).first()
    holds = Q(is_superuser=True)
    if permission is not None:
        holds |= Q(user_permissions=permission) | Q(groups__permissions=permission)
    people = get_user_model().objects.filter(holds, is_active=True).distinct()
    if launcher_may_not_approve(checkpoint, run) and run.launched_by_id is not None:
        people = people.exclude(pk=run.launched_by_id)
    return sorted(people.values_list("username", flat=True))


def who_may_approve(checkpoint: Checkpoint, run: Run | None = None) -> str:
    """The people who may approve, in words, or what to do when there is nobody."""
    names = approvers(checkpoint, run)
    if not names:
        return (
            "nobody else holds the Approver role yet: give it to someone in the admin (Users → Groups → "
            "Approver), or run `python manage.py seed_demo`, which creates the demo approver"
        )
    shown = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
    return f"who may approve: {shown}"


def separation_of_duties(checkpoint: Checkpoint, run: Run, user) -> str:
    """Why `user` may not approve `checkpoint` under separation of duties ("" when they may)."""
    if not (launcher_may_not_approve(checkpoint, run) and getattr(user, "is_authenticated", False)):
        return ""
    if run.launched_by_id != user.pk:
        return ""
    return (
        f"separation of duties: {user.get_username()} launched run {run.pk}, so another approver must "
        f"approve its plan ({who_may_approve(checkpoint, run)}); you may still edit or reject it"
    )
