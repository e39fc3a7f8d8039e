"""Server-side permission checks for views: a denial answers 403 and is written to the audit log."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import render
from django.views.csrf import csrf_failure as django_csrf_failure

from orchestrator.governance.audit import record_denial
from orchestrator.governance.permission_wording import denial_in_words

VIEW_RUN = "orchestrator.view_run"
LAUNCH_RUN = "orchestrator.launch_run"
CONTROL_RUN = "orchestrator.control_run"
DECIDE_CHECKPOINT = "orchestrator.decide_checkpoint"


def deny(request, permission: str, *, run=None) -> HttpResponse:
    """403, audited, saying what the person may not do and which role allows it: the page
    (templates/403.html), or the sentence alone for htmx, whose answer the run page shows in
    its message line."""
    record_denial(request.user, permission, action=f"{request.method} {request.path}", run=run)
    said = denial_in_words(permission)
    if request.headers.get("HX-Request") == "true":
        return HttpResponseForbidden(said)
    return render(request, "403.html", {"exception": said}, status=403)


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
