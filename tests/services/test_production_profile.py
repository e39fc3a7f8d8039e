"""`make run-prod` in miniature: `serve --clusters 2` on Redis, watched through /health/.

One daphne and two qclusters against the test database and a Redis of the test's own. The health
endpoint must tell the truth through a Redis outage: 503 naming the broker and the channel layer
while Redis is down, 200 again once it is back, and both qclusters still there afterwards.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from orchestrator.engine import runs
from tests.conftest import ROOT, child_env, fast_latency, wait_for_run, wait_until
from tests.services.conftest import free_port

pytestmark = [pytest.mark.services, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

BANNER = "Ctrl-C stops both"


def get_health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def read_until(stream, text: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    pytest.fail(f"{text!r} did not appear within {timeout} s; output so far:\n{seen}")


@pytest.fixture
def serve(own_redis, tmp_path):
    """`manage.py serve --clusters 2 --workers 1` on a free port, on the test's own Redis."""
    port = free_port()
    errors = open(tmp_path / "serve.err", "w")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--clusters", "2", "--workers", "1"],
        cwd=ROOT,
        env=child_env(REDIS_URL=own_redis.url, GLASSBOX_QUEUED_GRACE_S="3"),
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        banner = read_until(process.stdout, BANNER, timeout=90)
        assert "2 qclusters" in banner
        process.port = port
        process.errors_path = tmp_path / "serve.err"
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)  # the test failed before its own clean stop
            process.wait(timeout=30)
        errors.close()


def test_serve_with_two_clusters_on_redis_reports_health_through_a_redis_outage(
    serve, own_redis, broker_at, make_agent, make_plan
):
    def healthy_with_two_clusters():
        status, body = get_health(serve.port)
        return status == 200 and body["checks"]["broker"]["clusters"] == 2

    wait_until(healthy_with_two_clusters, 60, "both qclusters to report in")
    status, body = get_health(serve.port)
    assert body["status"] == "ok"
    assert {name: (check["ok"], check["backend"]) for name, check in body["checks"].items()} == {
        "database": (True, body["checks"]["database"]["backend"]),
        "broker": (True, "redis"),
        "channel_layer": (True, "redis"),
    }

    # The deployment does work: a run launched from here is carried out by its clusters.
    broker_at(own_redis.url)
    make_agent("researcher", provider_options=fast_latency(0.1))
    run = wait_for_run(runs.launch(make_plan({f"t{i}": ("researcher", []) for i in range(4)}), cap=4), 120)
    assert run.status == "succeeded", run.summary

    own_redis.kill()
    status, body = get_health(serve.port)
    assert status == 503 and body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is True
    assert (body["checks"]["broker"]["ok"], body["checks"]["broker"]["error"]) == (False, "ConnectionError")
    assert (body["checks"]["channel_layer"]["ok"], body["checks"]["channel_layer"]["error"]) == (
        False,
        "ConnectionError",
    )
    assert own_redis.url not in json.dumps(body) and str(own_redis.port) not in json.dumps(body)

    own_redis.start()
    wait_until(healthy_with_two_clusters, 60, "health to recover with both qclusters after Redis came back")
    assert serve.poll() is None, "serve stopped during the Redis outage"

    serve.send_signal(signal.SIGINT)
    assert serve.wait(timeout=60) == 0, serve.errors_path.read_text()[-3000:]
    assert "Stopped daphne and 2 qclusters." in serve.stdout.read()
