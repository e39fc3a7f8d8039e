"""The demo MCP server: a workspace confined to its working directory, a calculator without eval,
run over stdio exactly as workers run it."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from orchestrator.tools import demo_server, sessions
from orchestrator.tools.servers import ServerSpec
from orchestrator.tools.toolbox import Toolbox
from tests.orchestrator.tools.conftest import grant_of

DEMO = ServerSpec(
    name="workspace", transport="stdio", command=sys.executable, args=("-m", "orchestrator.tools.demo_server")
)


@pytest.fixture(scope="module")
def demo_tools():
    return asyncio.run(sessions.discover(DEMO))


def calls(tmp_path, demo_tools, *requests):
    async def main():
        async with Toolbox([grant_of(DEMO, demo_tools)], cwd=tmp_path) as box:
            return [await box.call(name, arguments) for name, arguments in requests]

    return asyncio.run(main())


def test_it_offers_the_workspace_and_the_calculator(demo_tools):
    assert sorted(tool.name for tool in demo_tools) == ["calculate", "list_files", "read_file", "write_file"]
    calculate = next(tool for tool in demo_tools if tool.name == "calculate")
    assert calculate.input_schema["properties"]["expression"]["examples"]  # what the simulated provider picks from


def test_files_are_written_read_and_listed_in_the_working_directory(tmp_path, demo_tools):
    wrote, read, listed = calls(
        tmp_path,
        demo_tools,
        ("write_file", {"path": "notes/findings.md", "content": "# Findings\n"}),
        ("read_file", {"path": "notes/findings.md"}),
        ("list_files", {}),
    )
    assert wrote.text == "wrote notes/findings.md (11 bytes)" and not wrote.is_error
    assert read.text == "# Findings\n"
    assert "notes/findings.md (11 bytes)" in listed.text
    assert (tmp_path / "notes" / "findings.md").read_text() == "# Findings\n"


def test_no_path_leads_outside_the_workspace(tmp_path, demo_tools):
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("private")
    os.symlink(outside, tmp_path / "link.txt")
    os.symlink(tmp_path.parent, tmp_path / "up")
    results = calls(
        tmp_path,
        demo_tools,
        ("read_file", {"path": "../" + outside.name}),
        ("read_file", {"path": str(outside)}),
        ("read_file", {"path": "link.txt"}),
        ("write_file", {"path": "up/escaped.txt", "content": "x"}),
        ("write_file", {"path": "link.txt", "content": "overwritten"}),
        ("list_files", {"path": ".."}),
        ("read_file", {"path": "~/.bashrc"}),
    )
    assert all(result.is_error for result in results), [r.text for r in results]
    assert "leads outside the workspace" in results[0].text and "is absolute" in results[1].text
    assert outside.read_text() == "private" and not (tmp_path.parent / "escaped.txt").exists()
    assert all("private" not in result.text for result in results)


def test_the_calculator_computes_and_refuses_anything_else(tmp_path, demo_tools):
    results = calls(
        tmp_path,
        demo_tools,
        ("calculate", {"expression": "(17.5 - 2) * 3"}),
        ("calculate", {"expression": "__import__('os').system('touch pwned')"}),
        ("calculate", {"expression": "1 / 0"}),
    )
    assert (results[0].text, results[0].is_error) == ("46.5", False)
    assert results[1].is_error and "not allowed" in results[1].text and not (tmp_path / "pwned").exists()
    assert results[2].is_error and "division by zero" in results[2].text


@pytest.mark.parametrize(
    "expression, value",
    [("2 + 3 * 4", 14), ("2 ** 10", 1024), ("-7 // 2", -4), ("17 % 5", 2), ("max(3, 9, 4)", 9), ("round(pi, 2)", 3.14)],
)
def test_evaluate(expression, value):
    assert demo_server.evaluate(expression) == value


@pytest.mark.parametrize(
    "expression, problem",
    [
        ("10 ** 100000", "exponents are limited"),
        ("(10 ** 999) * (10 ** 999)", "more than 1000 digits"),
        ("x + 1", "not allowed"),
        ("(1).__class__", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("sqrt(-1)", "cannot compute"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 600, "longer than 500"),
        ("(-8) ** 0.5", "complex"),
    ],
)
def test_evaluate_refuses(expression, problem):
    with pytest.raises(ToolError, match=problem):
        demo_server.evaluate(expression)
