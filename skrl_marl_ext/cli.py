"""The ``skrl-marl`` command (also ``python -m skrl_marl_ext``): train and evaluate with skrl's trainer.

``skrl-marl train`` builds an env from a spec (``vmas:balance`` by default), the agent from a YAML config in skrl's
Runner format (the package's default for ``--algo``, or ``--config``), trains with skrl's ``SequentialTrainer``
(tqdm progress bar, TensorBoard logs and checkpoints in the run directory), then writes ``run.json`` (what ``eval``
needs to rebuild env and agent), ``episodes.csv`` (every finished episode's return per agent) and
``learning_curve.png``. ``skrl-marl eval --checkpoint PATH`` runs deterministic episodes and prints the returns.

Bad input (unknown algo, env, scenario, a missing extra) ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
import sys
import time
from importlib import resources
from typing import Any

import torch

DEFAULT_ENV = "vmas:balance"
DEFAULT_NUM_ENVS = 128
DEFAULT_TIMESTEPS = 4000  # env steps of every env: 128 x 4000 = 512k frames, 2-3 min on 2 CPU cores
RUN_FILE = "run.json"
FINAL_CHECKPOINT = "final.pt"


THREADS_HELP = (
    "CPU threads of torch; 0 keeps torch's own default (default: %(default)s, as batched envs and small MLPs gain "
    "little from more, and on a busy machine extra threads spin-wait on each other)"
)


class UsageError(Exception):
    """Bad input from the command line: reported as one line, not a traceback."""


def _check_algorithm(algo: str) -> None:
    """Raise :class:`UsageError` unless ``algo`` is one of ours and importable (MADDPG is imported only here)."""
    from skrl_marl_ext.runner import ALGORITHM_NAMES, load_algorithm

    if algo not in ALGORITHM_NAMES:
        raise UsageError(f"--algo {algo}: unknown algorithm; choose one of {', '.join(ALGORITHM_NAMES)}")
    try:
        load_algorithm(algo)
    except ValueError as e:
        raise UsageError(f"--algo {algo}: {e}") from None


# ---------------------------------------------------------------------------------------------------- config


def default_config(algo: str) -> dict[str, Any]:
    """The package's default Runner config for ``algo`` (``skrl_marl_ext/configs/<algo>.yaml``)."""
    import yaml

    text = resources.files("skrl_marl_ext").joinpath("configs", f"{algo}.yaml").read_text()
    return yaml.safe_load(text)


def load_config(path: str) -> dict[str, Any]:
    """Read a Runner YAML file; raise :class:`UsageError` naming the problem."""
    import yaml

    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: no such file")
    try:
        with open(path) as file:
            cfg = yaml.safe_load(file)
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "agent" not in cfg:
        raise UsageError(f"--config {path}: expected skrl Runner sections (models, memory, agent, trainer)")
    return cfg


def parse_env_args(items: list[str]) -> dict[str, Any]:
    """``["N=3", "continuous_actions=true"]`` -> ``{"N": 3, "continuous_actions": True}`` (values read as YAML)."""
    import yaml

    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg '{item}': write KEY=VALUE, e.g. --env-arg max_cycles=25")
        kwargs[key] = yaml.safe_load(value)
    return kwargs


def build_env(spec: str, *, num_envs: int, device: str, seed: int | None, env_kwargs: dict[str, Any]):
    """:func:`skrl_marl_ext.envs.make_env` behind an :class:`EpisodeRecorder`; bad specs become :class:`UsageError`."""
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    try:
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available here; use --device cpu")
    except RuntimeError:
        raise UsageError(f"--device {device}: not a torch device (cpu, cuda, cuda:1, ...)") from None

    try:
        env = make_env(spec, num_envs=num_envs, device=device, seed=seed, **env_kwargs)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--env {spec}: {e}") from None
    except TypeError as e:  # an env argument the env does not take
        raise UsageError(f"--env {spec}: {e}; check --env-arg") from None
    return EpisodeRecorder(env)


def build_runner(env, cfg: dict[str, Any]):
    """Our :class:`~skrl_marl_ext.runner.Runner`; config mistakes become :class:`UsageError`."""
    from skrl_marl_ext.runner import Runner

    algo = str(cfg["agent"].get("class", "")).lower()
    if algo == "mappo" and any(space is None for space in env.state_spaces.values()):
        raise UsageError("MAPPO needs a global state and this env has none: use --algo ippo")
    try:
        return Runner(env, cfg)
    except (ValueError, TypeError, KeyError) as e:
        raise UsageError(f"config: {e}") from None


# ---------------------------------------------------------------------------------------------------- outputs


def write_episodes(episodes: list[tuple[int, dict[str, float]]], num_envs: int, path: str) -> None:
    """Write ``step, frames, <agent>...`` rows, one per finished episode."""
    agents = list(episodes[0][1]) if episodes else []
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["step", "frames", *agents])
        for step, returns in episodes:
            writer.writerow([step, step * num_envs, *(f"{returns[uid]:.6g}" for uid in agents)])


def plot_learning_curve(
    episodes: list[tuple[int, dict[str, float]]], *, num_envs: int, path: str, title: str, bins: int = 50
) -> None:
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
        steps = torch.tensor([step for step, _ in episodes], dtype=torch.float64)
        agents = list(episodes[0][1])
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
        per_agent = torch.stack(per_agent)
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


def _return_stats(episodes: list[tuple[int, dict[str, float]]]) -> dict[str, tuple[float, float]]:
    """``{agent or "team": (mean, std)}`` over episodes; the team return is the sum of the agents' returns."""
    agents = list(episodes[0][1])
    table = torch.tensor([[r[uid] for uid in agents] for _, r in episodes], dtype=torch.float64)
    columns = {uid: table[:, i] for i, uid in enumerate(agents)}
    columns["team"] = table.sum(dim=1)
    return {key: (float(c.mean()), float(c.std(unbiased=False))) for key, c in columns.items()}


# ---------------------------------------------------------------------------------------------------- commands


def _run_name(algo: str, env_spec: str) -> str:
    return f"{time.strftime('%y-%m-%d_%H-%M-%S')}_{algo}_{re.sub(r'[^A-Za-z0-9]+', '-', env_spec).strip('-')}"


def train(args: argparse.Namespace) -> dict[str, Any]:
    """``skrl-marl train``: returns the paths written (also printed as one summary line)."""
    cfg = load_config(args.config) if args.config else None
    algo = str(args.algo or (cfg["agent"].get("class") if cfg else "mappo")).lower()
    _check_algorithm(algo)
    timesteps = args.timesteps or (cfg or {}).get("trainer", {}).get("timesteps") or DEFAULT_TIMESTEPS
    if cfg is None:
        cfg = default_config(algo)
    elif str(cfg["agent"].get("class", "")).lower() != algo:
        raise UsageError(f"--algo {algo} but --config has agent.class {cfg['agent'].get('class')}; drop one of them")
    if args.num_envs < 1 or timesteps < 1:
        raise UsageError("--num-envs and --timesteps must be positive")
    env_kwargs = parse_env_args(args.env_arg)
    env = build_env(args.env, num_envs=args.num_envs, device=args.device, seed=args.seed, env_kwargs=env_kwargs)

    run_name = _run_name(algo, args.env)
    run_dir = os.path.abspath(os.path.join(args.out, run_name))
    cfg = copy.deepcopy(cfg)
    cfg["seed"] = args.seed
    cfg.setdefault("models", {})
    if args.shared_policy:
        cfg["models"]["share_across_agents"] = True
    experiment = cfg["agent"].setdefault("experiment", {}) or {}
    experiment.update({"directory": os.path.abspath(args.out), "experiment_name": run_name})
    cfg["agent"]["experiment"] = experiment
    cfg["trainer"] = {**cfg.get("trainer", {}), "timesteps": timesteps, "headless": True}
    cfg["trainer"]["disable_progressbar"] = bool(args.no_progress)
    runner = build_runner(env, cfg)

    start = time.perf_counter()
    runner.run("train")
    seconds = time.perf_counter() - start

    checkpoint = os.path.join(run_dir, "checkpoints", FINAL_CHECKPOINT)
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    runner.agent.save(checkpoint)
    run = {
        "algo": algo,
        "env": args.env,
        "env_kwargs": env_kwargs,
        "num_envs": args.num_envs,
        "device": args.device,
        "seed": args.seed,
        "timesteps": timesteps,
        "train_seconds": round(seconds, 2),
        "config": cfg,
    }
    with open(os.path.join(run_dir, RUN_FILE), "w") as file:
        json.dump(run, file, indent=2, default=str)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    write_episodes(env.episodes, args.num_envs, episodes_csv)
    plot = os.path.join(run_dir, "learning_curve.png")
    plot_learning_curve(
        env.episodes, num_envs=args.num_envs, path=plot, title=f"{algo.upper()} on {args.env} ({args.num_envs} envs)"
    )
    tenth = max(1, len(env.episodes) // 10)
    first, final = _mean_return(env.episodes[:tenth]), _mean_return(env.episodes[-tenth:])
    returns = (
        f"mean episode return per agent, first 10% of episodes {first:.2f} -> last 10% {final:.2f}"
        if env.episodes
        else "no episode finished"
    )
    print(
        f"skrl-marl: trained {algo} on {args.env} for {timesteps * args.num_envs} frames in {seconds:.0f} s "
        f"({returns}); run: {run_dir} | checkpoint: {checkpoint} | plot: {plot} | tensorboard --logdir {run_dir}"
    )
    return {
        "run_dir": run_dir,
        "checkpoint": checkpoint,
        "plot": plot,
        "episodes": episodes_csv,
        "first": first,
        "final": final,
    }


def _mean_return(episodes: list[tuple[int, dict[str, float]]]) -> float:
    """Mean over episodes of the mean over agents of the episode return (nan without episodes)."""
    if not episodes:
        return float("nan")
    return sum(sum(r.values()) / len(r) for _, r in episodes) / len(episodes)


def evaluate(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """``skrl-marl eval``: deterministic episodes; returns (and prints) ``{agent or "team": (mean, std)}``."""
    path = os.path.abspath(args.checkpoint)
    if os.path.isdir(path):
        run_dir, checkpoint = path, os.path.join(path, "checkpoints", FINAL_CHECKPOINT)
    else:
        run_dir, checkpoint = os.path.dirname(os.path.dirname(path)), path
    run_file = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(checkpoint) or not os.path.isfile(run_file):
        raise UsageError(
            f"--checkpoint {args.checkpoint}: expected a run directory of 'skrl-marl train' or a checkpoint in its "
            f"checkpoints/ folder (with {RUN_FILE} in the run directory)"
        )
    if args.episodes < 1:
        raise UsageError("--episodes must be positive")
    with open(run_file) as file:
        run = json.load(file)
    num_envs = args.num_envs or min(run["num_envs"], args.episodes)
    device = args.device or run["device"]
    env = build_env(run["env"], num_envs=num_envs, device=device, seed=args.seed, env_kwargs=run["env_kwargs"])
    cfg = copy.deepcopy(run["config"])
    cfg["seed"] = args.seed
    cfg["agent"]["experiment"] = {"directory": run_dir, "experiment_name": "eval", "write_interval": 0}
    cfg["agent"]["experiment"]["checkpoint_interval"] = 0
    cfg["trainer"].update({"timesteps": 1, "disable_progressbar": True})
    runner = build_runner(env, cfg)
    agent = runner.agent
    try:
        agent.load(checkpoint)
    except ValueError as e:  # a checkpoint of another run, or one holding more than tensors (refused unread)
        raise UsageError(f"--checkpoint {args.checkpoint}: {e}") from None
    agent.enable_training_mode(False)

    observations, infos = env.reset()
    states = env.state()
    max_steps = 100_000
    with torch.no_grad():
        for step in range(max_steps):
            actions, outputs = agent.act(observations, states, timestep=step, timesteps=max_steps)
            actions = outputs.get("mean_actions", actions)
            next_observations, rewards, terminated, truncated, infos = env.step(actions)
            next_states = env.state()
            # lets the agent read the action masks of the next observations from infos
            agent.record_transition(
                observations=observations,
                states=states,
                actions=actions,
                rewards=rewards,
                next_observations=next_observations,
                next_states=next_states,
                terminated=terminated,
                truncated=truncated,
                infos=infos,
                timestep=step,
                timesteps=max_steps,
            )
            observations, states = next_observations, next_states
            if len(env.episodes) >= args.episodes:
                break
    episodes = env.episodes[: args.episodes]
    if not episodes:
        raise UsageError(f"no episode ended within {max_steps} steps")
    stats = _return_stats(episodes)
    print(f"skrl-marl: {len(episodes)} deterministic episodes of {run['algo']} on {run['env']} ({checkpoint})")
    for key, (mean, std) in stats.items():
        print(f"  {key:>16}: {mean:10.3f} +- {std:.3f}")
    return stats


# ---------------------------------------------------------------------------------------------------- entry


def make_parser() -> argparse.ArgumentParser:
    """The ``skrl-marl`` parser; every option's help states its default."""
    parser = argparse.ArgumentParser(prog="skrl-marl", description="Train and evaluate skrl_marl_ext's agents.")
    commands = parser.add_subparsers(dest="command", required=True)

    t = commands.add_parser("train", help="train an agent (defaults: MAPPO on VMAS balance)")
    t.add_argument(
        "--algo", default=None, help="mappo, ippo or maddpg (default: the --config's agent.class, else mappo)"
    )
    t.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help="vmas:<scenario> | pettingzoo:<module> | builtin:spread (default: %(default)s)",
    )
    t.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env argument, repeatable (default: none, the env's own defaults)",
    )
    t.add_argument(
        "--num-envs", type=int, default=DEFAULT_NUM_ENVS, help="envs stepped as one batch (default: %(default)s)"
    )
    t.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help=f"env steps, each stepping every env (default: --config's trainer.timesteps, else {DEFAULT_TIMESTEPS})",
    )
    t.add_argument(
        "--device", default="cpu", help="device of env and agent: cpu, cuda, cuda:1, ... (default: %(default)s)"
    )
    t.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    t.add_argument("--seed", type=int, default=0, help="seed of torch, numpy and the env (default: %(default)s)")
    t.add_argument(
        "--config",
        default=None,
        help="skrl Runner YAML with models, memory, agent and trainer sections "
        "(default: the package's skrl_marl_ext/configs/<algo>.yaml)",
    )
    t.add_argument(
        "--shared-policy",
        action="store_true",
        help="agents with equal spaces share their models (default: off, one model per agent)",
    )
    t.add_argument(
        "--out", default="runs", help="directory of the runs (default: %(default)s, in the working directory)"
    )
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: off, the bar is shown)")

    e = commands.add_parser("eval", help="run deterministic episodes of a trained agent")
    e.add_argument(
        "--checkpoint",
        required=True,
        help="run directory of 'skrl-marl train', or a .pt file in its checkpoints/ (required, no default)",
    )
    e.add_argument(
        "--episodes", type=int, default=10, help="deterministic episodes to run and report (default: %(default)s)"
    )
    e.add_argument(
        "--num-envs", type=int, default=None, help="envs stepped as one batch (default: min(training envs, --episodes))"
    )
    e.add_argument("--device", default=None, help="device of env and agent (default: the training device)")
    e.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    e.add_argument(
        "--seed", type=int, default=12345, help="seed of torch, numpy and the env's episodes (default: %(default)s)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``skrl-marl``; returns the exit status (2 on bad input)."""
    args = make_parser().parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        if args.command == "train":
            train(args)
        else:
            evaluate(args)
    except UsageError as e:
        print(f"skrl-marl {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
