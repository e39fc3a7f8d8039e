"""A stdio tool server that dies with the process that started it.

``python -I -m orchestrator.tools.stdio_launcher PARENT_PID EXECUTABLE ARGV0 [ARG ...]`` asks the
kernel for a SIGKILL when its parent dies (orchestrator/parent_death.py), has what the server
will start ended when the server ends (orchestrator/process_group.py), then execs the server in
its own place: same process, working directory, environment and pipes; the setting survives the
exec. :func:`launch_command` is how the parent (orchestrator/tools/sessions.py) runs a command
through it.

Why: the SDK starts a stdio server in a session of its own and reaps it when the session closes,
but a worker killed with SIGKILL (the OOM killer, ``kill -9``) closes nothing. The server sees its
stdin end, yet one inside a synchronous tool call does not read it: it ran on, re-parented to
PID 1, until the call returned, or for ever. The SDK gives no hook to run in the child between
fork and exec, hence a launcher.

SIGKILL rather than SIGTERM: once the worker is dead nobody reads the server's answers, and a
server blocked in a call (or that ignores SIGTERM) would outlive a SIGTERM by as long as the call.
The kernel kills the server only, not what it started (a script's ``python server.py``, ``npx``'s
node, helpers): those are in its process group, which a watcher ends once the server is gone,
whether killed so, ended by the SDK or exited by itself. A normal end is otherwise unchanged: the
SDK closes the server's stdin, then terminates its process group; the server is still the SDK's
child, its exit status its own.

The kernel signals when the *thread* that forked the server ends, not its process. In a worker
that is the agent host's event-loop thread (the SDK forks from the loop), which runs until the
host drains as the worker exits; a server the host's shutdown could not end is then killed.
``discover`` starts and closes its server inside one ``asyncio.run``, in the thread that waits for
it. Elsewhere than Linux the command runs as it is.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence

from orchestrator import parent_death, process_group


def launch_command(
    command: str, args: Sequence[str], *, cwd: str | None, env: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The command and arguments that start ``command args`` through the launcher.

    The executable is resolved here, as starting it directly did in the child (on the child's
    ``PATH``, a relative path from its working directory ``cwd``), so that a missing command is
    the same FileNotFoundError naming ``command`` as before, not a server that exits at once.
    Where the kernel has no parent-death signal, ``command`` and ``args`` as they are.
    """
    if not parent_death.SUPPORTED:
        return command, list(args)
    executable = resolve(command, cwd=cwd, env=env)
    return sys.executable, ["-I", "-m", __name__, str(os.getpid()), executable, command, *args]


def resolve(command: str, *, cwd: str | None, env: Mapping[str, str]) -> str:
    """The absolute path of ``command``; FileNotFoundError or PermissionError naming it otherwise."""
    if os.path.dirname(command):
        path = os.path.join(cwd or os.getcwd(), command)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return os.path.abspath(path)
    base = cwd or os.getcwd()  # a relative directory of PATH is one from the child's directory
    found = shutil.which(command, path=os.pathsep.join(os.path.join(base, d) for d in os.get_exec_path(dict(env))))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    return os.path.abspath(found)


def main(argv: Sequence[str]) -> int:
    parent_pid, executable, *server_argv = argv
    # A parent dead before this took effect has the signal sent at once.
    parent_death.signal_when_parent_dies(signal.SIGKILL, int(parent_pid))
    # What the server starts (a script's interpreter, npx's node, helpers) goes when it goes.
    process_group.end_when_leader_exits()
    # Python ignores these at start-up and an ignored signal stays ignored across exec: give the
    # server the default actions, as starting it directly (subprocess's restore_signals) did.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execv(executable, server_argv)
    except OSError as exc:  # removed since it was resolved, not an executable format …
        print(f"could not start {server_argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127 if exc.errno == errno.ENOENT else 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
