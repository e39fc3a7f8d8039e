"""A secret passed in a tool server's environment appears in no event, log, page, export or
command output, and never reaches the model, whatever the server does with it."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import shlex
import sys

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from orchestrator import events
from orchestrator.engine.agent_loop import LoopHooks, run_agent_loop
from orchestrator.governance import tool_registry
from orchestrator.models import Agent, Event, ToolServer
from orchestrator.tools.toolbox import Toolbox
from tests.orchestrator.engine.test_agent_loop import ScriptedProvider, answer, request, tool_turn
from tests.orchestrator.test_cli import run_command
from tests.orchestrator.tools.conftest import TEST_SERVER

SECRET = "s3cret-Service-Token-8d2f"


def test_the_secret_appears_nowhere(db, client, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    outputs = []
    stdio = shlex.join([sys.executable, str(TEST_SERVER)])
    outputs.append(run_command("tool_server", "add", "vault", "--stdio", stdio, "--env", f"SERVICE_TOKEN={SECRET}"))
    agent = Agent.objects.create(name="coder")
    outputs.append(run_command("grant_tool", "coder", "vault"))
    outputs.append(run_command("tool_server", "list"))
    outputs.append(run_command("tool_server", "refresh", "vault"))
    assert SECRET not in json.dumps(outputs)

    # An agent's attempt: the server returns its environment, then prints it to stderr and dies.
    grants = tool_registry.granted_servers(agent)
    provider = ScriptedProvider(tool_turn(("environment", {}), ("leak_and_die", {})), answer("Done."))
    steps = []

    async def on_step(step):
        steps.append(step)

    async def on_usage(usage):
        pass

    async def attempt():
        async with Toolbox(grants, cwd=tmp_path) as box:
            return await run_agent_loop(
                provider, request(), box, LoopHooks(on_step=on_step, on_usage=on_usage), max_steps=3
            )

    outcome = asyncio.run(attempt())
    results = [step for step in steps if step.kind == "tool_result"]
    assert len(results) == 2 and "SERVICE_TOKEN" in results[0].result  # the name is there, masked
    assert SECRET not in json.dumps(provider.requests[1].messages)  # never sent to the model
    assert SECRET not in json.dumps([s.result_full for s in steps]) + outcome.output
    for step in steps:  # what the runtime would keep as audit events
        events.record(step.event_type, agent=agent, actor_name="agent:coder", payload=step.payload())

    superuser = User.objects.create_superuser("root")
    client.force_login(superuser)
    server = ToolServer.objects.get(name="vault")
    pages = [
        client.get(reverse("admin:orchestrator_toolserver_changelist")),
        client.get(reverse("admin:orchestrator_toolserver_change", args=[server.pk])),
        client.get(reverse("admin:orchestrator_event_changelist")),
        client.get(reverse("admin:orchestrator_toolgrant_changelist")),
    ]
    assert all(page.status_code == 200 for page in pages)
    assert all(SECRET not in page.content.decode() for page in pages)
    for export in ("csv", "jsonl"):
        response = client.get(reverse("admin:orchestrator_event_export", args=[export]))
        exported = b"".join(response.streaming_content).decode()
        assert "tool_server.added" in exported and SECRET not in exported
    rows = list(
        csv.DictReader(
            io.StringIO(
                b"".join(
                    client.get(reverse("admin:orchestrator_event_export", args=["csv"])).streaming_content
                ).decode()
            )
        )
    )
    assert {"tool_server.added", "tool.granted", "tool.result"} <= {row["type"] for row in rows}

    assert SECRET not in json.dumps(list(Event.objects.values("type", "message", "payload", "actor_name")), default=str)
    assert SECRET not in str(ToolServer.objects.filter(pk=server.pk).values().get())
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert SECRET not in logged


@pytest.mark.parametrize("flag", ["--leak-at-start"])
def test_a_server_that_prints_its_secret_and_fails_leaks_it_nowhere(db, caplog, flag):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(tool_registry.ToolRegistryError) as error:
        tool_registry.add_server(
            "leaky", command=[sys.executable, str(TEST_SERVER), flag], env={"SERVICE_TOKEN": SECRET}
        )
    assert SECRET not in str(error.value)
    assert SECRET not in "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert not Event.objects.exists()
