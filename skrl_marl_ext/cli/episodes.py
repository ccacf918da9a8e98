"""``episodes.csv`` of a run: one row per finished episode (``step, frames, <agent>...``), appended as episodes end,
and read back in one pass for the summary line and the learning curve.

Nothing here holds a run's episodes in memory: a long run finishes millions of them (256 envs of 25-step episodes,
ten a step). The rows go to the file through a buffer, which is flushed and fsynced at each checkpoint, so the rows
up to the step that ``run.json`` records are whole; a row a kill cut short can only be the last line. ``--resume``
rewrites the file (whole or not at all) with the complete rows of the steps its checkpoint had completed, then goes
on appending.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import io
import os
import sys
from collections.abc import Iterator

from skrl_marl_ext.checkpoints.files import WriteError, write_atomic, write_text

EPISODES_FILE = "episodes.csv"
LEADING_COLUMNS = ("step", "frames")


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


class EpisodeLog:
    """The ``episodes.csv`` of a run being trained: rows appended as episodes end (see the module docstring)."""

    def __init__(self, run_dir: str, agents: list[str], *, num_envs: int, resume_step: int | None = None) -> None:
        """Start the file of a new run (its header alone), or for a run resumed at ``resume_step`` keep its complete
        rows of the steps up to ``resume_step``; then open it for appending.

        :param run_dir: The run's folder.
        :param agents: The agents, in the order of the returns handed to :meth:`add`.
        :param num_envs: Envs per step (``frames = step * num_envs``).
        :param resume_step: The steps the checkpoint a resume starts from had completed (None for a new run).

        :raises WriteError: When the file cannot be written (the message names it).
        """
        self.path = os.path.join(os.path.abspath(run_dir), EPISODES_FILE)
        self.agents, self.num_envs = list(agents), num_envs
        self.count, self.last_step = 0, 0
        header = [*LEADING_COLUMNS, *self.agents]
        if resume_step is None or not os.path.isfile(self.path):
            text = io.StringIO(newline="")
            csv.writer(text).writerow(header)
            write_text(self.path, text.getvalue())
        else:
            write_atomic(self.path, lambda file: self._keep_rows(file, header, resume_step))
        try:  # the file was just replaced by a regular one; never follow a link planted under its name since
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
            self._file = open(fd, "a", newline="", encoding="utf-8")  # noqa: SIM115 - open while the run trains
        except OSError as e:
            raise WriteError(f"cannot write {self.path}: {_reason(e)}") from None
        self._writer = csv.writer(self._file)

    def _keep_rows(self, out, header: list[str], until: int) -> None:
        """Write ``header`` and the file's complete rows of steps up to ``until`` to ``out`` (bytes), counting them."""
        text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
        writer = csv.writer(text)
        writer.writerow(header)
        for step, returns in _rows(self.path, header=header, warn_until=until):
            if step > until:
                break
            writer.writerow([step, step * self.num_envs, *(f"{value:.6g}" for value in returns)])
            self.count, self.last_step = self.count + 1, step
        text.detach()  # ``out`` stays open for write_atomic

    def add(self, step: int, returns: list[list[float]]) -> None:
        """Append the episodes that ended at the run's step ``step``: one list of the return per agent for each.

        :raises WriteError: When the file cannot be written (the message names it).
        """
        frames = step * self.num_envs
        try:
            self._writer.writerows([step, frames, *(f"{value:.6g}" for value in row)] for row in returns)
        except OSError as e:
            raise WriteError(f"cannot write {self.path}: {_reason(e)}") from None
        self.count += len(returns)
        self.last_step = step

    def sync(self) -> None:
        """Put the rows written so far on disk (at each checkpoint: the rows up to ``run.json``'s step are whole).

        :raises WriteError: When the file cannot be written (the message names it).
        """
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise WriteError(f"cannot write {self.path}: {_reason(e)}") from None

    def close(self) -> None:
        """:meth:`sync` and close the file (again: nothing)."""
        if not self._file.closed:
            try:
                self.sync()
            finally:
                self._file.close()

    def stats(self, *, bins: int = 50) -> EpisodeStats:
        """:func:`read_stats` of the file (after :meth:`close`: of every row written)."""
        return read_stats(self.path, count=self.count, last_step=self.last_step, num_envs=self.num_envs, bins=bins)


def _complete_lines(file, *, warn_until: int | None = None) -> Iterator[str]:
    """The lines of ``file`` up to one without its line end (a write a kill cut short), which is left out; said in one
    line on stderr where it is a row of a step up to ``warn_until`` (one a resume would have kept)."""
    for line in file:
        if not line.endswith("\n"):
            step = line.split(",", 1)[0]
            if warn_until is not None and step.isdigit() and int(step) <= warn_until:
                print(
                    f"skrl-marl: warning: {file.name}: its last line was cut short; left out: {line!r}", file=sys.stderr
                )
            return
        yield line


def _rows(path: str, *, header: list[str], warn_until: int | None = None) -> Iterator[tuple[int, list[float]]]:
    """``(step, return per agent)`` of each complete row of the file at ``path`` whose header is ``header`` (none
    when it has another header). A line that does not parse is left out with a warning on stderr naming the file
    and the line."""
    with open(path, encoding="utf-8", newline="") as file:
        reader = csv.reader(_complete_lines(file, warn_until=warn_until))
        if next(reader, None) != header:
            print(f"skrl-marl: warning: {path} has other columns than {header}; its rows are left out", file=sys.stderr)
            return
        skip = len(LEADING_COLUMNS)
        for fields in reader:
            try:
                if len(fields) != len(header):
                    raise ValueError
                yield int(fields[0]), [float(value) for value in fields[skip:]]
            except ValueError:
                print(f"skrl-marl: warning: {path}: line {reader.line_num} is damaged; left out", file=sys.stderr)


@dataclasses.dataclass
class EpisodeStats:
    """What the summary line and the learning curve show of a run's episodes."""

    agents: list[str]
    count: int
    """Episodes in the file."""
    first: float
    """Mean over the first tenth of the episodes of the mean return over agents (nan without episodes)."""
    final: float
    """The same over the last tenth."""
    frames: list[float] = dataclasses.field(default_factory=list)
    """Frames at the end of each bin of steps that holds episodes."""
    means: list[float] = dataclasses.field(default_factory=list)
    """Mean return over agents and episodes of each of those bins."""
    per_agent: list[list[float]] = dataclasses.field(default_factory=list)
    """Mean return of each agent over the episodes of each of those bins, ``[bin][agent]``."""


def read_stats(path: str, *, count: int, last_step: int, num_envs: int, bins: int = 50) -> EpisodeStats:
    """The :class:`EpisodeStats` of the ``count`` rows of ``episodes.csv`` at ``path``, read in one pass: the first
    and last tenth of the episodes, and the episodes grouped into ``bins`` equal windows of steps from 0 to
    ``last_step`` (the step of the last row)."""
    with open(path, encoding="utf-8", newline="") as file:
        header = next(csv.reader([file.readline()]), [])
    agents = header[len(LEADING_COLUMNS) :]
    if count == 0 or not agents:
        return EpisodeStats(agents, 0, float("nan"), float("nan"))
    tenth = max(1, count // 10)
    inner = [last_step * b / bins for b in range(1, bins)]  # a step on an edge goes to the later bin
    sums, counts = [[0.0] * len(agents) for _ in range(bins)], [0] * bins
    first = final = 0.0
    for index, (step, values) in enumerate(_rows(path, header=header)):
        mean = sum(values) / len(values)
        if index < tenth:
            first += mean
        if index >= count - tenth:
            final += mean
        b = bisect.bisect_right(inner, step)
        counts[b] += 1
        sums[b] = [s + v for s, v in zip(sums[b], values, strict=True)]
    stats = EpisodeStats(agents, count, first / tenth, final / tenth)
    for b in range(bins):
        if counts[b]:
            stats.frames.append(last_step * (b + 1) / bins * num_envs)
            stats.per_agent.append([s / counts[b] for s in sums[b]])
            stats.means.append(sum(stats.per_agent[-1]) / len(agents))
    return stats


def run_episode_stats(run_dir: str, *, num_envs: int, bins: int = 50) -> EpisodeStats:
    """:func:`read_stats` of a run's whole ``episodes.csv`` (two passes: its rows counted, then read), e.g. for the
    learning curve of a finished run whose plot is due."""
    path = os.path.join(run_dir, EPISODES_FILE)
    if not os.path.isfile(path):
        return EpisodeStats([], 0, float("nan"), float("nan"))
    with open(path, encoding="utf-8", newline="") as file:
        header = next(csv.reader([file.readline()]), [])
    count = last_step = 0
    for step, _ in _rows(path, header=header):
        count, last_step = count + 1, step
    return read_stats(path, count=count, last_step=last_step, num_envs=num_envs, bins=bins)
