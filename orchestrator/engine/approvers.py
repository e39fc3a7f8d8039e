"""Who may approve a checkpoint, and why someone may not: one rule for the engine and every page.

Approving needs the `decide_checkpoint` permission (the Approver role). Separation of duties
(`GLASSBOX_SEPARATION_OF_DUTIES`, on by default) adds one rule: whoever launched a run may not
approve its plan (they may still reject it, which only stops their own run). `runs.decide`
refuses with `separation_of_duties`'s sentence; the run page and the approvals inbox show the
same sentence and the people who may approve instead, so that a newcomer with one login is
never left at a button that cannot work.

What waits for a person's decision follows the same rule (`awaiting`): the header's badge counts
it and the approvals inbox lists it first; a plan they launched waits for another approver
(`awaiting_another_approver`), so it is listed apart and not counted. The badge counted it, and a
`demo` login that had launched a run with plan approval saw "Approvals 1" for a checkpoint it
could not approve.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Count, Q, QuerySet

from orchestrator.models import Checkpoint, Run
from orchestrator.readmodels.checkpoints import awaiting_decision

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


def _launchers_own_plans(user) -> Q:
    """The checkpoints that `launcher_may_not_approve` keeps from `user`: the plans of the runs
    they launched (none when separation of duties is off)."""
    if not (settings.GLASSBOX_SEPARATION_OF_DUTIES and getattr(user, "is_authenticated", False)):
        return Q(pk__in=[])
    return Q(kind=Checkpoint.Kind.PLAN, run__launched_by_id=user.pk)


def awaiting(user) -> QuerySet[Checkpoint]:
    """The checkpoints waiting for `user`'s decision, the longest waiting first: those pending on
    runs that have not ended (`readmodels.checkpoints.awaiting_decision`) that they may approve —
    none without the permission, and not the plans of their own runs. The header's badge is its
    count; the approvals inbox lists them with Approve and Reject."""
    if not user.has_perm(f"orchestrator.{DECIDE_CODENAME}"):
        return Checkpoint.objects.none()
    return awaiting_decision().exclude(_launchers_own_plans(user))


def awaiting_another_approver(user) -> QuerySet[Checkpoint]:
    """The plans of `user`'s own runs that wait for another approver (separation of duties): the
    inbox lists them apart, with who may approve, and the badge does not count them."""
    if not user.has_perm(f"orchestrator.{DECIDE_CODENAME}"):
        return Checkpoint.objects.none()
    return awaiting_decision().filter(_launchers_own_plans(user))


def awaiting_for_launchers() -> tuple[int, dict[int, int]]:
    """For a render shared by every viewer who may decide (the live view's frames): how many
    checkpoints wait, and how many of them are plans each launcher may not approve (user id ->
    count), so that a launcher's page counts `awaiting` theirs (static/dashboard/run/main.js)."""
    waiting = awaiting_decision()
    own: dict[int, int] = {}
    if settings.GLASSBOX_SEPARATION_OF_DUTIES:
        rows = (
            waiting.filter(kind=Checkpoint.Kind.PLAN, run__launched_by__isnull=False)
            .order_by()
            .values_list("run__launched_by_id")
            .annotate(n=Count("pk"))
        )
        own = dict(rows)
    return waiting.count(), own


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
