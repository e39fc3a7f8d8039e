"""The whole results of tool calls, kept for the attempt's detail page (issue 12, point 3).

A ``tool.result`` event keeps a preview of the result (``Step.payload()``: the first
``agent_steps.PREVIEW_CHARS`` characters): the audit log stays light and every event is small
enough to send live. The whole result (``Step.result_full``: what the server sent, secrets
already masked by the toolbox, up to ``results.MAX_KEPT_CHARS``) is written here, one UTF-8 file
per call, when it is longer than the preview:

    GLASSBOX_ARTIFACTS_DIR/tool-results/run-<run id>/task-<task id>/attempt-<n>/<call id>.txt

Beside the runs' working directories, not inside one: the tool servers of a run work in
``run-<id>/`` and must neither list these files as artifacts nor overwrite them. The runtime
calls :func:`keep` for each ``tool_result`` step before recording the step's event; the page reads them
back with :func:`read`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from django.conf import settings

# The preview an event keeps (orchestrator/engine/agent_steps.py: PREVIEW_CHARS; a test keeps them
# equal): a result no longer than this is whole in its event and needs no file.
PREVIEW_CHARS = 2000
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def _file(run_id: int, task_id: int, attempt: int, call_id: str) -> Path:
    if min(int(run_id), int(task_id), int(attempt)) < 1:
        raise ValueError(f"run, task and attempt are positive integers, not {run_id!r}, {task_id!r}, {attempt!r}")
    if not call_id:
        raise ValueError("a tool call's result is kept under its call id, and this one has none")
    name = _SAFE.sub("_", call_id)[:80]
    if name != call_id:  # two ids that differ only in unsafe characters must not share a file
        name += "-" + hashlib.sha256(call_id.encode()).hexdigest()[:12]
    root = Path(settings.GLASSBOX_ARTIFACTS_DIR).resolve() / "tool-results"
    return root / f"run-{int(run_id)}" / f"task-{int(task_id)}" / f"attempt-{int(attempt)}" / f"{name}.txt"


def keep(run_id: int, task_id: int, attempt: int, call_id: str, whole: str) -> bool:
    """Write a call's whole result when its event keeps only a preview of it; whether it wrote
    (a result that fits in its event writes nothing). ``whole``: ``Step.result_full``."""
    if len(whole) <= PREVIEW_CHARS:
        return False
    path = _file(run_id, task_id, attempt, call_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text(whole, encoding="utf-8")
    partial.replace(path)  # readers see the whole file or none
    return True


def read(run_id: int, task_id: int, attempt: int, call_id: str) -> str | None:
    """The whole result of one call, or None when none was kept (it fitted in its event)."""
    try:
        return _file(run_id, task_id, attempt, call_id).read_text(encoding="utf-8")
    except (FileNotFoundError, ValueError):
        return None
