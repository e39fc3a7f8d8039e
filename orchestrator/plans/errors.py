"""Problems in a plan document: each names where it is and what, all raised together."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PlanError:
    """One problem in a plan: where it is (a subtask, a top-level field, the file) and what.

    `field` is the subtask field at fault, when there is one; `line` the document's line, when
    known. Both are part of the message shown.
    """

    where: str
    message: str
    field: str = ""
    line: int | None = None

    @property
    def location(self) -> str:
        """Where the problem is, as shown before its message: `line 14: subtasks[3] (key "a")`."""
        return f"line {self.line}: {self.where}" if self.line else self.where

    def __str__(self) -> str:
        if self.field:
            return f"{self.location}: {self.field}: {self.message}"
        return f"{self.location}: {self.message}"


class PlanValidationError(Exception):
    """Every problem found in a plan, raised together."""

    def __init__(self, errors: Iterable[PlanError]):
        self.errors: list[PlanError] = list(errors)
        super().__init__(self.report("plan"))

    def report(self, source: str) -> str:
        """A heading naming the source and the number of problems, then one problem per line."""
        count = len(self.errors)
        heading = f"{source}: {count} problem{'' if count == 1 else 's'}"
        return "\n".join([heading, *(f"  {error}" for error in self.errors)])

    def __str__(self) -> str:
        return self.report("plan")
