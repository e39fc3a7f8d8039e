"""A run's progress as a watcher follows it (readmodels/run_progress.py): one moment's counts and totals."""

from __future__ import annotations

import pytest

from orchestrator.engine import runs
from orchestrator.readmodels import run_progress, totals


@pytest.mark.django_db(transaction=True)
def test_progress_reads_one_moment_so_a_stopped_attempt_is_never_missing_from_the_totals(
    demo_agents, make_plan, monkeypatch
):
    """The watch gave a cancelled run's totals without its last attempt's usage (CI, PostgreSQL):
    the attempt ended between the read of the run's row and the count of attempts still
    stopping, so "none stopping" stood beside totals from before. Read as one moment, the counts
    and the totals agree: still stopping and not counted, or ended and counted."""
    import threading

    from django.db import connection

    from orchestrator.engine import attempt_ends, execution
    from orchestrator.models import Attempt
    from orchestrator.providers.base import Usage

    run = runs.launch(make_plan({"a": ("writer", [])}))
    claim = execution.claim_attempt(Attempt.objects.get(task_run__run=run).pk, "host:1")
    runs.cancel(run)
    count_stopping = totals.attempts_stopping

    def stopping_after_the_attempt_ended(run):  # its next beat lands between the two reads
        def beat():
            attempt_ends.cancel_attempt(claim, Usage(input_tokens=300, output_tokens=100))
            connection.close()

        ender = threading.Thread(target=beat)
        ender.start()
        ender.join()
        return count_stopping(run)

    monkeypatch.setattr(totals, "attempts_stopping", stopping_after_the_attempt_ended)
    seen = run_progress.progress(run)
    assert (seen.attempts_stopping, seen.input_tokens, seen.output_tokens) == (1, 0, 0)
    monkeypatch.setattr(totals, "attempts_stopping", count_stopping)
    after = run_progress.progress(run)
    assert (after.attempts_stopping, after.input_tokens, after.output_tokens) == (0, 300, 100)
