"""The NinjaAPI instance: authentication, error handlers, routes, docs served from our origin."""

from __future__ import annotations

from ninja import NinjaAPI
from ninja.openapi.docs import Swagger

from . import errors
from .auth import SessionAuth, TokenAuth, docs_access
from .endpoints import router

DESCRIPTION = """\
Launch and steer runs, decide checkpoints, follow events, list agents.

**Authentication**: an API token, `Authorization: Bearer gbx_...` (issued once by
`python manage.py create_api_token USER NAME` or in the admin; it acts with its owner's
permissions), or a browser session (unsafe methods then need the `X-CSRFToken` header).

**Errors** have one shape: `{"error": {"code": ..., "message": ..., "details": [...]}}`;
`code` is stable, `details` lists every problem (e.g. each plan validation error).
"""

api = NinjaAPI(
    title="Glassbox API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=[TokenAuth(), SessionAuth()],
    docs=Swagger(settings={"persistAuthorization": False}),
    docs_decorator=docs_access,
)
errors.install(api)
api.add_router("/", router)
