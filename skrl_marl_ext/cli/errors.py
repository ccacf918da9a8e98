"""How the command fails: bad input as one line (exit status 2), ranks that disagree (exit status 1)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UsageError(Exception):
    """Bad input from the command line: reported as one line, not a traceback."""


class RanksDisagree(Exception):
    """The ranks of a distributed run ended with different parameters (exit status 1)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` with ``x`` the closest of ``choices`` to ``word``; empty when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""
