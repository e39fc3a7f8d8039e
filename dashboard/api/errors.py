"""Every API error has one JSON shape: {"error": {"code", "message", "details"}}.

`code` is stable (scripts branch on it), `message` names the problem in words, `details` lists
the individual problems where there are several (each plan validation error, each invalid
field), each as {"where", "field", "message"}.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from orchestrator import plans
from orchestrator.engine import runs
from orchestrator.governance import tokens
from orchestrator.governance.audit import record_denial

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answer: HTTP status, stable code, a message for people, optional details."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or []


class PermissionDenied(ApiError):
    """The caller lacks a permission; answered 403 and written to the audit log."""

    def __init__(self, permission: str, *, run: int | None = None):
        super().__init__(403, "permission_denied", f"You do not have permission to do this (needs {permission}).")
        self.permission, self.run = permission, run


class CsrfFailed(ApiError):
    def __init__(self, reason: str):
        super().__init__(
            403,
            "csrf_failed",
            f"CSRF check failed ({reason}): a browser session must send the csrftoken cookie's value in the "
            "X-CSRFToken header; scripts should use an API token (Authorization: Bearer ...) instead.",
        )


def not_found(what: str, pk: int) -> ApiError:
    return ApiError(404, "not_found", f"No {what} with id {pk}.")


def detail(where: str, message: str, field: str = "") -> dict[str, str]:
    return {"where": where, "field": field, "message": message}


def error_body(code: str, message: str, details: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or []}}


def respond(api: NinjaAPI, request: HttpRequest, status: int, code: str, message: str, details=None) -> HttpResponse:
    return api.create_response(request, error_body(code, message, details), status=status)


def _caller(request: HttpRequest):
    return getattr(request, "auth", None) or getattr(request, "user", None)


def _audit_denial(request: HttpRequest, permission: str, run: int | None = None) -> None:
    record_denial(_caller(request), permission, action=f"{request.method} {request.path}", run=run)


def _validation_details(errors: list[dict[str, Any]]) -> list[dict[str, str]]:
    details = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        where, field = (loc[0], ".".join(loc[1:])) if loc else ("request", "")
        if where == "body":  # ninja puts the body parameter's name ("body") first
            field = field.removeprefix("body").removeprefix(".")
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        details.append(detail(where, message, field))
    return details


def install(api: NinjaAPI) -> None:
    """Register the handlers that turn every exception into the one error shape."""

    @api.exception_handler(ApiError)
    def api_error(request, exc: ApiError):
        if isinstance(exc, PermissionDenied):
            _audit_denial(request, exc.permission, exc.run)
        elif isinstance(exc, CsrfFailed):
            _audit_denial(request, "csrf")
        return respond(api, request, exc.status, exc.code, exc.message, exc.details)

    @api.exception_handler(AuthenticationError)
    def not_authenticated(request, exc):
        header = request.headers.get("Authorization", "")
        bearer = header[7:].strip() if header[:7].lower() == "bearer " else ""
        record_denial(
            _caller(request),
            "authentication",
            action=f"{request.method} {request.path}",
            caller=tokens.describe_refused(bearer),
        )
        return respond(
            api,
            request,
            401,
            "not_authenticated",
            "Authentication required: send an API token as 'Authorization: Bearer TOKEN' "
            "(python manage.py create_api_token USER NAME), or log in for a browser session.",
        )

    @api.exception_handler(ValidationError)
    def invalid_request(request, exc: ValidationError):
        details = _validation_details(exc.errors)
        problems = "; ".join(f"{d['where']}{'.' + d['field'] if d['field'] else ''}: {d['message']}" for d in details)
        return respond(api, request, 422, "invalid_request", f"The request is not valid: {problems}", details)

    @api.exception_handler(plans.PlanValidationError)
    def invalid_plan(request, exc: plans.PlanValidationError):
        count = len(exc.errors)
        details = [detail(e.where, e.message, e.field) for e in exc.errors]
        return respond(
            api,
            request,
            422,
            "invalid_plan",
            f"The plan has {count} problem{'' if count == 1 else 's'}; nothing was saved.",
            details,
        )

    @api.exception_handler(runs.LaunchRefused)
    def launch_refused(request, exc):
        return respond(api, request, 422, "launch_refused", f"Run not launched: {exc}")

    @api.exception_handler(runs.ActionError)
    def action_refused(request, exc):
        return respond(api, request, 409, "action_refused", exc.sentence)

    @api.exception_handler(RequestDataTooBig)
    def too_large(request, exc):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return respond(
            api,
            request,
            413,
            "request_too_large",
            f"The request body is larger than {limit:,} bytes; a plan document may be at most "
            f"{plans.MAX_PLAN_BYTES:,} bytes.",
        )

    @api.exception_handler(Http404)
    def http404(request, exc):
        return respond(api, request, 404, "not_found", str(exc) or "Not found.")

    @api.exception_handler(HttpError)
    def http_error(request, exc: HttpError):
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, json.JSONDecodeError):
            return respond(
                api,
                request,
                400,
                "invalid_json",
                f"The request body is not valid JSON: line {cause.lineno}, column {cause.colno}: {cause.msg}.",
            )
        if exc.status_code == 400 and cause is not None:
            return respond(api, request, 400, "invalid_json", "The request body is not valid UTF-8 JSON.")
        code = {
            400: "bad_request",
            403: "permission_denied",
            404: "not_found",
            405: "method_not_allowed",
            429: "throttled",
        }.get(exc.status_code, "error")
        return respond(api, request, exc.status_code, code, str(exc))

    @api.exception_handler(Exception)
    def server_error(request, exc):
        log.exception("API error on %s %s", request.method, request.path)
        return respond(
            api, request, 500, "internal_error", "Internal error: it was logged; try again or tell the operators."
        )
