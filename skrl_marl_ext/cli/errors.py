"""How the command fails: bad input as one line (exit status 2), a fault while it runs as one line (exit status 1), a
run stopped by a signal as one line (``128 + signal``)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the command line: reported as one line, not a traceback."""


class Stopped(Exception):
    """A signal (Ctrl-C, SIGTERM) ended a run early and cleanly: one line, exit status ``status`` (``128 + signal``)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class RanksDisagree(Exception):
    """The ranks of a distributed run ended with different parameters (exit status 1)."""
