"""The websockets' origin check: Channels' AllowedHostsOriginValidator with a refusal that uses no channel layer.

Channels refuses a foreign origin with its WebsocketDenier, a consumer on the default channel
layer: on the production profile every refused connection would open a blocking read on Redis for
nothing, and cancelling that read when the connection ends can be lost in channels_redis (the task
stays "cancelling" in redis-py's socket read), so the refusal's task never ends. In tests that
left an event loop that could not close (pytest hung at exit); in daphne, a task and a Redis
connection per refused socket. A refusal needs no layer: it is accepted-then-closed as before,
by the same consumer with no channel of its own (as the run view's consumer has none).
"""

from __future__ import annotations

from urllib.parse import urlparse

from channels.security import websocket
from django.conf import settings

from .consumers import NO_CHANNEL_LAYER


class OriginDenier(websocket.WebsocketDenier):
    channel_layer_alias = NO_CHANNEL_LAYER


class AllowedHostsOriginValidator(websocket.OriginValidator):
    """Lets through websockets whose Origin is one of ALLOWED_HOSTS (as Channels' factory does,
    localhost when DEBUG leaves them empty); refuses the others, and those with no Origin."""

    def __init__(self, application):
        allowed_hosts = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed_hosts:
            allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]
        super().__init__(application, allowed_hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("The origin check is for websocket connections only")
        if self.valid_origin(_origin(scope)):
            return await self.application(scope, receive, send)
        return await OriginDenier()(scope, receive, send)


def _origin(scope):
    """The parsed Origin header (as Channels reads it), None when absent."""
    for name, value in scope.get("headers", []):
        if name == b"origin":
            return urlparse(value.decode("latin1"))  # latin-1 decodes any bytes
    return None
