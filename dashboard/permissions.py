"""Server-side permission checks for views: a denial answers 403 and is written to the audit log."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseForbidden
from django.views.csrf import csrf_failure as django_csrf_failure

from orchestrator.governance.audit import record_denial

VIEW_RUN = "orchestrator.view_run"
LAUNCH_RUN = "orchestrator.launch_run"
CONTROL_RUN = "orchestrator.control_run"
DECIDE_CHECKPOINT = "orchestrator.decide_checkpoint"


def deny(request, permission: str, *, run=None) -> HttpResponseForbidden:
    record_denial(request.user, permission, action=f"{request.method} {request.path}", run=run)
    return HttpResponseForbidden(f"You do not have permission to do this ({permission}).")


def permission_required(permission: str):
    """Like Django's, but answers 403 (never a login redirect for a logged-in user) and audits it."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.has_perm(permission):
                return deny(request, permission, run=kwargs.get("run_id"))
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW: Django's own 403 page for a form that failed the CSRF check, audited
    like any other denial (`access.denied`, permission `csrf`): a forged or stale form post is
    an attempt someone may want to see."""
    record_denial(request.user, "csrf", action=f"{request.method} {request.path}")
    return django_csrf_failure(request, reason=reason)
