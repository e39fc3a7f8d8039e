"""The client against an MCP server the project did not write: the protocol's reference time
server (`mcp-server-time` from PyPI, installed by pyproject.toml's test extra), over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from orchestrator.governance import tool_registry
from orchestrator.models import Agent
from orchestrator.tools.toolbox import Toolbox

TIME_SERVER = [str(Path(sys.executable).with_name("mcp-server-time")), "--local-timezone", "UTC"]


def test_the_reference_time_server_registers_and_answers(db, tmp_path):
    server = tool_registry.add_server("time", command=TIME_SERVER)
    assert set(server.tools.values_list("name", flat=True)) == {"get_current_time", "convert_time"}
    convert = server.tools.get(name="convert_time")
    assert set(convert.input_schema["required"]) == {"source_timezone", "time", "target_timezone"}
    agent = Agent.objects.create(name="scheduler-agent")
    tool_registry.grant(agent, "time:convert_time")
    grants = tool_registry.granted_servers(agent)

    async def call():
        async with Toolbox(grants, cwd=tmp_path) as box:
            return await box.call(
                "convert_time", {"source_timezone": "UTC", "time": "09:15", "target_timezone": "Asia/Tokyo"}
            )

    result = asyncio.run(call())
    assert not result.is_error, result.text
    answer = json.loads(result.text)
    assert answer["time_difference"] == "+9.0h" and answer["target"]["datetime"].endswith("T18:15:00+09:00")


def test_a_bad_argument_to_the_reference_server_is_an_error_result(db, tmp_path):
    tool_registry.add_server("time", command=TIME_SERVER)
    agent = Agent.objects.create(name="scheduler-agent")
    tool_registry.grant(agent, "time")
    grants = tool_registry.granted_servers(agent)

    async def call():
        async with Toolbox(grants, cwd=tmp_path) as box:
            return await box.call("get_current_time", {"timezone": "Mars/Olympus_Mons"})

    result = asyncio.run(call())
    assert result.is_error and "Mars/Olympus_Mons" in result.text
