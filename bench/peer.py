"""The benchmark's peer: Prefect in a virtualenv the benchmark makes, driven over stdin/stdout.

Prefect 3.8.8 (the version the side-by-side figures were first taken with) is installed into
`.bench-peers/prefect-3.8.8/` in the checkout — never into the project's own environment — and
`fastapi<0.125` after it (3.8.8 fails at import with newer fastapi). The virtualenv is made once
and kept (it is in .gitignore); `make bench` makes it on first use, from PyPI.

`PrefectPeer` starts bench/prefect_peer.py in that environment once per profile runner and asks it
for one run at a time, right after the engine's run of the same DAG and cap, so both are measured
on the same machine state and never at the same time. Between its runs the peer's processes (the
driver and Prefect's API server, whose background services keep polling while idle: ~15 % of a
core, measured 2026-11-24) are stopped with SIGSTOP and continued for its next run, so the
engine's runs do not share the machine with them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .harness import ROOT, BenchError, DagSpec, log

PREFECT_VERSION = "3.8.8"
PEER_PACKAGES = [f"prefect=={PREFECT_VERSION}"]
# Installed after Prefect: 3.8.8 imports names that fastapi 0.125 removed.
PEER_PINS = ["fastapi<0.125"]
VENV = ROOT / ".bench-peers" / f"prefect-{PREFECT_VERSION}"


def peer_python() -> Path:
    """The peer environment's interpreter, made (once) if it is not there yet."""
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    if marker.exists():
        return python
    log(f"making Prefect {PREFECT_VERSION}'s environment in {VENV.relative_to(ROOT)} (once; a minute or two)")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, capture_output=True)
        for packages in (PEER_PACKAGES, PEER_PINS):
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *packages], check=True, capture_output=True, text=True
            )
        subprocess.run([str(python), "-c", "import prefect"], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise BenchError(
            f"could not make the Prefect peer's environment ({' '.join(map(str, exc.cmd))}): {exc.stderr or exc.stdout}"
        ) from exc
    marker.write_text(PREFECT_VERSION + "\n")
    return python


class PrefectPeer:
    def __init__(self, workdir: Path):
        self.log_path = workdir / "prefect-peer.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        python = peer_python()
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(python), str(ROOT / "bench" / "prefect_peer.py")],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "HOME": str(VENV), "PREFECT_HOME": str(VENV / "home")},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            text=True,
            start_new_session=True,  # its own process group: Prefect's server is paused with it
        )
        ready = self._read()
        if not ready.get("ready"):
            raise BenchError(f"the Prefect peer did not start: {ready}")
        self._signal(signal.SIGSTOP)

    def run(self, spec: DagSpec, cap: int) -> dict:
        request = {
            "dag": {
                "kind": spec.kind,
                "params": spec.params,
                "seed": spec.seed,
                "median_s": spec.median_s,
                "sigma": spec.sigma,
            },
            "cap": cap,
        }
        assert self.proc is not None and self.proc.stdin is not None
        self._signal(signal.SIGCONT)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return self._read()
        finally:
            self._signal(signal.SIGSTOP)

    def _signal(self, signum: int) -> None:
        """Stop or continue the peer's whole process group (its driver and Prefect's server)."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass  # gone: the next read reports it with its log

    def _read(self) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
            raise BenchError(f"the Prefect peer stopped (exit {self.proc.poll()}):\n{tail}")
        return json.loads(line)

    def stop(self) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log_file.close()
