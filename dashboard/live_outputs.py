"""What the live view knows of running tasks between events: their progress and the streamed
output of the watched ones.

A run's broadcaster (dashboard/broadcast.py) feeds it the agent hosts' live messages and the
poll of the progress they saved on the task rows, and takes from it, each round, what to send.
"""

from __future__ import annotations

from . import frames


class LiveOutputs:
    """Running tasks' live progress and the streamed output of the watched ones, as the
    broadcaster knows them: pieces from the hosts' live messages (each placed at its offset; a
    piece beyond the known text waits for the saved output to catch up) and the saved rows.

    A percentage never goes back within an attempt: a save is older than the live pieces sent
    since it was taken (the host saves every GLASSBOX_PROGRESS_SAVE_S, it publishes every
    LIVE_S), and the frame of a save re-renders the task's row and panel head with the saved
    value, so the percentage that frame puts on top of them is the higher of the saved one and
    the one viewers were last sent (`shown`): the bar stepped back until the next piece. A new
    attempt starts from its own percentage; a piece or save of an earlier attempt is dropped.
    """

    def __init__(self) -> None:
        self.progress: dict[int, int] = {}  # task id -> percent, not sent yet
        self.shown: dict[int, int] = {}  # task id -> the percent viewers were last sent
        self.attempt: dict[int, int] = {}  # task id -> the latest attempt its percentages are of
        self.text: dict[int, str] = {}  # task id -> output so far (watched tasks only)
        self.changed: set[int] = set()  # tasks whose text changed since it was last sent

    def _progress(self, task_id: int, percent: int, attempt: int | None) -> None:
        """Take `percent` of `attempt` (None: a host that does not say, taken as the latest)."""
        known = self.attempt.get(task_id)
        if attempt is not None and known is not None and attempt < known:
            return  # an earlier attempt's, arriving late
        if attempt is not None and attempt != known:
            self.attempt[task_id] = attempt
            if known is not None:  # a new attempt: its progress starts again
                self.shown.pop(task_id, None)
                self.progress.pop(task_id, None)
        self.progress[task_id] = max(percent, self.progress.get(task_id, 0), self.shown.get(task_id, 0))

    def add_pieces(self, pieces: list, watched: set[int]) -> None:
        for task_id, percent, offset, piece, *more in pieces:
            self._progress(task_id, percent, more[0] if more else None)
            if task_id not in watched:
                continue
            current = self.text.get(task_id)
            if current is not None and offset <= len(current):
                self.text[task_id] = current[:offset] + piece
                self.changed.add(task_id)
            elif current is None and offset == 0:
                self.text[task_id] = piece
                self.changed.add(task_id)

    def add_saved(self, saved: frames.SavedProgress) -> None:
        for task_id, percent in saved.progress.items():
            self._progress(task_id, percent, saved.attempts.get(task_id))
        for task_id, output in saved.outputs.items():
            if len(output) > len(self.text.get(task_id) or ""):
                self.text[task_id] = output
                self.changed.add(task_id)

    def over_saved(self, running: dict[int, tuple[int, int]]) -> dict[int, int]:
        """The percentages to put on top of rows an event frame redraws from the saved progress
        (`running`: task id -> (attempt, saved percent), every task of `shown` still running):
        those viewers were sent of the same attempt that are ahead of the saved ones (an agent's
        step events redraw its row often). The tasks no longer running are forgotten from `shown`,
        so that it, and the read of `running`, stay the size of what runs."""
        self.shown = {task_id: percent for task_id, percent in self.shown.items() if task_id in running}
        return {
            task_id: self.shown[task_id]
            for task_id, (attempt, saved) in running.items()
            if self.shown.get(task_id, 0) > saved and self.attempt.get(task_id, attempt) == attempt
        }

    def take(self, watched: set[int]) -> tuple[dict[int, int], dict[int, str]]:
        """The progress and the watched outputs to send now (and forget unwatched text)."""
        progress, self.progress = self.progress, {}
        self.shown.update(progress)
        outputs = {task_id: self.text[task_id] for task_id in self.changed & watched if task_id in self.text}
        self.changed = set()
        for task_id in list(self.text):
            if task_id not in watched:
                del self.text[task_id]
        return progress, outputs
