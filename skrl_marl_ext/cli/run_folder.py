"""The folder of a ``train`` run: its name, ``run.json``, ``episodes.csv``, the learning curve, the summary lines.

``run.json`` holds what ``eval`` and ``train --resume`` need to rebuild env and agent; ``episodes.csv`` every
finished episode's return per agent; ``checkpoints/final.pt`` the agent at the end.
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from typing import Any

import torch

RUN_FILE = "run.json"
FINAL_CHECKPOINT = "final.pt"

Episodes = list[tuple[int, dict[str, float]]]
"""``(step, {agent: return})`` of finished episodes, as :class:`~skrl_marl_ext.envs.EpisodeRecorder` keeps them."""


def run_name(algo: str, env_spec: str) -> str:
    """``<date>_<time>_<algo>_<env spec>``, the spec's punctuation turned into dashes."""
    return f"{time.strftime('%y-%m-%d_%H-%M-%S')}_{algo}_{re.sub(r'[^A-Za-z0-9]+', '-', env_spec).strip('-')}"


def write_run(agent, run: dict[str, Any], run_dir: str, episodes: Episodes) -> dict[str, str]:
    """Write the final checkpoint, ``run.json``, ``episodes.csv`` and the learning curve of ``episodes``; return their
    paths."""
    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    agent.save(checkpoint)
    with open(os.path.join(run_dir, RUN_FILE), "w") as file:
        json.dump(run, file, indent=2, default=str)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    write_episodes(episodes, run["num_envs"], episodes_csv)
    plot = os.path.join(run_dir, "learning_curve.png")
    title = f"{run['algo'].upper()} on {run['env']} ({run['num_envs']} envs)"
    plot_learning_curve(episodes, num_envs=run["num_envs"], path=plot, title=title)
    return {"checkpoint": checkpoint, "plot": plot, "episodes": episodes_csv}


def write_episodes(episodes: Episodes, num_envs: int, path: str) -> None:
    """Write ``step, frames, <agent>...`` rows, one per finished episode."""
    agents = list(episodes[0][1]) if episodes else []
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["step", "frames", *agents])
        for step, returns in episodes:
            writer.writerow([step, step * num_envs, *(f"{returns[uid]:.6g}" for uid in agents)])


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
    fig.savefig(path, dpi=100)
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
    """The summary line of ``train``; also puts ``first`` and ``final`` (mean returns) into ``paths``."""
    tenth = max(1, len(episodes) // 10)
    paths["first"], paths["final"] = mean_return(episodes[:tenth]), mean_return(episodes[-tenth:])
    returns = (
        f"mean episode return per agent, first 10% of episodes {paths['first']:.2f} -> last 10% {paths['final']:.2f}"
        if episodes
        else "no episode finished"
    )
    run_dir = paths["run_dir"]
    resumed = f", resumed from step {resumed_from} of {run['timesteps']}," if resumed_from else ""
    return (
        f"skrl-marl: trained {run['algo']} on {run['env']} for {frames} frames{resumed} in {seconds:.0f} s "
        f"({returns}); run: {run_dir} | checkpoint: {paths['checkpoint']} | plot: {paths['plot']} | "
        f"tensorboard --logdir {run_dir}"
    )
