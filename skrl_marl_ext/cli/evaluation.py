"""What is done with a trained run's checkpoint: ``skrl-marl eval`` (deterministic episodes, their returns) and
``skrl-marl export`` (a file skrl's own MAPPO/IPPO load for play)."""

from __future__ import annotations

import argparse
import copy
import os
from typing import Any

from skrl_marl_ext.checkpoints.files import WriteError
from skrl_marl_ext.cli.build import build_env, build_runner
from skrl_marl_ext.cli.errors import UsageError
from skrl_marl_ext.cli.run_folder import RUN_FILE, latest_checkpoint, read_run_file, return_stats

MAX_EVAL_STEPS = 100_000


def evaluate(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """``skrl-marl eval``: deterministic episodes; returns (and prints) ``{agent or "team": (mean, std)}``."""
    run_dir, checkpoint, run = _load_run(args)
    if args.episodes < 1:
        raise UsageError("--episodes must be positive")
    num_envs = args.num_envs or min(run["num_envs"], args.episodes)
    device = args.device or run["device"]
    env = build_env(run["env"], num_envs=num_envs, device=device, seed=args.seed, env_kwargs=run["env_kwargs"])
    cfg = copy.deepcopy(run["config"])
    cfg["seed"] = args.seed
    cfg["agent"]["experiment"] = {"directory": run_dir, "experiment_name": "eval", "write_interval": 0}
    cfg["agent"]["experiment"]["checkpoint_interval"] = 0
    cfg["trainer"].update({"timesteps": 1, "disable_progressbar": True})
    agent = build_runner(env, cfg).agent
    try:
        agent.load(checkpoint)
    except ValueError as e:  # a checkpoint of another run, or one holding more than tensors (refused unread)
        raise UsageError(f"--checkpoint {args.checkpoint}: {e}") from None
    agent.enable_training_mode(False)

    episodes = run_episodes(agent, env, args.episodes)
    if not episodes:
        raise UsageError(f"no episode ended within {MAX_EVAL_STEPS} steps")
    stats = return_stats(episodes)
    print(f"skrl-marl: {len(episodes)} deterministic episodes of {run['algo']} on {run['env']} ({checkpoint})")
    for key, (mean, std) in stats.items():
        print(f"  {key:>16}: {mean:10.3f} +- {std:.3f}")
    return stats


def _load_run(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """``(run_dir, checkpoint, run.json)`` of ``eval --checkpoint`` (a run directory or a checkpoint in one)."""
    option = f"--checkpoint {args.checkpoint}"
    path = os.path.abspath(args.checkpoint)
    if not os.path.exists(path):
        raise UsageError(f"{option}: {path} does not exist")
    if os.path.isdir(path):
        run = read_run_file(path, option=option)  # its checkpoint: final.pt, or the latest of a run stopped early
        return path, latest_checkpoint(path, run, option=option)[1], run
    run_dir = os.path.dirname(os.path.dirname(path))
    if not os.path.isfile(os.path.join(run_dir, RUN_FILE)):
        raise UsageError(
            f"{option}: expected a run directory of 'skrl-marl train' or a checkpoint in its checkpoints/ folder "
            f"(with {RUN_FILE} in the run directory); {run_dir} has no {RUN_FILE}"
        )
    return run_dir, path, read_run_file(run_dir, option=option)


def run_episodes(agent, env, episodes: int, *, max_steps: int = MAX_EVAL_STEPS) -> list[tuple[int, dict]]:
    """Step ``env`` (an :class:`~skrl_marl_ext.envs.EpisodeRecorder`) with the agent's deterministic actions until
    ``episodes`` episodes ended; return them (fewer only if ``max_steps`` ran out).

    Each step is :func:`skrl_marl_ext.trainers.interact` without learning; ``record_transition`` still runs, so the
    agent reads the next observations' action masks from the infos.

    :param agent: The agent, in evaluation mode.
    :param env: The env behind an ``EpisodeRecorder``.
    :param episodes: Episodes to run.
    :param max_steps: Steps at the most.
    """
    from skrl_marl_ext.trainers import interact

    observations, _ = env.reset()
    states = env.state()
    for step in range(max_steps):
        result = interact(
            agent, env, observations, states, timestep=step, timesteps=max_steps, learn=False, deterministic=True
        )
        observations, states = result.next_observations, result.next_states
        if len(env.episodes) >= episodes:
            break
    return env.episodes[:episodes]


def export(args: argparse.Namespace) -> str:
    """``skrl-marl export``: write the models and preprocessors of a checkpoint (or a run folder's, as ``eval`` takes
    it) for skrl's MAPPO/IPPO to play (:func:`skrl_marl_ext.checkpoints.export.export_for_skrl`); prints one line saying what it
    leaves out."""
    from skrl_marl_ext.checkpoints.export import export_for_skrl

    option = f"export {args.checkpoint}"
    source = os.path.abspath(args.checkpoint)
    if not os.path.exists(source):
        raise UsageError(f"{option}: {source} does not exist")
    if os.path.isdir(source):
        source = latest_checkpoint(source, read_run_file(source, option=option), option=option)[1]
    try:
        left_out = export_for_skrl(source, args.out)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except WriteError:
        raise
    except OSError as e:  # reading the source
        raise UsageError(f"{option}: {e.strerror or e}") from None
    line = f"skrl-marl: wrote {args.out} from {source} for skrl's MAPPO/IPPO load(); {left_out}"
    print(line)
    return line
