"""The folder of a ``train`` run: its name, ``run.json``, ``episodes.csv``, the learning curve, the summary, and
the lock that lets one process at a time train into it.

``run.json`` holds what ``eval`` and ``train --resume`` need to rebuild env and agent; it is written when training
starts and again at each checkpoint, so a run stopped at any moment can be resumed. ``episodes.csv`` holds every
finished episode's return per agent; ``checkpoints/final.pt`` the agent at the end. Every file is written whole or not
at all (:mod:`skrl_marl_ext.checkpoints.files`).
"""

from __future__ import annotations

import csv
import io
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

from skrl_marl_ext.checkpoints.files import write_atomic, write_text
from skrl_marl_ext.cli.errors import UsageError

RUN_FILE = "run.json"
FINAL_CHECKPOINT = "final.pt"
LOCK_FILE = "train.lock"

Episodes = list[tuple[int, dict[str, float]]]
"""``(step, {agent: return})`` of finished episodes, as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them."""


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


def write_run(agent, run: dict[str, Any], run_dir: str, episodes: Episodes) -> dict[str, str]:
    """Write the final checkpoint, ``run.json``, ``episodes.csv`` and the learning curve of ``episodes``; return their
    paths."""
    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    agent.save(checkpoint)
    write_run_file(run_dir, run)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    write_episodes(episodes, run["num_envs"], episodes_csv)
    plot = os.path.join(run_dir, "learning_curve.png")
    title = f"{run['algo'].upper()} on {run['env']} ({run['num_envs']} envs)"
    plot_learning_curve(episodes, num_envs=run["num_envs"], path=plot, title=title)
    return {"checkpoint": checkpoint, "plot": plot, "episodes": episodes_csv}


def write_episodes(episodes: Episodes, num_envs: int, path: str) -> None:
    """Write ``step, frames, <agent>...`` rows, one per finished episode."""
    agents = list(episodes[0][1]) if episodes else []
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["step", "frames", *agents])
    for step, returns in episodes:
        writer.writerow([step, step * num_envs, *(f"{returns[uid]:.6g}" for uid in agents)])
    write_text(path, text.getvalue())


def read_episodes(run_dir: str) -> Episodes:
    """The episodes of ``run_dir/episodes.csv`` (none when it has no such file)."""
    path = os.path.join(run_dir, "episodes.csv")
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    agents = lambda row: [k for k in row if k not in ("step", "frames")]  # noqa: E731
    return [(int(row["step"]), {uid: float(row[uid]) for uid in agents(row)}) for row in rows]


def plot_learning_curve(episodes: Episodes, *, num_envs: int, path: str, title: str, bins: int = 50) -> None:
    """Plot the mean episode return (mean over agents) against env frames, in ``bins`` equal step windows.

    :param episodes: ``(step, {agent: return})`` as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them.
    :param num_envs: Envs per step (frames = step * num_envs).
    :param path: PNG file to write.
    :param title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if episodes:
        agents = list(episodes[0][1])
        xs, means, per_agent = _binned_returns(episodes, agents, num_envs=num_envs, bins=bins)
        for i, uid in enumerate(agents):
            ax.plot(xs, per_agent[:, i].tolist(), linewidth=0.8, alpha=0.4, label=uid)
        ax.plot(xs, means, color="black", linewidth=2.0, label="mean over agents")
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


def _binned_returns(
    episodes: Episodes, agents: list[str], *, num_envs: int, bins: int
) -> tuple[list[float], list[float], torch.Tensor]:
    """``(frames at each non-empty bin's end, mean return, per-agent mean returns (bins, agents))`` of the episodes
    grouped into ``bins`` equal step windows."""
    steps = torch.tensor([step for step, _ in episodes], dtype=torch.float64)
    returns = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
    edges = torch.linspace(0, float(steps.max()), bins + 1)
    which = torch.bucketize(steps, edges[1:-1], right=True)
    xs, means, per_agent = [], [], []
    for b in range(bins):
        rows = returns[which == b]
        if len(rows):
            xs.append(float(edges[b + 1]) * num_envs)
            per_agent.append(rows.mean(dim=0))
            means.append(float(rows.mean()))
    return xs, means, torch.stack(per_agent)


def return_stats(episodes: Episodes) -> dict[str, tuple[float, float]]:
    """``{agent or "team": (mean, std)}`` over episodes; the team return is the sum of the agents' returns."""
    agents = list(episodes[0][1])
    table = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
    columns = {uid: table[:, i] for i, uid in enumerate(agents)}
    columns["team"] = table.sum(dim=1)
    return {key: (float(c.mean()), float(c.std(unbiased=False))) for key, c in columns.items()}


def mean_return(episodes: Episodes) -> float:
    """Mean over episodes of the mean over agents of the episode return (nan without episodes)."""
    if not episodes:
        return float("nan")
    return sum(sum(r.values()) / len(r) for _, r in episodes) / len(episodes)


def train_summary(
    run: dict[str, Any],
    paths: dict[str, Any],
    episodes: Episodes,
    *,
    frames: int,
    seconds: float,
    resumed_from: int = 0,
) -> str:
    """The summary of ``train``, a few lines that fit 80 columns (paths aside), with the run's paths relative to the
    working directory; also puts ``first`` and ``final`` (mean returns) into ``paths``."""
    tenth = max(1, len(episodes) // 10)
    paths["first"], paths["final"] = mean_return(episodes[:tenth]), mean_return(episodes[-tenth:])
    returns = (
        f"mean return per agent: {paths['first']:.2f} -> {paths['final']:.2f} (first -> last 10% of episodes)"
        if episodes
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
