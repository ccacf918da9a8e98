"""The folder of a ``train`` run: its name, ``run.json``, the learning curve, the summary lines, and the lock that
lets one process at a time train into it.

``run.json`` holds what ``eval`` and ``train --resume`` need to rebuild env and agent; it is written when training
starts and again at each checkpoint, so a run stopped at any moment can be resumed. ``episodes.csv`` holds every
finished episode's return per agent, appended as episodes end (:mod:`.episodes`); ``checkpoints/final.pt`` the agent at
the end. Every other file is written whole or not at all (:mod:`skrl_marl_ext.checkpoints.files`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import sys
import time
from typing import Any

import torch

from skrl_marl_ext.checkpoints.files import write_atomic, write_text
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
        file = open(self.path, "a+", encoding="utf-8")  # held open while the run trains
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


def latest_checkpoint(run_dir: str, *, option: str) -> tuple[int, str]:
    """``(steps completed, path)`` of the checkpoint a run goes on from: the one written last
    (``checkpoints/final.pt`` or ``agent_<T>.pt``, by modification time, then by steps), so a run resumed ``--from``
    an earlier step goes on from its own newest file, not from one the earlier part left. A damaged file (a write a
    kill cut short, a copy cut short, a disk that failed) is skipped with one line on stderr naming it.

    :param option: The option and value as typed, named in the messages.
    :raises UsageError: When the run has no intact checkpoint.
    """
    folder = os.path.join(run_dir, "checkpoints")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    names = [n for n in names if n == FINAL_CHECKPOINT or checkpoint_step(n) is not None]

    def written(name: str) -> tuple[float, float]:
        step = checkpoint_step(name)
        return os.path.getmtime(os.path.join(folder, name)), float("inf") if step is None else step

    for name in sorted(names, key=written, reverse=True):
        path = os.path.join(folder, name)
        try:
            return read_steps(path, option=option), path
        except ValueError as e:
            print(f"skrl-marl: warning: skipped {str(e).removeprefix(option + ': ')}", file=sys.stderr)
    raise UsageError(f"{option}: no intact checkpoint in {folder} to start from")


def write_run(agent, run: dict[str, Any], run_dir: str, episodes: EpisodeStats) -> dict[str, str]:
    """Write the final checkpoint, ``run.json`` and the learning curve of ``episodes``; return their paths and that
    of ``episodes.csv`` (written as the episodes ended)."""
    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    agent.save(checkpoint)
    write_run_file(run_dir, run)
    plot = os.path.join(run_dir, "learning_curve.png")
    title = f"{run['algo'].upper()} on {run['env']} ({run['num_envs']} envs)"
    plot_learning_curve(episodes, path=plot, title=title)
    return {"checkpoint": checkpoint, "plot": plot, "episodes": os.path.join(run_dir, EPISODES_FILE)}


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
    """The summary line of ``train``; also puts ``first`` and ``final`` (mean returns) into ``paths``."""
    paths["first"], paths["final"] = episodes.first, episodes.final
    returns = (
        f"mean episode return per agent, first 10% of episodes {paths['first']:.2f} -> last 10% {paths['final']:.2f}"
        if episodes.count
        else "no episode finished"
    )
    run_dir = paths["run_dir"]
    resumed = f", resumed from step {resumed_from} of {run['timesteps']}," if resumed_from else ""
    return (
        f"skrl-marl: trained {run['algo']} on {run['env']} for {frames} frames{resumed} in {seconds:.0f} s "
        f"({returns}); run: {run_dir} | checkpoint: {paths['checkpoint']} | plot: {paths['plot']} | "
        f"tensorboard --logdir {run_dir}"
    )
