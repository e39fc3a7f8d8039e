"""The launcher stdio tool servers are started through: the server runs in its place as it would
have run directly, and dies with the process that started it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import parent_death
from orchestrator.tools import sessions, stdio_launcher
from orchestrator.tools.servers import ServerSpec
from tests.conftest import ROOT, kill_session, pid_written_to, process_ended, session_members, wait_until
from tests.orchestrator.tools.conftest import WRAPPED_SERVER_SCRIPT

pytestmark = pytest.mark.skipif(not parent_death.SUPPORTED, reason="the parent-death signal is Linux's")

# What the server reports of itself: argv (from the kernel, argv[0] included), directory, a
# variable, whether SIGPIPE (13) is ignored (bit 12 of SigIgn), its pid.
REPORT = "; ".join(
    [
        r"tr '\0' '|' < /proc/$$/cmdline",
        "echo",
        "pwd",
        'echo "$GLASSBOX_PROBE"',
        r"echo $(( 0x$(sed -n 's/^SigIgn:\t//p' /proc/$$/status) >> 12 & 1 ))",
        "echo $$",
    ]
)


def launched(command: str, args: list[str], *, cwd, env: dict[str, str]) -> subprocess.Popen:
    """``command args`` started as the SDK starts it, through the launcher."""
    program, program_args = stdio_launcher.launch_command(command, args, cwd=str(cwd), env=env)
    return subprocess.Popen(
        [program, *program_args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_the_server_runs_in_the_launchers_place_with_its_arguments_directory_and_environment(tmp_path):
    env = {"PATH": os.environ["PATH"], "GLASSBOX_PROBE": "probe-value"}
    proc = launched("sh", ["-c", REPORT, "server", "one", "two words"], cwd=tmp_path, env=env)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    argv, directory, probe, sigpipe_ignored, pid = out.splitlines()
    assert argv == f"sh|-c|{REPORT}|server|one|two words|"
    assert (directory, probe) == (str(tmp_path), "probe-value")
    assert sigpipe_ignored == "0"  # as when started directly (Python ignores it, exec keeps that)
    assert int(pid) == proc.pid  # exec'd in place: the SDK's pid and process group are the server's


def test_a_relative_command_is_found_from_the_servers_directory(tmp_path):
    script = tmp_path / "server.sh"
    script.write_text('#!/bin/sh\necho started in "$(pwd)"\n')
    script.chmod(0o755)
    proc = launched("./server.sh", [], cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert proc.communicate(timeout=30)[0] == f"started in {tmp_path}\n"


@pytest.mark.parametrize(
    "command, error",
    [
        ("glassbox-no-such-server", FileNotFoundError),
        ("./missing-server.sh", FileNotFoundError),
        ("/nonexistent/mcp-server", FileNotFoundError),
        ("./not-executable.sh", PermissionError),
    ],
)
def test_a_command_that_cannot_run_fails_in_the_worker_naming_it(tmp_path, command, error):
    (tmp_path / "not-executable.sh").write_text("#!/bin/sh\n")
    with pytest.raises(error) as raised:
        stdio_launcher.launch_command(command, [], cwd=str(tmp_path), env={"PATH": os.environ["PATH"]})
    assert raised.value.filename == command


def test_a_missing_command_is_reported_as_before():
    spec = ServerSpec(name="ghost", transport="stdio", command="glassbox-no-such-server")
    with pytest.raises(sessions.ToolServerError) as raised:
        asyncio.run(sessions.discover(spec))
    assert "could not start: command not found (glassbox-no-such-server)" in str(raised.value)


def test_a_command_gone_before_the_exec_is_named_on_stderr():
    proc = subprocess.run(
        [sys.executable, "-I", "-m", stdio_launcher.__name__, str(os.getpid()), "/nonexistent/server", "srv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (proc.returncode, proc.stderr) == (127, "could not start srv: No such file or directory\n")


def test_a_launcher_whose_parent_died_before_it_asked_is_killed_at_once(tmp_path):
    """The parent's pid passed is not the launcher's parent any more: it was re-parented between
    the fork and its request to the kernel, which then would never signal it."""
    not_its_parent = os.getppid()
    proc = subprocess.run(
        [sys.executable, "-I", "-m", stdio_launcher.__name__, str(not_its_parent), "/bin/touch", "touch", "ran"],
        cwd=tmp_path,
        timeout=30,
    )
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "ran").exists()


def test_the_server_dies_with_the_process_that_started_it():
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess\n"
            "from orchestrator.tools.stdio_launcher import launch_command\n"
            "program, args = launch_command('sleep', ['600'], cwd=None, env=dict(os.environ))\n"
            "server = subprocess.Popen([program, *args], start_new_session=True)\n"
            "print(server.pid, flush=True)\n"
            "server.wait()\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    server = int(starter.stdout.readline())
    comm = Path(f"/proc/{server}/comm")
    try:
        wait_until(lambda: comm.read_text().strip() == "sleep", 15, "the launcher to exec the server")
        starter.kill()
        starter.wait(timeout=30)
        wait_until(lambda: process_ended(server), 15, f"the server (pid {server}) to die with its starter")
    finally:
        if not process_ended(server):
            os.kill(server, signal.SIGKILL)


def test_without_the_parent_death_signal_the_command_runs_as_it_is(monkeypatch):
    monkeypatch.setattr(parent_death, "SUPPORTED", False)
    assert stdio_launcher.launch_command("glassbox-no-such-server", ["--x"], cwd=None, env={}) == (
        "glassbox-no-such-server",
        ["--x"],
    )


# --- What the server starts goes with it (orchestrator/process_group.py) ----------------------------


def test_closing_a_session_ends_everything_its_server_started(tmp_path):
    """The script ends once its server reads the end of its stdin, within the SDK's grace, so the
    SDK signals nothing: the helper ran on for ever."""

    async def use() -> tuple[int, list[int]]:
        spec = ServerSpec(name="wrapped", transport="stdio", command="sh", args=("-c", WRAPPED_SERVER_SCRIPT))
        async with sessions.connect(spec, cwd=tmp_path) as session:
            result = await session.call_tool("pid", {})
            server = int(result.content[0].text)
            return server, session_members(pid_written_to(tmp_path / "script.pid"))

    server, members = asyncio.run(use())
    script, helper = pid_written_to(tmp_path / "script.pid"), pid_written_to(tmp_path / "helper.pid")
    try:
        assert {script, server, helper} < set(members)  # and the launcher's watcher
        wait_until(lambda: not session_members(script), 15, "every process the server started to end")
    finally:
        kill_session(script)


# A worker holding a session with the wrapped server, its server blocked in a synchronous call.
WORKER = """
import asyncio, sys
from pathlib import Path
from orchestrator.tools import sessions
from orchestrator.tools.servers import ServerSpec

async def work():
    spec = ServerSpec(name="wrapped", transport="stdio", command="sh", args=("-c", sys.argv[2]))
    async with sessions.connect(spec, cwd=Path(sys.argv[1])) as session:
        await session.call_tool("block", {})

asyncio.run(work())
"""


def test_a_sigkilled_worker_leaves_nothing_its_server_started(tmp_path):
    """The kernel killed the script with its worker; the server it ran, blocked in a call, and its
    helper ran on, re-parented to PID 1."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), WRAPPED_SERVER_SCRIPT], cwd=ROOT)
    server = pid_written_to(tmp_path / "blocking.pid")
    script, helper = pid_written_to(tmp_path / "script.pid"), pid_written_to(tmp_path / "helper.pid")
    try:
        assert {script, server, helper} < set(session_members(script))  # and the launcher's watcher
        worker.kill()
        worker.wait(timeout=30)
        wait_until(lambda: not session_members(script), 15, "every process of the server's tree to end")
    finally:
        worker.kill()
        kill_session(script)
