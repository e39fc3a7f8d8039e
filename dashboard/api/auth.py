"""Who is calling the API and what they may do.

Two ways in: an API token (`Authorization: Bearer gbx_...`, for scripts; no CSRF, since a
browser never sends it by itself) or the browser's session cookie (CSRF enforced on unsafe
methods, as on every form). Every endpoint then checks one permission with `require`; a
denial answers 403 and is written to the audit log (errors.py).
"""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from ninja.security import HttpBearer
from ninja.security.apikey import APIKeyCookie

from orchestrator.governance import tokens

from .errors import CsrfFailed, PermissionDenied, error_body


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>` with a token from `create_api_token` or the admin."""

    openapi_scheme = "bearer"

    def authenticate(self, request: HttpRequest, token: str):
        user = tokens.authenticate(token)
        if user is not None:
            request.user = user  # so that everything downstream sees the token's owner
        return user


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, answering the reason of a failure instead of a 403 page."""

    def _reject(self, request, reason):
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    """None when the request passes Django's CSRF check, else the reason it fails."""
    check = _CsrfCheck(lambda req: None)  # type: ignore[arg-type]  # get_response is never called
    request.csrf_processing_done = False  # type: ignore[attr-defined]  # Django's own flag
    return check.process_view(request, None, (), {})  # type: ignore[arg-type,return-value]  # _reject answers the reason


class SessionAuth(APIKeyCookie):
    """The browser's login session; unsafe methods must carry the CSRF token (X-CSRFToken)."""

    param_name = "sessionid"

    def __init__(self):
        self.param_name = settings.SESSION_COOKIE_NAME
        # csrf=True tells the API docs page to send the CSRF token; the check itself is done in
        # authenticate (only for a logged-in session, so that anonymous callers get a 401).
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
            reason = _csrf_failure(request)
            if reason is not None:
                raise CsrfFailed(reason)
        return user


def require(request: HttpRequest, permission: str, *, run: int | None = None):
    """The authenticated user if they hold `permission`; else PermissionDenied (403, audited)."""
    user = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    if not user.has_perm(permission):
        raise PermissionDenied(permission, run=run)
    return user


def docs_access(view):
    """The schema and the docs need a login (session or token), like every page.

    A browser without a session is sent to the login page; anything else gets a 401 in the
    API's error shape.
    """

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("bearer "):
            user = tokens.authenticate(header[7:].strip())
            if user is not None:
                request.user = user
                return view(request, *args, **kwargs)
        if request.path.endswith(".json"):
            return JsonResponse(
                error_body("not_authenticated", "Authentication required: send an API token or log in."), status=401
            )
        return redirect_to_login(request.get_full_path())

    return wrapped
