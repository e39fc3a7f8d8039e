"""Who launched a run, in words, as its `run.created` event recorded it.

A run's `launched_by` is a user or nothing, and nothing does not say who: the command line
records `cli:<os user>` as the actor, other callers their own name. The event keeps who it was,
even after the user's account is deleted (`launched_by` is then empty), so the run page, the runs
list and `manage.py runs` all read the launcher from it: "alice", "root from the command line".
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator import wording
from orchestrator.models import Event, Run

CLI_PREFIX = wording.CLI_PREFIX
# A run with no `run.created` event (made without runs.launch) has no recorded launcher.
NOT_RECORDED = "not recorded"


def launcher_text(actor_kind: str, actor_name: str) -> str:
    """The actor of a `run.created` event in words: a person's username; "root from the command
    line" for `cli:root`; any other actor by its recorded name ("system")."""
    if actor_kind != Event.ActorKind.USER and actor_name.startswith(CLI_PREFIX):
        return wording.who(None, actor_name)
    return actor_name or NOT_RECORDED


def launched_by(run: Run | int) -> str:
    """The run page's words for who launched `run`: "launched by root from the command line"."""
    name = launcher(run)
    return "launcher not recorded" if name == NOT_RECORDED else f"launched by {name}"


def launcher(run: Run | int) -> str:
    """Who launched `run`: one read of its first events by the (run, seq) index."""
    run_id = run.pk if isinstance(run, Run) else run
    created = (
        Event.objects.filter(run_id=run_id, type="run.created")
        .order_by("seq")
        .values_list("actor_kind", "actor_name")
        .first()
    )
    return launcher_text(*created) if created else NOT_RECORDED


def launchers(run_ids: Iterable[int]) -> dict[int, str]:
    """Who launched each of `run_ids`, read in one query (for lists of runs)."""
    ids = list(run_ids)
    found = {
        run_id: launcher_text(kind, name)
        for run_id, kind, name in Event.objects.filter(run_id__in=ids, type="run.created").values_list(
            "run_id", "actor_kind", "actor_name"
        )
    }
    return {run_id: found.get(run_id, NOT_RECORDED) for run_id in ids}
