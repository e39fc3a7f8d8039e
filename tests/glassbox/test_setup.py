"""Set-up that cannot half-work: `manage.py migrate` alone yields a working embedded database."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_migrate_alone_creates_the_cache_table_that_launch_needs(tmp_path):
    env = {
        **os.environ,
        "GLASSBOX_SQLITE_PATH": str(tmp_path / "fresh.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "glassbox.settings",
    }
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

    assert manage("migrate", "--noinput").returncode == 0
    used = manage("shell", "-c", "from django.core.cache import cache; cache.set('k', 41); print(cache.get('k') + 1)")
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip().splitlines()[-1] == "42"
    # `launch` checks for a running cluster through the same cache: it must answer, not crash on a missing table.
    assert manage("seed_demo").returncode == 0
    launched = manage("launch", "examples/exploration.yaml", "--budget", "5")
    assert launched.returncode == 2, launched.stderr  # 2: no qcluster running, said in words
    assert "No qcluster is running" in launched.stderr
