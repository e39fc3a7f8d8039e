"""The toolbox against a real stdio MCP server (the tests' own): calls, concurrency, timeouts,
crashes, the result cap, the declared environment only, and every server process reaped."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys

import pytest

from orchestrator.tools.servers import ServerGrant, ServerSpec
from orchestrator.tools.toolbox import Toolbox
from tests.orchestrator.tools.conftest import TEST_SERVER, grant_of, process_gone, server_spec


def run(coroutine):
    return asyncio.run(coroutine)


def toolbox(test_tools, tmp_path, spec: ServerSpec | None = None, **options) -> Toolbox:
    return Toolbox([grant_of(spec or server_spec(), test_tools)], cwd=tmp_path, **options)


def test_a_call_returns_the_tools_text(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            return await box.call("echo", {"text": "hello"})

    result = run(main())
    assert (result.text, result.is_error, result.truncated) == ("hello", False, False)


def test_only_granted_tools_are_offered_and_called(test_tools, tmp_path):
    echo_only = ServerGrant(
        server=server_spec(), tools=tuple(t for t in grant_of(server_spec(), test_tools).tools if t.name == "echo")
    )

    async def main():
        async with Toolbox([echo_only], cwd=tmp_path) as box:
            return [spec.name for spec in box.specs()], await box.call("crash", {})

    names, refused = run(main())
    assert names == ["echo"]
    assert refused.is_error and "not granted" in refused.text


def test_calls_of_one_turn_run_concurrently(test_tools, tmp_path):
    """`rendezvous` answers only when both calls are in the server at once."""

    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            return await asyncio.gather(
                box.call("rendezvous", {"key": "turn", "count": 2}), box.call("rendezvous", {"key": "turn", "count": 2})
            )

    results = run(main())
    assert [(r.text, r.is_error) for r in results] == [("met turn", False), ("met turn", False)]


def test_a_tool_that_hangs_fails_that_call_only(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path, call_timeout_s=1) as box:
            hung = await box.call("hang", {})
            after = await box.call("echo", {"text": "still here"})
            return hung, after, box.starts("testsrv")

    hung, after, starts = run(main())
    assert hung.is_error and "did not answer hang within 1 s" in hung.text
    assert (after.text, after.is_error, starts) == ("still here", False, 1)


def test_a_fractional_timeout_reads_as_durations_do_elsewhere(test_tools, tmp_path):
    """Once "did not answer hang within 1.23456 s"."""

    async def main():
        async with toolbox(test_tools, tmp_path, call_timeout_s=1.23456) as box:
            return await box.call("hang", {})

    hung = run(main())
    assert hung.is_error and "did not answer hang within 1.2 s" in hung.text


# How long the slow server sleeps before it answers the MCP handshake.
SLOW_START_S = 1.5


def slow_server() -> ServerSpec:
    return ServerSpec(
        name="testsrv",
        transport="stdio",
        command=sys.executable,
        args=(str(TEST_SERVER), "--slow-start", str(SLOW_START_S)),
    )


def test_a_calls_duration_is_its_own_and_its_servers_start_up_is_apart(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path, slow_server()) as box:
            return await box.call("echo", {"text": "first"}), await box.call("echo", {"text": "second"})

    first, second = run(main())
    assert first.server_start_s is not None and first.server_start_s >= SLOW_START_S
    assert first.duration_s is not None and first.duration_s < first.server_start_s  # not the start-up's time
    assert second.server_start_s is None and second.duration_s is not None  # the server was running already


def test_a_calls_timeout_counts_from_when_its_server_is_ready(test_tools, tmp_path):
    """A 1 s call timeout on a server that takes 1.5 s to start: the call still gets its 1 s."""

    async def main():
        async with toolbox(test_tools, tmp_path, slow_server(), call_timeout_s=1) as box:
            return await box.call("hang", {})

    hung = run(main())
    assert hung.is_error and "did not answer hang within 1 s" in hung.text
    assert hung.server_start_s is not None and hung.server_start_s >= SLOW_START_S
    assert hung.duration_s is not None and hung.duration_s >= 1  # its own time: the timeout, not start-up + timeout


def test_the_tasks_time_its_servers_start_up_took_is_not_given_to_the_call_again(test_tools, tmp_path):
    """What is left of the task's time (1 s) runs out while the server starts (1.5 s): not run."""

    async def main():
        async with toolbox(test_tools, tmp_path, slow_server()) as box:
            return await box.call("hang", {}, timeout_s=1.0)

    late = run(main())
    assert late.is_error
    assert late.text == "hang was not run: the task's time ran out while its server testsrv started"


def test_a_server_killed_mid_call_fails_that_call_and_is_started_again(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            first_pid = int((await box.call("pid", {})).text)
            crashed = await box.call("crash", {})
            after = await box.call("echo", {"text": "again"})
            second_pid = int((await box.call("pid", {})).text)
            return first_pid, crashed, after, second_pid, box.starts("testsrv")

    first_pid, crashed, after, second_pid, starts = run(main())
    assert crashed.is_error and "closed the connection" in crashed.text and "during crash" in crashed.text
    assert (after.text, after.is_error, starts) == ("again", False, 2)
    assert second_pid != first_pid
    assert process_gone(first_pid) and process_gone(second_pid)


def test_a_server_that_keeps_dying_is_given_up_for_the_attempt(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            return [await box.call("crash", {}) for _ in range(4)]

    outcomes = run(main())
    assert all(result.is_error for result in outcomes)
    assert "stopped working 3 times" in outcomes[-1].text


def test_a_long_result_is_cut_for_the_model_and_kept_whole(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path, result_max_chars=1000) as box:
            return await box.call("big", {"chars": 50_000})

    result = run(main())
    assert result.truncated and len(result.text) <= 1000
    assert "result cut: 50,000 characters" in result.text
    assert (result.full_chars, len(result.full_text)) == (50_000, 50_000)


def test_a_tool_error_reaches_the_model_as_an_error_result(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            return await box.call("fail", {"message": "no such city"})

    result = run(main())
    assert result.is_error and "no such city" in result.text


def test_the_server_gets_its_declared_environment_only_and_the_run_directory(test_tools, tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_WORKER_ONLY_SECRET", "worker-secret-value")
    spec = server_spec(SERVICE_TOKEN="declared-token-value")

    async def main():
        async with toolbox(test_tools, tmp_path, spec) as box:
            return (
                await box.call("environment", {}),
                await box.call("cwd", {}),
                await box.call("env_digest", {"name": "SERVICE_TOKEN"}),
            )

    environment, cwd, digest = run(main())
    received = json.loads(environment.text)
    assert digest.text == hashlib.sha256(b"declared-token-value").hexdigest()  # delivered ...
    assert received["SERVICE_TOKEN"] == "••••"  # ... and masked when the server repeats it
    assert "GLASSBOX_WORKER_ONLY_SECRET" not in received and "worker-secret-value" not in environment.text
    assert received["HOME"] == str(tmp_path)
    # The SDK's fixed harmless set, our HOME, what the server declared; Python may add LC_CTYPE itself.
    assert set(received) <= {"SERVICE_TOKEN", "HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM", "LC_CTYPE"}
    assert cwd.text == str(tmp_path)


def test_closing_reaps_the_server(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            return int((await box.call("pid", {})).text)

    pid = run(main())
    assert process_gone(pid)


def test_a_cancelled_caller_leaves_no_server_behind(test_tools, tmp_path):
    """An attempt cancelled in the middle of a call (its deadline, a cancelled run)."""
    started = {}

    async def attempt():
        async with toolbox(test_tools, tmp_path) as box:
            started["pid"] = int((await box.call("pid", {})).text)
            await box.call("hang", {})

    async def main():
        task = asyncio.create_task(attempt())
        while "pid" not in started:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # the hang call is in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert process_gone(started["pid"])


def test_a_server_that_cannot_start_fails_the_call_not_the_caller(test_tools, tmp_path):
    missing = ServerSpec(name="ghost", transport="stdio", command="/nonexistent/mcp-server")

    async def main():
        async with Toolbox([grant_of(missing, test_tools[:1])], cwd=tmp_path) as box:
            return await box.call(test_tools[0].name, {})

    result = run(main())
    assert result.is_error and "command not found" in result.text and "ghost" in result.text


def test_a_secret_printed_by_a_dying_server_is_masked_in_the_error(test_tools, tmp_path):
    spec = server_spec(SERVICE_TOKEN="declared-token-value")

    async def main():
        async with toolbox(test_tools, tmp_path, spec) as box:
            return await box.call("leak_and_die", {})

    result = run(main())
    assert result.is_error and "its error output ends" in result.text
    assert "declared-token-value" not in result.text and "SERVICE_TOKEN" in result.text


def test_many_toolboxes_share_one_event_loop(test_tools, tmp_path):
    """Two attempts at once, each with its own session of the same server."""

    async def attempt(tag):
        async with toolbox(test_tools, tmp_path) as box:
            met = await box.call("rendezvous", {"key": "shared", "count": 1})
            return tag, met.text, int((await box.call("pid", {})).text)

    async def main():
        return await asyncio.gather(attempt("a"), attempt("b"))

    (a, a_text, a_pid), (b, b_text, b_pid) = run(main())
    assert (a_text, b_text) == ("met shared", "met shared") and a_pid != b_pid
    assert process_gone(a_pid) and process_gone(b_pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_zombie_children_remain(test_tools, tmp_path):
    async def main():
        async with toolbox(test_tools, tmp_path) as box:
            await box.call("crash", {})
            await box.call("echo", {"text": "x"})

    run(main())
    children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    zombies = [pid for pid in children if open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z")]
    assert zombies == []
