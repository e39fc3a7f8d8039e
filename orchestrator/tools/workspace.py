"""Each run's working directory: the stdio tool servers' cwd and the run's artifacts.

``GLASSBOX_ARTIFACTS_DIR/run-<id>/``, created on first use, readable by the worker's user only.
The demo server's workspace tools work inside it, so what the agents write there is the run's
artifacts (issue 12, point 6: the run page lists them for download).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings


def run_directory(run_id: int, *, create: bool = True) -> Path:
    """The working directory of run ``run_id`` (made, mode 0700, when ``create``)."""
    if int(run_id) < 1:
        raise ValueError(f"a run id is a positive integer, not {run_id!r}")
    path = Path(settings.GLASSBOX_ARTIFACTS_DIR).resolve() / f"run-{int(run_id)}"
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def artifacts(run_id: int) -> list[tuple[str, int]]:
    """The files a run's agents left in its directory: (path relative to it, size), sorted."""
    root = run_directory(run_id, create=False)
    if not root.is_dir():
        return []
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(folder) / name
            if name.startswith(".") or path.is_symlink():
                continue
            found.append((path.relative_to(root).as_posix(), path.stat().st_size))
    return found


class NotAnArtifact(Exception):
    """The name does not lead to a file of the run's directory (the message says why)."""


def artifact_file(run_id: int, name: str) -> Path:
    """The file ``name`` (relative, as :func:`artifacts` lists it) of run ``run_id``'s directory.

    Refused with NotAnArtifact: an empty, absolute or NUL-carrying name, one that leads outside
    the directory (``..``, a symbolic link anywhere on the way), a hidden file, or no such file.
    """
    root = run_directory(run_id, create=False)
    if not name or "\x00" in name or name.startswith(("/", "\\", "~")) or Path(name).is_absolute():
        raise NotAnArtifact(f"{name!r} is not a file name relative to the run's directory")
    parts = Path(name).parts
    if any(part in ("..", ".") or part.startswith(".") for part in parts):
        raise NotAnArtifact(f"{name!r} leads outside the run's files")
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise NotAnArtifact(f"{name!r} goes through a symbolic link")
    if not path.resolve().is_relative_to(root.resolve()) or not path.is_file():
        raise NotAnArtifact(f"the run has no file {name!r}")
    return path
