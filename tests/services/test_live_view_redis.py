"""The live view on the production profile's channel layer (issue 14, found 2 and 4).

A real daphne on Redis, real websocket clients speaking the live protocol:

* an idle live view (nothing happens in the run) stays open: it used to close with 1011 every
  ~5 s, when redis-py's 5 s socket timeout raced channels_redis's 5 s blocking read;
* while Redis is down, live views connect and keep updating by polling the event log, and go on
  after Redis returns;
* a run's channel group forgets the channels of a daphne that died, instead of keeping them
  for 24 h (each doorbell to them logged "channels over capacity").
"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.conf import settings

from orchestrator.engine import runs
from orchestrator.events import run_group_name
from tests.conftest import wait_until
from tests.orchestrator.engine.test_faults import (  # noqa: F401 - `daphne` is a fixture
    LiveViewer,
    daphne,
    session_cookie_with_view_permission,
)

pytestmark = [pytest.mark.services, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# Past the 5 s and 15 s at which an idle view used to be closed.
IDLE_S = 17


@pytest.fixture
def quiet_run(make_agent, make_plan, broker):
    """A running run with no qcluster to carry it out: nothing happens in it unless the test acts."""
    make_agent("researcher")
    return runs.launch(make_plan({"a": ("researcher", []), "b": ("researcher", ["a"])}))


def test_an_idle_live_view_on_redis_stays_open(daphne, quiet_run):  # noqa: F811
    assert settings.REDIS_URL, "runs on the production profile (make test-services)"
    server = daphne()
    viewer = LiveViewer(server.port, quiet_run.pk, session_cookie_with_view_permission()).start()
    try:
        wait_until(lambda: viewer.last_seq == quiet_run.last_event_seq, 30, "the viewer to catch up")
        time.sleep(IDLE_S)
        runs.pause(quiet_run)
        quiet_run.refresh_from_db()
        wait_until(lambda: viewer.last_seq == quiet_run.last_event_seq, 30, "the pause to arrive")
    finally:
        viewer.stop()
    assert (viewer.connections, viewer.errors) == (1, []), server.logs()
    assert "Timeout reading" not in server.logs()


def test_during_a_redis_outage_live_views_connect_and_update_by_polling(
    daphne,  # noqa: F811
    quiet_run,
    own_redis,
    monkeypatch,
):
    monkeypatch.setenv("REDIS_URL", own_redis.url)  # daphne's Redis is the test's own
    server = daphne()
    cookie = session_cookie_with_view_permission()
    before = LiveViewer(server.port, quiet_run.pk, cookie).start()
    during = None
    try:
        wait_until(lambda: before.last_seq == quiet_run.last_event_seq, 30, "the first viewer to catch up")
        own_redis.kill()
        during = LiveViewer(server.port, quiet_run.pk, cookie).start()
        wait_until(lambda: during.last_seq == quiet_run.last_event_seq, 30, "a viewer to connect during the outage")
        runs.pause(quiet_run)
        quiet_run.refresh_from_db()
        wait_until(
            lambda: before.last_seq == during.last_seq == quiet_run.last_event_seq, 30, "the pause to arrive by polling"
        )
        own_redis.start()
        time.sleep(2)  # the broadcaster listens for doorbells again (its retry backs off from 1 s)
        runs.resume(quiet_run)
        quiet_run.refresh_from_db()
        wait_until(lambda: before.last_seq == during.last_seq == quiet_run.last_event_seq, 30, "the resume to arrive")
    finally:
        before.stop()
        if during is not None:
            during.stop()
    assert (before.connections, before.errors) == (1, []), server.logs()
    assert (during.connections, during.errors) == (1, []), server.logs()
    assert before.gaps == during.gaps == []
    logs = server.logs()
    assert "the channel layer is unreachable (ConnectionError); live viewers are served by polling" in logs
    assert "the channel layer is reachable again" in logs


def test_a_dead_daphnes_channels_leave_the_run_group(quiet_run):
    """A broadcaster renews its membership; a channel nobody renews (its daphne died) expires."""
    from channels.layers import get_channel_layer

    from dashboard import broadcast

    layer = get_channel_layer()
    configured_expiry = layer.group_expiry
    group = run_group_name(quiet_run.pk)
    group_key = layer._group_key(group)

    class Viewer:
        cursor = None
        watched = None
        viewer = None

        async def send_frame(self, html: str) -> None:
            pass

    async def scenario() -> tuple[set[str], set[str]]:
        layer.group_expiry = 3  # as if 90 s had passed, without waiting for them
        viewer = Viewer()
        broadcaster = broadcast.subscribe(quiet_run.pk, viewer)
        try:
            await layer.group_add(group, "specific.dead-daphne!stale")  # joined, then its daphne was killed
            await asyncio.sleep(5)
            await layer.group_send(group, {"type": "run.event", "seq": 1})  # drops expired members
            members = await group_members()
            assert broadcaster.subscribers == {viewer}
        finally:
            await broadcast.unsubscribe(quiet_run.pk, viewer)  # the last viewer leaves: the broadcaster stops
            layer.group_expiry = configured_expiry
        return members, await group_members()

    async def group_members() -> set[str]:
        connection = layer.connection(layer.consistent_hash(group))
        return {m.decode() for m in await connection.zrange(group_key, 0, -1)}

    members, after_stop = asyncio.run(scenario())
    assert after_stop == set()
    assert "specific.dead-daphne!stale" not in members
    assert len(members) == 1, members  # the live broadcaster's channel, renewed
    # Deployed, a dead daphne's channels leave within minutes, not channels_redis's default day.
    assert configured_expiry <= 300
