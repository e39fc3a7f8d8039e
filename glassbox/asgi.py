"""ASGI entry point: HTTP through Django, websockets through Channels (dashboard routing)."""

import os
from importlib import import_module

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "glassbox.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from csp.middleware import CSPMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.exception import response_for_exception  # noqa: E402
from django.http import Http404  # noqa: E402
from django.middleware.clickjacking import XFrameOptionsMiddleware  # noqa: E402
from django.middleware.security import SecurityMiddleware  # noqa: E402

from dashboard.origin import AllowedHostsOriginValidator  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402
from dashboard.warmup import warm_up  # noqa: E402

# The URL configuration (every view, the admin, the API) is imported now, not by the first
# `{% url %}` a live frame renders: a websocket reaches the run's broadcaster with no HTTP request
# before it (a browser reconnecting after a restart), and that import (~350 ms, the interpreter's
# lock held) made the first round slow, which the broadcaster's pacing then doubled for the next.
import_module(settings.ROOT_URLCONF)
# And the rest of a first frame's one-off work: the URL reverse tables, the fragments compiled.
warm_up()


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, answering like the pages do.

    Its files skip the middleware, so they would carry none of the security headers (nosniff,
    Referrer-Policy, COOP, HSTS, CSP, X-Frame-Options): here they go through the same response
    middlewares as the pages. A path that escapes the static folders (`/static/..%2f..`) makes
    the finders raise SuspiciousFileOperation, which is a 404 like any missing file, not a 500.
    """

    def __init__(self, application):
        super().__init__(application)
        self.secured = SecurityMiddleware(CSPMiddleware(XFrameOptionsMiddleware(self.serve_or_404)))

    def serve(self, request):
        return self.secured(request)

    def serve_or_404(self, request):
        try:
            return super().serve(request)
        except (Http404, SuspiciousOperation) as error:
            return response_for_exception(request, Http404(str(error)))


application = ProtocolTypeRouter(
    {
        # daphne serves the vendored scripts and the CSS itself (from the app and project
        # static folders through the staticfiles finders): the embedded profile has no other
        # web server in front of it.
        "http": StaticFiles(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
