"""The exception a loader raises for a file that cannot become an indexed document."""

from __future__ import annotations

from tasks.core.reasons import Reason


class LoadError(Exception):
    """A file that cannot be indexed, with its reason (which also says empty or failed)."""

    def __init__(self, reason: Reason, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
