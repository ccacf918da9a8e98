"""Runs inside Isaac Lab's interpreter (``.isaaclab-venv/bin/python``) for ``tests/test_isaaclab_real.py`` (not a test
module). Isaac Lab 3.0 needs its own environment (``scripts/setup_isaaclab.sh``), so the tests run this script there
and check what it reports.

``runner OUT.json --algos mappo ippo happo``
    ``Isaac-Pendulum-MARL-Direct`` built kit-less on the CPU (``scripts/isaaclab_smoke.py``'s ``make_env``, as
    ``isaaclab train`` builds it) and wrapped by skrl's Isaac Lab wrapper. For each algorithm, our Runner built from
    the task's YAML file in the installed ``isaaclab_tasks`` (HAPPO from the MAPPO file with ``class: HAPPO``) trains
    two rollouts with a checkpoint after each; the last checkpoint is loaded into skrl's own MAPPO/IPPO built by skrl's
    Runner from the same file (what ``isaaclab play`` does) and into a fresh agent of ours, and both play a few steps
    with the policy's mean action; then a third agent of ours loads it after its Runner is built (``isaaclab train
    --checkpoint``'s order) and trains one more rollout. ``OUT.json`` gets what each step did.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "Isaac-Pendulum-MARL-Direct"
SKRL_CLASS = {"mappo": "MAPPO", "ippo": "IPPO", "happo": "MAPPO"}
"""skrl's agent that plays each algorithm's checkpoint (HAPPO's: its models and optimisers are MAPPO's)."""
YAML_ENTRY_POINT = {"mappo": "skrl_mappo_cfg_entry_point", "ippo": "skrl_ippo_cfg_entry_point"}
PLAY_STEPS = 5


def installed_yaml(algo: str) -> str:
    """Path of the task's skrl YAML file for ``algo`` in the installed ``isaaclab_tasks`` (HAPPO: MAPPO's)."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers the tasks)

    module, name = gym.spec(TASK).kwargs[YAML_ENTRY_POINT.get(algo, "skrl_mappo_cfg_entry_point")].split(":")
    return os.path.join(os.path.dirname(importlib.import_module(module).__file__), name)


def _cfg(algo: str, directory: str, name: str, timesteps: int) -> dict:
    """The YAML file as skrl's ``Runner.load_cfg_from_yaml`` reads it; overridden: the run's length and folder, a
    checkpoint after every rollout, no TensorBoard, no progress bar."""
    from skrl_marl_ext.runner import Runner

    cfg = Runner.load_cfg_from_yaml(installed_yaml(algo))
    cfg["agent"]["class"] = algo.upper()
    experiment = cfg["agent"]["experiment"]
    experiment.update(directory=directory, experiment_name=name, write_interval=0)
    experiment["checkpoint_interval"] = cfg["agent"]["rollouts"]
    cfg["trainer"].update(timesteps=timesteps, disable_progressbar=True, headless=True, close_environment_at_exit=False)
    return cfg


def _parameters(agent) -> dict[str, list]:
    return {
        uid: [p.detach().clone() for model in agent.models[uid].values() for p in model.parameters()]
        for uid in agent.possible_agents
    }


def _changed(before: dict[str, list], agent) -> bool:
    """Whether every agent's parameters moved."""
    import torch

    after = _parameters(agent)
    return all(any(not torch.equal(a, b) for a, b in zip(before[uid], after[uid], strict=True)) for uid in before)


def _progress(path: str) -> list[int]:
    import torch

    return sorted({modules["progress"]["timestep"] for modules in torch.load(path, weights_only=True).values()})


def _play(env, ours, theirs) -> tuple[float, float]:
    """Both agents, in evaluation mode, act on the same observations for ``PLAY_STEPS`` steps; the env steps with
    skrl's mean actions, as ``isaaclab play`` does. Returns ``(max |ours - skrl's|, max |skrl's|)``."""
    import torch

    for agent in (ours, theirs):
        agent.enable_training_mode(False, apply_to_models=True)
    observations, _ = env.reset()
    states = env.state()
    difference, scale = 0.0, 0.0
    with torch.inference_mode():
        for _ in range(PLAY_STEPS):
            mine = ours.act(observations, states, timestep=0, timesteps=0)[-1]
            skrl = theirs.act(observations, states, timestep=0, timesteps=0)[-1]
            actions = {uid: skrl[uid]["mean_actions"] for uid in env.possible_agents}
            for uid in env.possible_agents:
                difference = max(difference, (mine[uid]["mean_actions"] - actions[uid]).abs().max().item())
                scale = max(scale, actions[uid].abs().max().item())
            observations, *_ = env.step(actions)
            states = env.state()
    return difference, scale


def run_algorithm(env, algo: str, directory: str) -> dict:
    from skrl.utils.runner.torch import Runner as SkrlRunner

    from skrl_marl_ext.runner import Runner

    rollouts = Runner.load_cfg_from_yaml(installed_yaml(algo))["agent"]["rollouts"]
    report: dict = {"yaml": installed_yaml(algo), "rollouts": rollouts}
    runner = Runner(env, _cfg(algo, directory, "trained", 2 * rollouts))
    report["agent"] = type(runner.agent).__name__
    before = _parameters(runner.agent)
    runner.run("train")
    report["trained"] = _changed(before, runner.agent)
    folder = os.path.join(directory, "trained", "checkpoints")
    report["checkpoints"] = sorted(os.listdir(folder))
    checkpoint = os.path.join(folder, f"agent_{2 * rollouts}.pt")
    report["progress"] = _progress(checkpoint)

    skrl_cfg = _cfg(algo, directory, "played", rollouts)
    skrl_cfg["agent"]["class"] = SKRL_CLASS[algo]
    skrl_cfg["agent"]["experiment"]["checkpoint_interval"] = 0
    theirs = SkrlRunner(env, skrl_cfg).agent
    theirs.load(checkpoint)
    report["skrl_agent"] = f"{type(theirs).__module__}.{type(theirs).__name__}"
    ours = Runner(env, _cfg(algo, directory, "loaded", rollouts)).agent
    ours.load(checkpoint)
    report["mean_action_difference"], report["mean_action_scale"] = _play(env, ours, theirs)

    resumed = Runner(env, _cfg(algo, directory, "resumed", rollouts))
    resumed.agent.load(checkpoint)
    before = _parameters(resumed.agent)
    resumed.run("train")
    report["resumed_trained"] = _changed(before, resumed.agent)
    folder = os.path.join(directory, "resumed", "checkpoints")
    report["resumed_checkpoints"] = sorted(os.listdir(folder))
    report["resumed_progress"] = _progress(os.path.join(folder, f"agent_{3 * rollouts}.pt"))
    return report


def runner_command(out: str, algos: list[str], num_envs: int) -> None:
    from skrl.envs.wrappers.torch import wrap_env

    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from isaaclab_smoke import make_env

    env, launch = make_env(num_envs, seed=42)
    wrapped = wrap_env(env, "isaaclab")
    report = {"wrapper": type(wrapped).__name__, "num_envs": wrapped.num_envs, "algorithms": {}}
    with tempfile.TemporaryDirectory() as directory:
        for algo in algos:
            report["algorithms"][algo] = run_algorithm(wrapped, algo, os.path.join(directory, algo))
    env.close()
    launch.__exit__(None, None, None)
    with open(out, "w") as file:
        json.dump(report, file, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("runner")
    runner.add_argument("out")
    runner.add_argument("--algos", nargs="+", default=["mappo", "ippo", "happo"])
    runner.add_argument("--num_envs", type=int, default=8)
    args = parser.parse_args()
    runner_command(args.out, args.algos, args.num_envs)


if __name__ == "__main__":
    main()
