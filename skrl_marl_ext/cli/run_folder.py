"""The folder of a ``train`` run: its name, ``run.json``, the learning curve, the summary, and the lock that lets
one process at a time train into it.

``run.json`` holds what ``eval`` and ``train --resume`` need to rebuild env and agent; it is written when training
starts and again at each checkpoint, so a run stopped at any moment can be resumed. ``episodes.csv`` holds every
finished episode's return per agent, appended as episodes end (:mod:`.episodes`); ``checkpoints/final.pt`` the agent at
the end. Every other file is written whole or not at all (:mod:`skrl_marl_ext.checkpoints.files`), to a new temporary
file renamed over its name: a link planted under a name is replaced, never written through; ``train.lock``, the one
file opened in place, refuses a link.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import socket
import sys
import textwrap
import time
from typing import Any

import torch

from skrl_marl_ext.checkpoints.files import WriteError, write_atomic, write_text
from skrl_marl_ext.cli.episodes import EPISODES_FILE, EpisodeStats
from skrl_marl_ext.cli.errors import UsageError

RUN_FILE = "run.json"
FINAL_CHECKPOINT = "final.pt"
LOCK_FILE = "train.lock"

Episodes = list[tuple[int, dict[str, float]]]
"""``(step, {agent: return})`` of finished episodes, as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them
(``eval``'s)."""


def run_name(algo: str, env_spec: str) -> str:
    """``<date>_<time>_<algo>_<env spec>``, the spec's punctuation turned into dashes."""
    return f"{time.strftime('%y-%m-%d_%H-%M-%S')}_{algo}_{re.sub(r'[^A-Za-z0-9]+', '-', env_spec).strip('-')}"


def create_run_folder(out: str, name: str) -> str:
    """Create the folder of a new run, ``out/name``, exclusively: ``name-2``, ``name-3``, ... when the name is taken
    (two runs started in the same second), so a new run never writes into another's folder; return its path.

    :raises UsageError: When ``out`` cannot be created or written.
    """
    try:
        os.makedirs(out, exist_ok=True)
        for number in itertools.count(1):
            path = os.path.abspath(os.path.join(out, name if number == 1 else f"{name}-{number}"))
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create a run folder there ({e.strerror or e})") from None
    raise AssertionError("unreachable")  # pragma: no cover


def read_run_file(run_dir: str, *, option: str) -> dict[str, Any]:
    """The ``run.json`` of ``run_dir``.

    :param option: The option and value as typed (``--resume runs/x``), named in the errors.
    :raises UsageError: When ``run_dir`` does not exist, is not a run folder of ``train`` or its ``run.json`` is damaged.
    """
    if not os.path.exists(run_dir):
        raise UsageError(f"{option}: {run_dir} does not exist")
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(path):
        raise UsageError(
            f"{option}: expected a run directory of 'skrl-marl train' (with {RUN_FILE}); {run_dir} has none"
        )
    try:
        with open(path, encoding="utf-8") as file:
            run = json.load(file)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"{option}: {path} is damaged ({e}); it cannot be read as the run's record") from None
    if not isinstance(run, dict):
        raise UsageError(f"{option}: {path} holds a {type(run).__name__}, not a run record of 'skrl-marl train'")
    missing = [key for key in ("algo", "env", "env_kwargs", "num_envs", "timesteps", "config") if key not in run]
    if missing:
        raise UsageError(f"{option}: {path} is not a run record of 'skrl-marl train' (missing {missing})")
    return run


def write_run_file(run_dir: str, run: dict[str, Any]) -> str:
    """Write ``run_dir/run.json`` (whole or not at all); return its path."""
    path = os.path.join(run_dir, RUN_FILE)
    write_text(path, json.dumps(run, indent=2, default=str) + "\n")
    return path


class RunLock:
    """The lock of a run folder, held while a process trains into it (``train.lock``, holding that process's id).

    The operating system holds the lock (``flock``; ``msvcrt.locking`` on Windows) and drops it when the process
    ends, however it ends: the lock of a process that was killed is stale at once, and the next ``train`` takes it.
    A second process finds it held and is refused, naming the holder.
    """

    def __init__(self, run_dir: str, *, option: str) -> None:
        self.path = os.path.join(run_dir, LOCK_FILE)
        self.option = option
        self._file: Any = None

    def __enter__(self) -> RunLock:
        file = open(_open_lock_file(self.path, option=self.option), "r+", encoding="utf-8")  # open while it trains
        try:
            _lock(file)
        except OSError:
            file.seek(0)
            holder = file.read().strip() or "another process"
            file.close()
            raise UsageError(
                f"{self.option}: the run is being trained by {holder} ({self.path}); wait for it to end or stop it "
                "(Ctrl-C, kill PID) first"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        file.flush()
        self._file = file
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the lock
            self._file = None


def _open_lock_file(path: str, *, option: str) -> int:
    """The lock file ``path`` opened for reading and writing (created when missing), never through a link: a run folder
    from elsewhere may hold ``train.lock`` as a link to a file outside it, which this would truncate and write.

    :raises UsageError: When ``path`` is a symbolic link or a file with other names (a hard link).
    """
    fix = f"{option}: {path} is a link to another file; remove it (the run makes a new one) and run again"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        if os.path.islink(path):  # ELOOP on POSIX
            raise UsageError(fix) from None
        raise UsageError(f"{option}: cannot open {path} ({e.strerror or e})") from None
    if os.fstat(fd).st_nlink > 1 or os.path.islink(path):  # a hard link; a link on systems without O_NOFOLLOW
        os.close(fd)
        raise UsageError(fix)
    return fd


def _lock(file: Any) -> None:
    """Lock ``file`` for this process without waiting; raise ``OSError`` when another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        file.seek(0)
        msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
        return
    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def checkpoint_step(path: str) -> int | None:
    """The step in a checkpoint's name (``agent_<step>.pt``), None for another name (``final.pt``, ``best_agent.pt``)."""
    match = re.fullmatch(r"agent_(\d+)\.pt", os.path.basename(path))
    return int(match[1]) if match else None


def read_steps(path: str, *, option: str) -> int:
    """The steps a checkpoint of ours had completed (its ``progress``; 0 for a file without it).

    :raises ValueError: When the file is damaged or not a checkpoint (the message names it).
    """
    from skrl_marl_ext.checkpoints import read_checkpoint

    modules = read_checkpoint(path, map_location="cpu", owner=option)
    progress = [m.get("progress") for m in modules.values() if isinstance(m, dict)] if isinstance(modules, dict) else []
    return max((int(p.get("timestep", 0)) for p in progress if isinstance(p, dict)), default=0)


def latest_checkpoint(run_dir: str, run: dict[str, Any], *, option: str) -> tuple[int, str]:
    """``(steps completed, path)`` of the checkpoint a run goes on from: the one its ``run.json`` records (looked up by
    name in ``run_dir/checkpoints``, so a moved or copied run reads its own files), else the intact one of the latest
    step up to the step ``run.json`` records (``agent_<T>.pt`` by the step in its name, ``final.pt`` by the steps it
    holds). File times are never used: a copy, a sync or a restore gives every file a new one. A damaged file (a write
    a kill cut short, a copy cut short, a disk that failed) is skipped with one line on stderr naming it.

    :param run: The run's ``run.json`` (its ``checkpoint`` and ``step``; a record without them: the latest step).
    :param option: The option and value as typed, named in the messages.
    :raises UsageError: When the run has no intact checkpoint.
    """
    folder = os.path.join(run_dir, "checkpoints")
    names = set(_checkpoint_names(folder))
    recorded = os.path.basename(str(run.get("checkpoint") or ""))
    limit = run.get("step") if isinstance(run.get("step"), int) else None

    def steps_of(name: str) -> int | None:
        try:
            return read_steps(os.path.join(folder, name), option=option)
        except FileNotFoundError:  # moved away meanwhile (rank 0 setting later checkpoints aside)
            return None
        except ValueError as e:
            print(f"skrl-marl: warning: skipped {str(e).removeprefix(option + ': ')}", file=sys.stderr)
            return None

    if recorded in names:
        done = steps_of(recorded)
        if done is not None:
            return done, os.path.join(folder, recorded)
        names.discard(recorded)
    steps = {name: checkpoint_step(name) for name in names}
    if FINAL_CHECKPOINT in names:
        steps[FINAL_CHECKPOINT] = steps_of(FINAL_CHECKPOINT)
    for name in sorted(names, key=lambda n: (steps[n] is not None, steps[n] or 0, n == FINAL_CHECKPOINT), reverse=True):
        step = steps[name]
        if step is None or (limit is not None and step > limit):
            continue
        done = step if name == FINAL_CHECKPOINT else steps_of(name)
        if done is not None:
            return done, os.path.join(folder, name)
    raise UsageError(f"{option}: no intact checkpoint in {folder} to start from")


def _checkpoint_names(folder: str) -> list[str]:
    """The checkpoints a run wrote into ``folder`` (``final.pt`` and ``agent_<T>.pt``)."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return [n for n in names if n == FINAL_CHECKPOINT or checkpoint_step(n) is not None]


def set_aside_later_checkpoints(run_dir: str, done: int, start: str, *, option: str) -> str | None:
    """Move the run's checkpoints of steps after ``done`` (``agent_<T>.pt`` with ``T > done``; ``final.pt`` unless it
    is ``start`` or holds ``done`` steps or fewer) into a new ``checkpoints/superseded_<k>``, so a run going on from
    step ``done`` writes none of their names; say so in one line on stderr. Return that folder (None when none).

    :param start: The checkpoint the run goes on from.
    :param option: The option and value as typed, named in the line.
    """
    folder = os.path.join(run_dir, "checkpoints")
    later = []
    for name in sorted(_checkpoint_names(folder), key=lambda n: (checkpoint_step(n) is None, checkpoint_step(n) or 0)):
        path = os.path.join(folder, name)
        step = checkpoint_step(name)
        if step is None:  # final.pt: its steps are in it (one that cannot be read is kept too)
            if os.path.abspath(path) == os.path.abspath(start):
                continue
            try:
                step = read_steps(path, option=option)
            except ValueError:
                step = None
        if step is None or step > done:
            later.append(name)
    if not later:
        return None
    for number in itertools.count(1):
        aside = os.path.join(folder, f"superseded_{number}")
        try:
            os.mkdir(aside)
            break
        except FileExistsError:
            continue
    for name in later:
        os.replace(os.path.join(folder, name), os.path.join(aside, name))
    shown = ", ".join(later) if len(later) <= 4 else f"{', '.join(later[:2])}, ..., {later[-1]} ({len(later)} files)"
    print(
        f"skrl-marl: note: {option}: moved the checkpoints of steps after {done} ({shown}) to {aside}, so that the "
        f"run going on from step {done} overwrites none of them",
        file=sys.stderr,
    )
    return aside


PLOT_FILE = "learning_curve.png"


def write_run(agent, run: dict[str, Any], run_dir: str, episodes: EpisodeStats) -> dict[str, str]:
    """Write the final checkpoint, ``run.json`` and the learning curve of ``episodes``; return their paths and that
    of ``episodes.csv`` (written as the episodes ended).

    ``run.json`` says the run is finished only once everything else but the plot is written, and the previous plot is
    removed before: a plot that cannot be written leaves a finished run without one, which
    ``skrl-marl train --resume`` then makes (:func:`write_plot`).

    :raises ~skrl_marl_ext.checkpoints.files.WriteError: When a file cannot be written (naming it; for the plot, also
        the command that makes it later).
    """
    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    agent.save(checkpoint)
    plot = os.path.join(run_dir, PLOT_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(plot)  # the earlier part's: a run.json saying "finished" beside no plot is one whose plot is due
    write_run_file(run_dir, run)
    write_plot(run, run_dir, episodes)
    return {"checkpoint": checkpoint, "plot": plot, "episodes": os.path.join(run_dir, EPISODES_FILE)}


def write_plot(run: dict[str, Any], run_dir: str, episodes: EpisodeStats) -> str:
    """Write the run's learning curve, ``run_dir/learning_curve.png``; return its path.

    :raises ~skrl_marl_ext.checkpoints.files.WriteError: When it cannot be written: one line naming it and the command
        that makes it once that folder can be written.
    """
    plot = os.path.join(run_dir, PLOT_FILE)
    title = f"{run['algo'].upper()} on {run['env']} ({run['num_envs']} envs)"
    try:
        plot_learning_curve(episodes, path=plot, title=title)
    except WriteError as e:
        failure = WriteError(
            f"cannot write {plot}: {e.reason}; the run is finished and its checkpoint written: make the plot with "
            f"'skrl-marl train --resume {run_dir}' once that folder can be written"
        )
        failure.errno, failure.reason = e.errno, e.reason
        raise failure from e
    return plot


def plot_due(run: dict[str, Any], run_dir: str) -> bool:
    """Whether a finished run lacks its learning curve (its write failed, see :func:`write_run`)."""
    return run.get("status") == "finished" and not os.path.exists(os.path.join(run_dir, PLOT_FILE))


def plot_learning_curve(episodes: EpisodeStats, *, path: str, title: str) -> None:
    """Plot the mean episode return (mean over agents, and each agent's) against env frames, in the equal step
    windows of ``episodes`` (:func:`~skrl_marl_ext.cli.episodes.read_stats`).

    :param path: PNG file to write.
    :param title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if episodes.count:
        for i, uid in enumerate(episodes.agents):
            ax.plot(episodes.frames, [row[i] for row in episodes.per_agent], linewidth=0.8, alpha=0.4, label=uid)
        ax.plot(episodes.frames, episodes.means, color="black", linewidth=2.0, label="mean over agents")
        ax.legend(fontsize=8)
    ax.set_xlabel("env frames (steps x envs)")
    ax.set_ylabel("episode return per agent")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        write_atomic(path, lambda file: fig.savefig(file, format="png", dpi=100))
    finally:
        plt.close(fig)


def return_stats(episodes: Episodes) -> dict[str, tuple[float, float]]:
    """``{agent or "team": (mean, std)}`` over episodes; the team return is the sum of the agents' returns."""
    agents = list(episodes[0][1])
    table = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
    columns = {uid: table[:, i] for i, uid in enumerate(agents)}
    columns["team"] = table.sum(dim=1)
    return {key: (float(c.mean()), float(c.std(unbiased=False))) for key, c in columns.items()}


def train_summary(
    run: dict[str, Any],
    paths: dict[str, Any],
    episodes: EpisodeStats,
    *,
    frames: int,
    seconds: float,
    resumed_from: int = 0,
) -> str:
    """The summary of ``train``, a few lines that fit 80 columns (paths aside), with the run's paths relative to the
    working directory; also puts ``first`` and ``final`` (mean returns) into ``paths``."""
    paths["first"], paths["final"] = episodes.first, episodes.final
    returns = (
        f"mean return per agent: {paths['first']:.2f} -> {paths['final']:.2f} (first -> last 10% of episodes)"
        if episodes.count
        else "no episode finished"
    )
    run_dir = shown_path(paths["run_dir"])
    files = [os.path.relpath(paths[key], paths["run_dir"]) for key in ("checkpoint", "plot", "episodes")]
    wrap = {"width": 80, "subsequent_indent": "    ", "break_long_words": False, "break_on_hyphens": False}
    words = [  # wrapped at 80 columns (a long env spec); the paths are not, to be copied whole
        f"skrl-marl: trained {run['algo']} on {run['env']} for {frames} frames in {seconds:.0f} s",
        *([f"resumed from step {resumed_from} of {run['timesteps']}"] if resumed_from else []),
        returns,
    ]
    lines = [textwrap.fill(line, initial_indent="" if i == 0 else "  ", **wrap) for i, line in enumerate(words)]
    lines += [
        f"  run folder: {run_dir}",
        f"  in it: {', '.join(files)}, {RUN_FILE}",
        f"  tensorboard --logdir {shlex.quote(run_dir)}",
    ]
    return "\n".join(lines)


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it, else absolute (as a user types it next)."""
    path = os.path.abspath(path)
    try:
        here = os.getcwd()
    except OSError:  # the working directory was removed
        return path
    return os.path.relpath(path, here) if os.path.commonpath([path, here]) == here else path
