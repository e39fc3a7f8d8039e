"""The websockets' origin check (dashboard/origin.py), through the real ASGI application."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings

from glassbox.asgi import application

FOREIGN = (b"origin", b"http://evil.example")
LOOP_CLOSE_TIMEOUT_S = 20
# The lost cancellation depends on where in the Redis read it lands: one loop in two, or fewer.
LOOPS = 10


def communicator(origin) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/runs/1/", headers=[origin] if origin else [])


def test_a_foreign_origin_and_a_missing_one_are_refused():
    async def scenario():
        refusals = []
        for origin in (FOREIGN, None):
            comm = communicator(origin)
            connected, _ = await comm.connect()
            refusals.append(not connected)
            await comm.disconnect()
        return refusals

    assert async_to_sync(scenario)() == [True, True]


@pytest.mark.services
def test_a_refused_connection_ends_with_its_client_on_the_redis_channel_layer():
    """Channels' own denier read the Redis channel layer, and cancelling that read was lost: the
    refusal's task never ended, nor the event loop holding it (pytest hung at exit on CI)."""
    assert settings.REDIS_URL, "runs on the production profile (make test-services)"

    async def scenario():
        for origin in (FOREIGN, None):
            connected, _ = await communicator(origin).connect()
            assert not connected
        # Leaving without a disconnect: asyncio.run cancels what is left, as a dropped client would.

    for _ in range(LOOPS):
        loop_thread = threading.Thread(target=lambda: asyncio.run(scenario()), daemon=True)
        loop_thread.start()
        loop_thread.join(LOOP_CLOSE_TIMEOUT_S)
        assert not loop_thread.is_alive(), "a refused connection's task did not end when it was cancelled"
