"""Each run's working directory under GLASSBOX_ARTIFACTS_DIR, and the artifacts listed from it."""

from __future__ import annotations

import os
import stat

import pytest

from orchestrator.tools.workspace import artifacts, run_directory


def test_a_run_directory_is_made_private_under_the_artifacts_root(artifacts_dir):
    path = run_directory(42)
    assert path == artifacts_dir.resolve() / "run-42" and path.is_dir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert not run_directory(43, create=False).exists()
    with pytest.raises(ValueError):
        run_directory(0)


def test_artifacts_are_the_files_agents_left_without_hidden_files_or_links(artifacts_dir, tmp_path):
    root = run_directory(7)
    (root / "report").mkdir()
    (root / "report" / "draft.md").write_text("draft")
    (root / "notes.md").write_text("hello")
    (root / ".hidden").write_text("x")
    os.symlink(tmp_path, root / "outside")
    assert artifacts(7) == [("notes.md", 5), ("report/draft.md", 5)]
    assert artifacts(8) == []
